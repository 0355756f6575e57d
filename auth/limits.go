package auth

import (
	"math"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// runtime is a principal's state in this process. A reload hands the same
// runtime to the new Principal of a name it keeps, so a rotated key or changed
// limit neither refills the bucket nor forgets the long-polls in flight; a name
// the reload drops takes its runtime with it once its last request ends.
type runtime struct {
	limiter    atomic.Pointer[rate.Limiter] // nil: no rate_per_s
	waiters    atomic.Int64
	maxWaiters atomic.Int64 // 0: no max_waiters
}

func newRuntime() *runtime { return &runtime{} }

// configure applies a key entry's limits, keeping the tokens and the count.
func (rt *runtime) configure(perSecond float64, maxWaiters int) {
	rt.maxWaiters.Store(int64(maxWaiters))
	if perSecond <= 0 {
		rt.limiter.Store(nil)
		return
	}
	burst := max(1, int(math.Ceil(2*perSecond)))
	if l := rt.limiter.Load(); l != nil {
		l.SetLimit(rate.Limit(perSecond))
		l.SetBurst(burst)
		return
	}
	rt.limiter.Store(rate.NewLimiter(rate.Limit(perSecond), burst))
}

// Allow takes one request from the principal's token bucket (rate_per_s, burst
// twice that). When the bucket is empty it returns false and how long until a
// token is there, rounded up to whole seconds and at least one second: the
// Retry-After of the 429. A principal without rate_per_s is always allowed.
func (p *Principal) Allow() (ok bool, retryAfter time.Duration) {
	l := p.rt.limiter.Load()
	if l == nil {
		return true, 0
	}
	now := time.Now()
	if l.AllowN(now, 1) {
		return true, 0
	}
	wait := time.Duration((1 - l.TokensAt(now)) / float64(l.Limit()) * float64(time.Second))
	return false, wholeSeconds(wait)
}

// wholeSeconds rounds d up to whole seconds, at least one.
func wholeSeconds(d time.Duration) time.Duration {
	s := (d + time.Second - 1) / time.Second
	return max(s, 1) * time.Second
}

// AcquireWaiter counts one more long-poll of the principal, unless it already
// has max_waiters of them in this process; then it returns false (429
// too-many-waiters). Every true must be matched by one ReleaseWaiter.
func (p *Principal) AcquireWaiter() bool {
	rt := p.rt
	for {
		n := rt.waiters.Load()
		if m := rt.maxWaiters.Load(); m > 0 && n >= m {
			return false
		}
		if rt.waiters.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// ReleaseWaiter ends a long-poll that AcquireWaiter counted.
func (p *Principal) ReleaseWaiter() { p.rt.waiters.Add(-1) }

// MaxWaiters returns the most long-polls the principal may have in this process
// at once (0: no limit of its own, as for the built-in principals), and whether
// that is the server's default for keys without max_waiters rather than the
// key's own max_waiters.
func (p *Principal) MaxWaiters() (n int, byDefault bool) { return p.maxWaiters, p.waitersByDefault }

// Caps are a principal's caps on live objects: how many holds, tickets and
// sessions it may have in Redis at once, all Baton processes together (the
// store counts them where they live); 0: none.
type Caps struct {
	Holds, Tickets, Sessions int
}

// or is c with each cap it leaves at 0 taken from def.
func (c Caps) or(def Caps) Caps {
	pick := func(a, b int) int {
		if a > 0 {
			return a
		}
		return b
	}
	return Caps{Holds: pick(c.Holds, def.Holds), Tickets: pick(c.Tickets, def.Tickets), Sessions: pick(c.Sessions, def.Sessions)}
}

// Caps returns the principal's caps on live objects in force: a key's own
// max_holds, max_tickets and max_sessions, each it leaves out the server's
// default (Config.KeyCaps); the built-in principals' are Config.BuiltinCaps,
// none unless set.
func (p *Principal) Caps() Caps { return p.caps }

// OwnCaps returns the caps a key's entry sets itself (0 for each it leaves
// to the server's default, and for the built-in principals): where each cap
// of Caps comes from.
func (p *Principal) OwnCaps() Caps { return p.ownCaps }

// Waiters returns how many long-polls the principal has in this process now.
func (p *Principal) Waiters() int { return int(p.rt.waiters.Load()) }
