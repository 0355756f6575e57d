package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/lua"
)

// benchClientName names every Redis connection this program makes, so that the
// waiters scenario can tell them from Baton's in CLIENT LIST.
const benchClientName = "bench"

// newRedisClient is the load generator's go-redis client: a pool as large as the
// highest concurrency, so that no call waits for a connection.
func newRedisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:       addr,
		ClientName: benchClientName,
		PoolSize:   256,
		MaxRetries: -1,
	})
}

// scriptLocker calls Baton's own acquire and release scripts directly, with the
// store's key layout and arguments: what Baton does per request minus HTTP.
type scriptLocker struct {
	rdb    *redis.Client
	prefix string
	ttlMs  int64 // lease of pair
	lib    *lua.Library
}

// newScriptLocker has Baton's defaults: a 1 h fence guard, 30 s leases.
func newScriptLocker(rdb *redis.Client, prefix string) *scriptLocker {
	return newScriptLockerWith(rdb, prefix, time.Hour, 30*time.Second)
}

// newScriptLockerWith builds the scripts with fence guard guard (what
// BATON_FENCE_GUARD sets in Baton); pair takes leases of ttl.
func newScriptLockerWith(rdb *redis.Client, prefix string, guard, ttl time.Duration) *scriptLocker {
	set := lua.Settings{FenceGuardMs: guard.Milliseconds(), IdempotencyGraceMs: benchLua.IdempotencyGraceMs}
	return &scriptLocker{rdb: rdb, prefix: prefix, ttlMs: ttl.Milliseconds(), lib: lua.Build(set)}
}

// args are acquire.lua's ARGV as Baton's store sends them for a request of
// mode ('new' or 'fair') under lease hash lh, with no principal, owner,
// idempotency key or session, and a "not after" an hour away. A fair request
// names its ticket (th, granted under tlh) and its wait: pollMs under poll id
// pid, so that the ticket's grant is handed to a waiter that is listening, as
// Baton's long-poll does.
func (s *scriptLocker) args(lh string, ttlMs int64, mode, th, tlh string, shared bool, pollMs int64, pid string) []any {
	return lua.AcquireArgs{NotAfter: notAfter(), Mode: mode, Lease: lh, TTL: ttlMs, Shared: lua.Flag(shared),
		Limit: "0", Maker: pollID(), Ticket: th, TicketLease: tlh, TicketTTL: ticketTTLMs, Poll: pollMs,
		PollID: pid}.List()
}

func notAfter() string { return strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10) }

// ticketTTLMs is Baton's default ticket ttl (BATON_TICKET_TTL).
const ticketTTLMs = 10000

// keys are a lock's script keys: its key, from which the script derives the rest.
func (s *scriptLocker) keys(name string) []string {
	return []string{s.prefix + ":{" + name + "}"}
}

// call runs the library's function op, loading the library first if need be.
func (s *scriptLocker) call(ctx context.Context, op string, keys []string, args []any) ([]any, error) {
	v, err := s.rdb.FCall(ctx, s.lib.Func[op], keys, args...).Slice()
	if redis.HasErrorPrefix(err, "Function not found") {
		if err := s.rdb.FunctionLoadReplace(ctx, s.lib.Code).Err(); err != nil {
			return nil, err
		}
		v, err = s.rdb.FCall(ctx, s.lib.Func[op], keys, args...).Slice()
	}
	return v, err
}

// pair acquires and releases name, as Baton's store does for a free lock: a fresh
// 128-bit lease id whose hash is what Redis keeps.
func (s *scriptLocker) pair(ctx context.Context, name string) error {
	return s.pairMode(ctx, name, false)
}

// pairMode is pair, for a shared hold when shared is set.
func (s *scriptLocker) pairMode(ctx context.Context, name string, shared bool) error {
	lh := leaseHash()
	keys := s.keys(name)
	if err := s.acquire(ctx, keys, s.args(lh, s.ttlMs, "new", "", "", shared, 0, ""), "granted"); err != nil {
		return err
	}
	return s.release(ctx, keys, lh)
}

// acquire runs the acquire script and checks that it answered want.
func (s *scriptLocker) acquire(ctx context.Context, keys []string, args []any, want string) error {
	v, err := s.call(ctx, "acquire", keys, args)
	if err != nil {
		return fmt.Errorf("acquire script: %w", err)
	}
	if code, _ := v[0].(string); code != want {
		return fmt.Errorf("acquire script: %v, want %s", v[0], want)
	}
	return nil
}

