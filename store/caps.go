package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Caps on live objects. One principal (an API key) may have at most
// Caps.Holds holds, Caps.Tickets tickets and Caps.Sessions sessions in Redis
// at once, so that no key can fill the Redis every key shares. Each kind is
// counted where the objects live, in Redis: a sorted set per kind in the
// principal's own slot (P:u:{<principal id>}:h, :t and :s) of member ->
// deadline (Redis ms), the member being the hash Redis already knows the
// object by (its lease's, ticket's or session's; never an id).
//
//   - Admission: before a hold, ticket or session is asked for, one MULTI
//     prunes the members whose deadline has passed (ZREMRANGEBYSCORE), adds
//     the request's own member with a deadline no earlier than its object
//     could end (ZADD NX), makes the set expire no earlier than that, and
//     counts (ZCARD). Over the cap the member is taken out again and the
//     request refused (*CapError, before anything is made). A member that was
//     there already (a retry with the same Idempotency-Key) is counted once
//     and never refused, and keeps its deadline until the retry's answer
//     (a retry refused, as one with another body is, moves nothing); nor is
//     a fair retry whose request was granted (its hold is counted).
//     Admissions are exact against each other: a request in flight (one that
//     waits for a lock too) holds its place until its answer.
//   - The answer settles it: nothing made, the member is taken out; a hold
//     made, its member gets the hold's deadline (a fair request's ticket
//     member becomes its hold's).
//   - A renewal or re-entry moves the deadline (ZADD XX); a release that ends
//     the hold, a cancel, a session's end take members out (ZREM); a poll
//     moves its ticket's deadline past the poll, and a poll answered with the
//     lease moves the ticket to the holds. Expiry needs nothing: the next
//     admission prunes it.
//   - A set expires with its latest deadline (PEXPIREAT NX, then GT), so a
//     principal whose objects have all ended leaves nothing in Redis.
//
// Nothing spans slots atomically (Redis Cluster): these are calls of their
// own on the principal's slot, beside the lock's or session's script (calls
// to one slot, one round trip each). So the count can be off, briefly: by a
// key's requests in flight whose bookkeeping after the script failed (Redis
// trouble; a member then stays until its deadline, or goes at the deadline
// it had); by a hold ended by force, counted until its own deadline (force
// does not know whose holds it ends); on a cluster, by the skew between the
// lock's master's clock (the deadlines) and the principal's (the pruning).
// And a ticket granted while its key is at its hold cap still becomes a hold:
// a fair request is refused at the hold cap, but a ticket already queued is
// not taken back, so a key's holds stay below max_holds plus its tickets.
// Every member ends at its deadline whatever happened: nothing is off for
// long, and nothing stays behind.

// Caps bound what one principal may have in Redis at once; 0: no cap, and no
// bookkeeping (no Redis command) for that kind.
type Caps struct {
	Holds    int // holds: exclusive or shared, alone or in a session
	Tickets  int // tickets in a fair queue, until granted and claimed
	Sessions int // sessions
}

// The kinds a CapError names.
const (
	KindHolds    = "holds"
	KindTickets  = "tickets"
	KindSessions = "sessions"
)

// CapError is a request refused because its principal is at a cap.
type CapError struct {
	Kind  string // KindHolds, KindTickets or KindSessions
	Limit int    // the cap
	// RetryAfter is when the soonest of the principal's objects of that kind
	// ends by itself, at least a second and at most a minute from now (an
	// object may also end sooner: released, cancelled).
	RetryAfter time.Duration
}

func (e *CapError) Error() string { return fmt.Sprintf("cap of %d live %s reached", e.Limit, e.Kind) }

// Is makes errors.Is(err, ErrCapReached) true.
func (e *CapError) Is(target error) bool { return target == ErrCapReached }

const (
	// capSlack is added to a member's provisional deadline (its admission's
	// guess of the latest its object can end); a hold's real deadline within
	// capSettleSlack of that guess is left as guessed, saving a call.
	capSlack       = time.Second
	capSettleSlack = 2 * time.Second
	// capCallTimeout bounds one bookkeeping call.
	capCallTimeout = 2 * time.Second
	// The Retry-After of a refusal is between these.
	capRetryMin, capRetryMax = time.Second, time.Minute
)

