package client

import "time"

// SetWaitChunk sets the longest wait Lock asks of the server in one request,
// until the returned function restores it.
func SetWaitChunk(d time.Duration) (restore func()) {
	old := waitChunk
	waitChunk = d
	return func() { waitChunk = old }
}
