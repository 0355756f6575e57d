package handlers

import (
	"context"
	"fmt"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton/park"
	"github.com/batonhq/baton/store"
)

// reply writes a store call's answer, as a handler would.
type reply func(w http.ResponseWriter, log *zerolog.Logger)

// serveWait serves a request whose store call may wait up to wait (a long-poll):
// call starts it on ctx and hands its answer to done, at once or when the wait
// ends. The wait counts against the principal's max_waiters until answered.
//
// When the call does not answer at once, the request's connection parks (Deps.Lot,
// package park): this handler returns, net/http's goroutine and buffers for the
// connection are freed, one poller watches the socket for a hang-up (which
// cancels ctx, as net/http's request context was), and the answer is written when
// it comes, then logged and counted here rather than by observe. Whatever cannot
// park (no lot, HTTP/2, a body not read to its end, a server shutting down)
// waits on this goroutine and is answered as before.
func (s *server) serveWait(w http.ResponseWriter, r *http.Request, wait time.Duration, call func(ctx context.Context, done func(reply))) {
	release, err := waitSlot(r, wait)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	log := zerolog.Ctx(r.Context())
	info := infoOf(r)
	// The request may wait anyway: its store calls may wait that long for a
	// turn on a Redis connection (a burst of long-polls is absorbed, not
	// refused as overloaded).
	until := time.Now().Add(wait)
	if s.lot == nil || wait <= 0 || info == nil {
		defer release()
		p := &pending{}
		call(store.WithPatience(r.Context(), until), p.set)
		p.wait()(w, log)
		return
	}
	// The call's own context: net/http's ends when this handler returns, which
	// a parked request does long before its answer. It keeps of the request's
	// only its span, so that the store's Redis calls stay the request's
	// children in a trace.
	ctx, cancel := context.WithCancel(store.WithPatience(
		trace.ContextWithSpanContext(context.Background(), trace.SpanContextFromContext(r.Context())), until))
	unlink := context.AfterFunc(r.Context(), cancel)
	p := &pending{}
	// During a burst the call waits for its turn (InTurn) while the
	// connection parks, not on this goroutine with net/http's buffers.
	s.store.InTurn(ctx, func(ctx context.Context) { call(ctx, p.set) })
	if a := p.answered(); a != nil {
		defer release()
		defer cancel()
		a(w, log)
		return
	}
	bodyRead := r.Body == nil || r.Body == http.NoBody || info.bodyRead
	spot, err := s.lot.Park(w, r, bodyRead, info.start, cancel)
	if err != nil {
		defer release()
		defer cancel()
		p.wait()(w, log)
		return
	}
	unlink() // the poller reports hang-ups from now on
	info.parked = true
	q := &parkedReq{s: s, spot: spot, release: release, cancel: cancel,
		id: requestIDOf(r), traceID: traceIDOf(r.Context()), method: r.Method, route: routeOf(r), principal: info.principal, start: info.start}
	if a := p.divert(q.answer); a != nil {
		q.answer(a) // it came while the connection parked
	}
}

// parkedReq is what a parked request keeps until its answer: nothing of
// net/http's, not even the request's logger (made again for the answer).
type parkedReq struct {
	s                                     *server
	spot                                  *park.Spot
	release, cancel                       func()
	id, traceID, method, route, principal string
	start                                 time.Time
}

// answer writes the answer, then logs and counts the request as observe would
// have. A panic while writing it gets the recoverer's answer: the middleware is
// long gone.
func (q *parkedReq) answer(a reply) {
	log := q.s.log.With().Str("request_id", q.id).Logger()
	w := q.spot.ResponseWriter()
	func() {
		defer func() {
			if v := recover(); v != nil {
				writeError(w, &log, fmt.Errorf("panic: %v\n%s", v, debug.Stack()))
			}
		}()
		a(w, &log)
	}()
	code, n := q.spot.Finish()
	q.release()
	q.cancel()
	q.s.record(q.id, q.traceID, q.method, q.route, q.principal, code, n, q.start)
}

// pending is a store call's answer on its way to whoever takes it: this
// goroutine, or the parked connection's writer.
type pending struct {
	mu    sync.Mutex
	a     reply
	to    func(reply)
	ready chan struct{} // made by wait, closed once a is set
}

// set is the call's done: it keeps the answer, or sends it where divert said.
func (p *pending) set(a reply) {
	p.mu.Lock()
	to := p.to
	if to == nil {
		p.a = a
		if p.ready != nil {
			close(p.ready)
		}
	}
	p.mu.Unlock()
	if to != nil {
		to(a)
	}
}

// answered is the answer if it has come.
func (p *pending) answered() reply {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.a
}

// wait waits for the answer.
func (p *pending) wait() reply {
	p.mu.Lock()
	if p.a != nil {
		p.mu.Unlock()
		return p.a
	}
	if p.ready == nil {
		p.ready = make(chan struct{})
	}
	ready := p.ready
	p.mu.Unlock()
	<-ready
	return p.answered()
}

// divert has the answer go to f when it comes; if it has come already, it
// returns it instead.
func (p *pending) divert(f func(reply)) reply {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.a != nil {
		return p.a
	}
	p.to = f
	return nil
}
