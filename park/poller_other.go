//go:build !linux

package park

import "errors"

// poller is Linux's epoll; elsewhere New says parking is unsupported and every
// long-poll stays on net/http's goroutine.
type poller struct{}

type event uint8

const (
	evReadable event = 1 << iota
	evHangUp
)

var errUnsupported = errors.New("park: parking needs epoll (Linux)")

func newPoller(func(uint64, event)) (*poller, error)                   { return nil, errUnsupported }
func (p *poller) watch(fd int, token uint64, readable, add bool) error { return errUnsupported }
func (p *poller) forget(fd int)                                        {}
func (p *poller) close()                                               {}

var errAgain = errors.New("park: nothing to read")

func peek(fd int) (int, error) { return -1, errUnsupported }
