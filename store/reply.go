package store

import (
	"fmt"
	"strconv"
	"time"
)

// reply is a script's answer: a code and its values. This file is the one place
// that knows the shape of the replies listed at the head of each lua/ file.
type reply struct {
	code string
	v    []any
}

func decodeReply(v []any) (reply, error) {
	if len(v) == 0 {
		return reply{}, fmt.Errorf("empty script reply")
	}
	code, ok := v[0].(string)
	if !ok {
		return reply{}, fmt.Errorf("script reply code %T", v[0])
	}
	return reply{code: code, v: v[1:]}, nil
}

// int reads value i, which Redis sends as an integer or, for numbers past 2^31
// (fences, times), as a string. Missing values read as 0.
func (r reply) int(i int) int64 {
	if i >= len(r.v) {
		return 0
	}
	switch x := r.v[i].(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	default:
		return 0
	}
}

func (r reply) str(i int) string {
	if i >= len(r.v) {
		return ""
	}
	s, _ := r.v[i].(string)
	return s
}

func (r reply) ms(i int) time.Duration {
	n := r.int(i)
	if n < 0 {
		n = 0
	}
	return time.Duration(n) * time.Millisecond
}

func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// lease decodes {code, fence, count, pttl, at, owner, ttl, now, shared, limit}.
func (r reply) lease(name, id string) *Lease {
	now := r.int(6)
	ttl := r.ms(2)
	l := &Lease{
		Name:       name,
		ID:         id,
		Fence:      r.int(0),
		Count:      int(r.int(1)),
		TTL:        ttl,
		ExpiresAt:  fromMillis(now).Add(ttl),
		Owner:      r.str(4),
		AcquiredAt: fromMillis(r.int(3)),
		Shared:     r.int(7) == 1,
	}
	if l.Shared {
		l.Limit = int(r.int(8))
	}
	return l
}

// held decodes {'busy', pttl, owner, waiters, wake}.
func (r reply) held() *HeldError {
	return &HeldError{TTL: r.ms(0), Owner: r.str(1), Waiters: int(r.int(2)), wake: r.ms(3)}
}

// ticket decodes {'queued', position, waiters, pttl, ticket ttl}.
func (r reply) ticket(name, id string) *Ticket {
	return &Ticket{Name: name, ID: id, Position: int(r.int(0)), TicketTTL: r.ms(3)}
}

// queuedHolderTTL is, in a 'queued' reply, the time until something may change
// unannounced: the soonest hold's end, or the head ticket's.
func (r reply) queuedHolderTTL() time.Duration { return r.ms(2) }

// lockState decodes {'state', mode, limit, waiters, now, last fence, holders,
// top fence, top count, top owner, longest pttl, then per listed hold: fence,
// count, pttl, owner, shared}.
func (r reply) lockState(name string) State {
	now := fromMillis(r.int(3))
	st := State{
		Name:    name,
		Mode:    ModeFree,
		Waiters: int(r.int(2)),
		Holders: int(r.int(5)),
		Fence:   r.int(4),
	}
	switch r.str(0) {
	case "x":
		st.Mode = ModeExclusive
	case "s":
		st.Mode = ModeShared
		st.Limit = int(r.int(1))
	}
	st.Held = st.Holders > 0
	if !st.Held {
		return st
	}
	st.Fence, st.Count, st.Owner = r.int(6), int(r.int(7)), r.str(8)
	st.TTL = r.ms(9)
	st.ExpiresAt = now.Add(st.TTL)
	for i := 10; i+4 < len(r.v); i += 5 {
		ttl := r.ms(i + 2)
		st.Holds = append(st.Holds, Hold{
			Fence: r.int(i), Count: int(r.int(i + 1)), TTL: ttl, ExpiresAt: now.Add(ttl),
			Owner: r.str(i + 3), Shared: r.int(i+4) == 1,
		})
	}
	return st
}

// session decodes {code, ttl, remaining, now, owner, members...}.
func (r reply) session(id string) Session {
	remaining := r.ms(1)
	return Session{ID: id, TTL: r.ms(0), Remaining: remaining, ExpiresAt: fromMillis(r.int(2)).Add(remaining), Owner: r.str(3)}
}

// members are a session reply's members.
func (r reply) members() []string {
	var out []string
	for i := 4; i < len(r.v); i++ {
		out = append(out, r.str(i))
	}
	return out
}

func unexpected(op string, r reply) error {
	return fmt.Errorf("%s: unexpected script reply %q", op, r.code)
}
