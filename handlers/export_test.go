package handlers

import "time"

// SetAuditLimits sets the window and burst of the 401 audit of every server
// made from now on, and returns what restores them.
func SetAuditLimits(window time.Duration, burst int) (restore func()) {
	w, b := auditWindow.Load(), auditBurst.Load()
	auditWindow.Store(int64(window))
	auditBurst.Store(int64(burst))
	return func() { auditWindow.Store(w); auditBurst.Store(b) }
}
