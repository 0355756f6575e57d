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

// lease decodes {code, fence, count, pttl, at, owner, ttl, now}.
func (r reply) lease(name, id string) *Lease {
	now := r.int(6)
	ttl := r.ms(2)
	return &Lease{
		Name:       name,
		ID:         id,
		Fence:      r.int(0),
		Count:      int(r.int(1)),
		TTL:        ttl,
		ExpiresAt:  fromMillis(now).Add(ttl),
		Owner:      r.str(4),
		AcquiredAt: fromMillis(r.int(3)),
	}
}

// held decodes {'busy', pttl, owner, waiters}.
func (r reply) held() *HeldError {
	return &HeldError{TTL: r.ms(0), Owner: r.str(1), Waiters: int(r.int(2))}
}

// ticket decodes {'queued', position, waiters, pttl, ticket ttl}.
func (r reply) ticket(name, id string) *Ticket {
	return &Ticket{Name: name, ID: id, Position: int(r.int(0)), TicketTTL: r.ms(3)}
}

// queuedHolderTTL is the lock's remaining lease in a 'queued' reply.
func (r reply) queuedHolderTTL() time.Duration { return r.ms(2) }

// lockState decodes {'state', held, owner, count, fence, pttl, waiters, now}.
func (r reply) lockState(name string) State {
	st := State{
		Name:    name,
		Held:    r.int(0) == 1,
		Owner:   r.str(1),
		Count:   int(r.int(2)),
		Fence:   r.int(3),
		Waiters: int(r.int(5)),
	}
	if st.Held {
		st.TTL = r.ms(4)
		st.ExpiresAt = fromMillis(r.int(6)).Add(st.TTL)
	}
	return st
}

func unexpected(op string, r reply) error {
	return fmt.Errorf("%s: unexpected script reply %q", op, r.code)
}