// capKey is the principal's set of kind k ('h', 't' or 's'): in the slot of
// its id, apart from every lock's and session's.
func (s *Store) capKey(by string, k byte) string {
	return s.opt.Prefix + ":u:{" + by + "}:" + string(k)
}

// capNow is the estimated time (unix ms) of the Redis that holds key.
// Errors: ErrUnavailable when its clock cannot be estimated.
func (s *Store) capNow(ctx context.Context, key string) (int64, error) {
	st, err := s.stamp(ctx, key)
	if err != nil {
		return 0, err
	}
	na, err := strconv.ParseInt(st.notAfter, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("caps: %w", err)
	}
	return na - callBudget.Milliseconds(), nil
}

// capsExec sends fn's commands to the principal's slot (key is any of its
// sets) in one round trip, in a turn on a connection (admission.go; a wait
// for it past the queue's bounds is ErrOverloaded): as one MULTI/EXEC with tx
// (an admission: no other admission between its count and its add). The call
// does not end when the request's client goes away.
func (s *Store) capsExec(ctx context.Context, key string, tx bool, fn func(p redis.Pipeliner)) error {
	s.inFlight.RLock()
	defer s.inFlight.RUnlock()
	if s.closed {
		return fmt.Errorf("caps: store closed: %w", ErrUnavailable)
	}
	if s.opt.Gate.Down() {
		return fmt.Errorf("caps: %w: redis is down (health gate)", ErrUnavailable)
	}
	ctx = context.WithoutCancel(ctx)
	t := s.turnsFor(key)
	if err := t.enter(ctx); err != nil { // bounded by the queue's own bounds
		return fmt.Errorf("caps: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, capCallTimeout)
	defer cancel()
	f := func(p redis.Pipeliner) error { fn(p); return nil }
	var err error
	if tx {
		_, err = s.rdb.TxPipelined(ctx, f)
	} else {
		_, err = s.rdb.Pipelined(ctx, f)
	}
	t.leave(err == nil)
	if err != nil {
		return s.storeErr("caps", err)
	}
	return nil
}

// capTidy is capsExec for the bookkeeping after a script: best effort, since
// what it fixes ends at its deadline anyway.
func (s *Store) capTidy(ctx context.Context, key string, fn func(p redis.Pipeliner)) {
	if err := s.capsExec(ctx, key, false, fn); err != nil {
		s.opt.Logger.Debug().Err(err).Msg("caps: a count could not be updated; it is right again at the object's deadline")
	}
}

// capAdd adds (or moves) member with deadline d in key, and makes key expire
// no earlier: NX sets an expiry on a set that has none, GT extends one
// (GT alone would treat a set without expiry as never expiring).
func capAdd(ctx context.Context, p redis.Pipeliner, key, member string, d int64, args redis.ZAddArgs) {
	args.Members = []redis.Z{{Score: float64(d), Member: member}}
	p.ZAddArgs(ctx, key, args)
	capExpire(ctx, p, key, d)
}

func capExpire(ctx context.Context, p redis.Pipeliner, key string, d int64) {
	p.Do(ctx, "PEXPIREAT", key, d, "NX")
	p.Do(ctx, "PEXPIREAT", key, d, "GT")
}

// capRefusal takes the members an admission added back out of their sets and
// returns the *CapError for kind, its Retry-After from the soonest deadline
// in key (the refused kind's set).
func (s *Store) capRefusal(ctx context.Context, key string, now int64, kind string, limit int, added map[string]string) error {
	var first *redis.ZSliceCmd
	_ = s.capsExec(ctx, key, false, func(p redis.Pipeliner) {
		for k, m := range added {
			p.ZRem(ctx, k, m)
		}
		first = p.ZRangeWithScores(ctx, key, 0, 0)
	})
	retry := capRetryMin
	if first != nil && len(first.Val()) == 1 {
		retry = time.Duration(int64(first.Val()[0].Score)-now) * time.Millisecond
		retry = min(max(retry, capRetryMin), capRetryMax)
	}
	return &CapError{Kind: kind, Limit: limit, RetryAfter: retry}
}