// release releases one hold of lease hash lh on the lock of keys.
func (s *scriptLocker) release(ctx context.Context, keys []string, lh string) error {
	v, err := s.call(ctx, "release", keys, lua.ReleaseArgs{NotAfter: notAfter(), Lease: lh}.List())
	if err != nil {
		return fmt.Errorf("release script: %w", err)
	}
	if code, _ := v[0].(string); code != "released" {
		return fmt.Errorf("release script: %v", v[0])
	}
	return nil
}

// pollID names one wait on a ticket, as the store's poll ids do.
func pollID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func leaseHash() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	sum := sha256.Sum256([]byte(base64.RawURLEncoding.EncodeToString(b[:])))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// redislockLocker is github.com/bsm/redislock in process, on the same Redis.
type redislockLocker struct {
	c      *redislock.Client
	prefix string
	ttl    time.Duration
}

func newRedislockLocker(rdb *redis.Client, prefix string) *redislockLocker {
	return &redislockLocker{c: redislock.New(rdb), prefix: prefix, ttl: 30 * time.Second}
}

func (r *redislockLocker) pair(ctx context.Context, name string) error {
	l, err := r.c.Obtain(ctx, r.prefix+name, r.ttl, nil)
	if err != nil {
		return fmt.Errorf("obtain: %w", err)
	}
	if err := l.Release(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// scriptHandoff is the handoff floor of Baton's design without HTTP: fair tickets
// queued with Baton's acquire script, the release script granting the head ticket
// and publishing the grant, one pub/sub subscription dispatching grants to the
// waiters, each of which releases at once with the lease its ticket was granted.
func scriptHandoff(rdb *redis.Client, s *scriptLocker) handoffRound {
	return func(ctx context.Context, name string, n int, ch *chain) error {
		keys := s.keys(name)
		holder := leaseHash()
		v, err := s.call(ctx, "acquire", keys, s.args(holder, 60000, "new", "", "", false, 0, ""))
		if err != nil {
			return err
		}
		if code, _ := v[0].(string); code != "granted" {
			return fmt.Errorf("holder of %q: %v", name, v[0])
		}
		ps := rdb.Subscribe(ctx, keys[0]+":ev")
		defer ps.Close()
		if _, err := ps.Receive(ctx); err != nil {
			return err
		}
		waiters := map[string]int{} // ticket hash -> arrival index
		leases := make([]string, n) // the lease hash each ticket is granted under
		for i := range n {
			th := leaseHash()
			leases[i] = leaseHash()
			v, err := s.call(ctx, "acquire", keys, s.args(leaseHash(), 60000, "fair", th, leases[i], false, 60000, pollID()))
			if err != nil {
				return err
			}
			if code, _ := v[0].(string); code != "queued" {
				return fmt.Errorf("waiter %d of %q: %v", i, name, v[0])
			}
			waiters[th] = i
		}
		release := func(lh string) error {
			ch.releasing()
			v, err := s.call(ctx, "release", keys, lua.ReleaseArgs{NotAfter: notAfter(), Lease: lh}.List())
			if err == nil && v[0] != "released" {
				err = fmt.Errorf("release: %v", v[0])
			}
			return err
		}
		if err := release(holder); err != nil {
			return err
		}
		for granted := 0; granted < n; {
			msg, err := ps.ReceiveMessage(ctx)
			if err != nil {
				return err
			}
			th, ok := strings.CutPrefix(msg.Payload, "g:")
			if !ok {
				continue
			}
			th, _, _ = strings.Cut(th, ":")
			i, ok := waiters[th]
			if !ok {
				return fmt.Errorf("grant to an unknown ticket")
			}
			ch.granted(i)
			granted++
			if err := release(leases[i]); err != nil {
				return err
			}
		}
		return nil
	}
}

// benchLua are the scripts' settings in the benchmark: Baton's defaults.
var benchLua = lua.Defaults

// redisCPU is the CPU time a redis-server has used so far by its own count
// (INFO cpu: used_cpu_sys + used_cpu_user, from getrusage, to the microsecond).
func redisCPU(ctx context.Context, rdb *redis.Client) (time.Duration, error) {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, fmt.Errorf("info cpu: %w", err)
	}
	var sum float64
	for _, field := range []string{"used_cpu_sys", "used_cpu_user"} {
		s, err := infoFloat(info, field)
		if err != nil {
			return 0, err
		}
		sum += s
	}
	return time.Duration(sum * float64(time.Second)), nil
}

// infoFloat reads a decimal field of an INFO reply.
func infoFloat(info, field string) (float64, error) {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("INFO has no %s", field)
}
