package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/store/redisconn"
)

// The dispatcher's reader: each link's messages, pongs and subscription
// replies, dispatched to the waiters of their channel.

// healthEvery is how long the connection may go without a pong before a ping;
// pongWait is how long after the ping the pong may take before the connection
// is taken for dead. go-redis reconnects on an error, but a read timeout is no
// error to it, and writes to a dead peer succeed until TCP gives up, minutes on.
const healthEvery, pongWait = time.Second, 2 * time.Second

// receive reads link l's connection until close. On one Redis, go-redis
// reconnects and resubscribes by itself after an error; the confirmations that
// follow make every waiter of those channels re-check. On a cluster the link
// is renewed instead (its channels span slots, and go-redis would send them in
// one SSUBSCRIBE, which a cluster refuses). A connection silent for
// healthEvery is pinged, and renewed when pongWait passes without a word.
//
// The pause after an error stays short: go-redis has usually re-established the
// connection already when the error comes back, and nothing is read (no
// confirmation, no release) while this loop sleeps, so the pause is how long a
// waiter may sleep through a free lock once Redis is back.
func (d *dispatcher) receive(l *link) {
	defer d.wg.Done()
	const minBackoff, maxBackoff = 10 * time.Millisecond, 100 * time.Millisecond
	backoff := minBackoff
	ctx := context.Background()
	lastPong := time.Now()
	var pinged time.Time // when a ping went out unanswered; zero when none
	for {
		d.mu.Lock()
		ps := l.ps
		d.mu.Unlock()
		msg, err := ps.ReceiveTimeout(ctx, healthEvery)
		select {
		case <-d.done:
			return
		case <-l.done:
			return
		default:
		}
		if kind, slotNo, addr, ok := redisconn.Redirect(err); ok && kind == "MOVED" && d.topo != nil {
			// The answer to one SSUBSCRIBE: the connection itself is fine.
			d.moved(l, ps, slotNo, addr)
			continue
		}
		var nerr interface{ Timeout() bool }
		if err != nil && !(errors.As(err, &nerr) && nerr.Timeout()) {
			// go-redis reconnects on an error; the ping went with the old connection,
			// and so may have SUBSCRIBEs and barriers.
			pinged, lastPong = time.Time{}, time.Now()
			d.mu.Lock()
			l.resync = true
			d.mu.Unlock()
			if backoff == minBackoff { // once per outage, not on every retry
				d.log.Warn().Err(err).Str("node", l.addr).Msg("pub/sub connection lost; reconnecting")
			}
			if d.topo != nil {
				d.topo.Refresh()
			}
			select {
			case <-d.done:
				return
			case <-l.done:
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, maxBackoff)
			if d.topo != nil {
				d.renew(l)
			}
			continue
		}
		if err == nil {
			backoff = minBackoff
			d.mu.Lock()
			resync := l.resync && l.ps == ps
			if resync && d.topo == nil {
				d.resubscribeAll(l)
			}
			d.mu.Unlock()
			if resync && d.topo != nil {
				d.renew(l)
				continue
			}
			switch m := msg.(type) {
			case *redis.Pong:
				// Only a pong proves the connection carries what Baton sends:
				// messages from Redis may keep coming on a connection whose other
				// direction is dead (SUBSCRIBEs, barriers and pings lost).
				pinged, lastPong = time.Time{}, time.Now()
				if strings.HasPrefix(m.Payload, barrierPrefix) {
					d.barrierDone(l, m.Payload)
				}
			case *redis.Message:
				d.dispatch(m.Channel, m.Payload)
			case *redis.Subscription:
				switch {
				case d.topo == nil:
				case m.Kind == "ssubscribe":
					d.subscribed(l, ps, m.Channel)
				case m.Kind == "sunsubscribe":
					d.unsubscribed(l, ps, m.Channel)
				}
			}
		}
		switch {
		case pinged.IsZero() && time.Since(lastPong) >= healthEvery:
			// A dead connection answers nothing; a broken one errors here, and
			// go-redis has then reconnected and resubscribed by itself, so the
			// next read brings no error: what was published meanwhile is lost,
			// and the waiters must re-check as after any other loss.
			if err := ps.Ping(ctx); err != nil {
				d.mu.Lock()
				if l.ps == ps {
					l.resync = true
				}
				d.mu.Unlock()
				pinged, lastPong = time.Time{}, time.Now()
				continue
			}
			pinged = time.Now()
		case !pinged.IsZero() && time.Since(pinged) >= pongWait:
			d.log.Warn().Dur("silent", healthEvery+pongWait).Str("node", l.addr).
				Msg("pub/sub connection silent after a ping; replacing it")
			d.renew(l)
			pinged, lastPong = time.Time{}, time.Now()
		}
	}
}

func (d *dispatcher) dispatch(key, payload string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.chans[key]
	if c == nil {
		return
	}
	var th string
	var g *grantMsg
	switch {
	case payload == "r":
		c.wakeOneAcquirer(false)
		c.wakeOneAcquirer(true)
	case payload == "c": // the holds changed: only watchers care
	case strings.HasPrefix(payload, "i:"):
		// An idempotent request was granted: its duplicates waiting here (the
		// same lease hash) answer with its hold.
		for _, w := range c.waiters {
			if w.kind == kindAcquire && w.th == payload[2:] {
				w.notify()
			}
		}
	case strings.HasPrefix(payload, "w:"):
		// A hold now ends sooner than announced (a shorter renewal, a grant
		// turned back into an unclaimed one): look again then.
		if ms, err := strconv.ParseInt(payload[2:], 10, 64); err == nil {
			d.arm(c, time.Duration(ms)*time.Millisecond)
		}
		return
	case strings.HasPrefix(payload, "g:"):
		th, g = parseGrant(payload)
		if g == nil {
			d.log.Error().Msg("malformed grant message")
			return
		}
		g.recv = time.Now()
		d.arm(c, g.window)
	default:
		return
	}
	for _, w := range c.waiters {
		switch {
		case w.kind == kindWatch:
			w.notify()
		case w.kind == kindTicket && g != nil && w.th == th:
			w.grant = g
			w.notify()
		}
	}
}

// grantMsg is a handoff announced on the channel.
type grantMsg struct {
	fence   int64
	at      time.Time
	window  time.Duration
	claimed bool     // granted with the full ttl because the waiter was polling
	polls   []string // the polls in flight it was granted for (their ids); nil: any (an older script)
	shared  bool
	limit   int
	owner   string
	recv    time.Time // when this process received the message, by its own clock
}

// parseGrant reads
// 'g:<ticket hash>:<fence>:<at>:<window>:<claimed>:<shared>:<limit>:<owner>'; the
// owner comes last because it may itself contain ':'.
func parseGrant(p string) (string, *grantMsg) {
	f := strings.SplitN(p, ":", 9)
	if len(f) != 9 {
		return "", nil
	}
	fence, err1 := strconv.ParseInt(f[2], 10, 64)
	at, err2 := strconv.ParseInt(f[3], 10, 64)
	window, err3 := strconv.ParseInt(f[4], 10, 64)
	limit, err4 := strconv.Atoi(f[7])
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return "", nil
	}
	g := &grantMsg{
		fence:   fence,
		at:      fromMillis(at),
		window:  time.Duration(window) * time.Millisecond,
		claimed: f[5] != "0" && f[5] != "",
		shared:  f[6] == "1",
		owner:   f[8],
	}
	if g.shared {
		g.limit = limit
	}
	if polls := strings.Split(f[5], ","); g.claimed && len(polls) > 1 {
		g.polls = polls[1:]
	}
	return f[1], g
}
