package embedded

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/internal/redistest"
)

// Expiry on the embedded store answers as Redis does: every case runs on a real
// redis-server too, against the same expectations.
func TestEmbeddedExpiryAsRedis(t *testing.T) {
	busy := `redis.call('SET', KEYS[1], 'v', 'PX', 1)
local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start > 5000
return redis.call('EXISTS', KEYS[1])`
	tests := []struct {
		name         string
		give         []step
		embeddedOnly bool
	}{
		{name: "pexpire", give: []step{
			{give: args("SET", "k", "v"), want: "OK"},
			{give: args("PEXPIRE", "k", 10000), want: int64(1)},
			{give: args("PTTL", "k"), want: between{9000, 10000}},
			{give: args("TTL", "k"), want: int64(10)},
			{give: args("PEXPIRETIME", "k"), want: unixAbout{10 * time.Second, time.Millisecond}},
			{give: args("EXPIRETIME", "k"), want: unixAbout{10 * time.Second, time.Second}},
		}},
		{name: "expire in seconds", give: []step{
			{give: args("SET", "k", "v"), want: "OK"},
			{give: args("EXPIRE", "k", 10), want: int64(1)},
			{give: args("PTTL", "k"), want: between{9000, 10000}},
		}},
		{name: "pexpireat and expireat", give: []step{
			{give: args("SET", "k", "v"), want: "OK"},
			{give: args("PEXPIREAT", "k", fromNow{10 * time.Second, time.Millisecond}), want: int64(1)},
			{give: args("PTTL", "k"), want: between{9000, 10000}},
			{give: args("EXPIREAT", "k", fromNow{20 * time.Second, time.Second}), want: int64(1)},
			{give: args("PTTL", "k"), want: between{18000, 20000}},
		}},
		{name: "a deadline in the past deletes", give: []step{
			{give: args("SET", "k", "v"), want: "OK"},
			{give: args("EXPIREAT", "k", fromNow{-10 * time.Second, time.Second}), want: int64(1)},
			{give: args("EXISTS", "k"), want: int64(0)},
			{give: args("SET", "k", "v"), want: "OK"},
			{give: args("PEXPIRE", "k", -1), want: int64(1)},
			{give: args("PTTL", "k"), want: int64(-2)},
		}},
		{name: "set options", give: []step{
			{give: args("SET", "k", "v", "PX", 10000), want: "OK"},
			{give: args("PTTL", "k"), want: between{9000, 10000}},
			{give: args("SET", "k", "v", "EX", 20), want: "OK"},
			{give: args("PTTL", "k"), want: between{19000, 20000}},
			{give: args("SET", "k", "v", "PXAT", fromNow{30 * time.Second, time.Millisecond}), want: "OK"},
			{give: args("PTTL", "k"), want: between{29000, 30000}},
			{give: args("SET", "k", "v", "EXAT", fromNow{40 * time.Second, time.Second}), want: "OK"},
			{give: args("PTTL", "k"), want: between{38000, 40000}},
			{give: args("SET", "k", "w", "KEEPTTL"), want: "OK"},
			{give: args("PTTL", "k"), want: between{38000, 40000}},
			{give: args("SET", "k", "x"), want: "OK"},
			{give: args("PTTL", "k"), want: int64(-1)},
		}},
		{name: "setex, psetex, getex, persist", give: []step{
			{give: args("SETEX", "k", 10, "v"), want: "OK"},
			{give: args("PTTL", "k"), want: between{9000, 10000}},
			{give: args("PSETEX", "k", 20000, "v"), want: "OK"},
			{give: args("PTTL", "k"), want: between{19000, 20000}},
			{give: args("GETEX", "k", "PX", 5000), want: "v"},
			{give: args("PTTL", "k"), want: between{4000, 5000}},
			{give: args("GETEX", "k", "PERSIST"), want: "v"},
			{give: args("PTTL", "k"), want: int64(-1)},
			{give: args("PEXPIRE", "k", 5000), want: int64(1)},
			{give: args("PERSIST", "k"), want: int64(1)},
			{give: args("TTL", "k"), want: int64(-1)},
		}},
		{name: "nx, xx, gt, lt compare deadlines", give: []step{
			{give: args("SET", "k", "v", "PX", 10000), want: "OK"},
			{give: args("PEXPIRE", "k", 5000, "GT"), want: int64(0)},
			{give: args("PTTL", "k"), want: between{9000, 10000}},
			{give: args("PEXPIRE", "k", 5000, "LT"), want: int64(1)},
			{give: args("PTTL", "k"), want: between{4000, 5000}},
			{give: args("PEXPIRE", "k", 20000, "NX"), want: int64(0)},
			{give: args("PEXPIRE", "k", 20000, "XX"), want: int64(1)},
			{give: args("PTTL", "k"), want: between{19000, 20000}},
			{give: args("SET", "k2", "v"), want: "OK"},
			{give: args("PEXPIRE", "k2", 100, "XX"), want: int64(0)},
			{give: args("PEXPIRE", "k2", 100, "GT"), want: int64(0)},
			{give: args("PEXPIRE", "k2", 10000, "LT"), want: int64(1)},
			{give: args("PTTL", "k2"), want: between{9000, 10000}},
		}},
		{name: "missing keys", give: []step{
			{give: args("PEXPIRE", "k", 100), want: int64(0)},
			{give: args("PTTL", "k"), want: int64(-2)},
			{give: args("TTL", "k"), want: int64(-2)},
			{give: args("PEXPIRETIME", "k"), want: int64(-2)},
		}},
		{name: "invalid expire times", give: []step{
			{give: args("SET", "k", "v"), want: "OK"},
			{give: args("PEXPIRE", "k", "9223372036854775807"), want: errWith("invalid expire time")},
			{give: args("SET", "k", "v", "PX", 0), want: errWith("invalid expire time")},
			{give: args("SET", "k", "v", "EX", -1), want: errWith("invalid expire time")},
			{give: args("PTTL", "k"), want: int64(-1)},
		}},
		{name: "in a script", give: []step{
			{give: args("EVAL", "redis.call('SET', KEYS[1], 'v', 'PX', 10000) return redis.call('PTTL', KEYS[1])", 1, "k"),
				want: between{9000, 10000}},
		}},
		{name: "time stands still in a script", give: []step{
			{give: args("EVAL", busy, 1, "k"), want: int64(1)},
			{give: args("EXISTS", "k"), want: int64(0)},
		}},
		{name: "a key made again has no old deadline", give: []step{
			{give: args("SET", "k", "v", "PX", 20), want: "OK"},
			{give: args("DEL", "k"), want: int64(1)},
			{give: args("SET", "k", "v"), want: "OK"},
			{give: args("ZADD", "z", 1, "a"), want: int64(1)},
			{give: args("PEXPIRE", "z", 20), want: int64(1)},
			{give: args("ZREM", "z", "a"), want: int64(1)}, // the last member: the key goes
			{give: args("ZADD", "z", 1, "a"), want: int64(1)},
			{pause: 50 * time.Millisecond},
			{give: args("EXISTS", "k", "z"), want: int64(2)},
			{give: args("PTTL", "z"), want: int64(-1)},
		}},
		{name: "renewed before its deadline", give: []step{
			{give: args("SET", "k", "v", "PX", 30), want: "OK"},
			{give: args("PEXPIRE", "k", 10000), want: int64(1)},
			{pause: 50 * time.Millisecond},
			{give: args("GET", "k"), want: "v"},
			{give: args("PTTL", "k"), want: between{9000, 10000}},
		}},
		{name: "commands that carry a TTL elsewhere are refused", embeddedOnly: true, give: []step{
			{give: args("SET", "k", "v", "PX", 10000), want: "OK"},
			{give: args("RENAME", "k", "k2"), want: errWith("not supported by Baton's embedded store")},
			{give: args("COPY", "k", "k2"), want: errWith("not supported by Baton's embedded store")},
			{give: args("MULTI"), want: errWith("not supported by Baton's embedded store")},
			{give: args("SELECT", 1), want: errWith("not supported by Baton's embedded store")},
			{give: args("SELECT", 0), want: "OK"},
		}},
	}

	ctx := context.Background()
	stores := map[string]*redis.Client{"redis-server": redistest.Start(t).Client(t)}
	embedded := startTestEmbedded(t)
	stores["embedded"] = embedded
	for i, tt := range tests {
		for name, rdb := range stores {
			if tt.embeddedOnly && name != "embedded" {
				continue
			}
			t.Run(name+"/"+tt.name, func(t *testing.T) {
				prefix := fmt.Sprintf("expiry%d:", i)
				for j, s := range tt.give {
					if s.pause > 0 {
						time.Sleep(s.pause) // the passing of time is what is tested
						continue
					}
					got, err := rdb.Do(ctx, s.resolve(prefix)...).Result()
					if msg := checkReply(s.want, got, err); msg != "" {
						t.Fatalf("step %d %v: %s", j, s.give, msg)
					}
				}
			})
		}
	}
}

// Keys past their deadline go without being named (active expiry).
func TestEmbeddedActiveExpiry(t *testing.T) {
	rdb := startTestEmbedded(t)
	ctx := context.Background()
	fill := `for i = 1, 1000 do redis.call('SET', 'active:' .. i, i, 'PX', 50 + i % 10) end`
	if err := rdb.Eval(ctx, fill, nil).Err(); err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := rdb.DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys left 5 s after their deadlines", n)
		}
		time.Sleep(5 * time.Millisecond) // polling the store: expiry sends no event
	}
}

// What the store keeps to expire keys goes with the keys: a released lease's
// deadline is not kept until it would have run out.
func TestEmbeddedExpiryForgetsDeletedKeys(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	emb, err := Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	opt, err := redis.ParseURL(emb.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	grant := `for i = 1, 1000 do redis.call('HSET', 'lock:' .. i, 'n', i) redis.call('PEXPIRE', 'lock:' .. i, 3600000) end`
	release := `for i = 1, 1000 do redis.call('DEL', 'lock:' .. i) end`
	for range 10 {
		for _, script := range []string{grant, release} {
			if err := rdb.Eval(ctx, script, nil).Err(); err != nil && err != redis.Nil {
				t.Fatal(err)
			}
		}
	}
	e := emb.expiry
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.deadlines) != 0 || len(e.queue) > 2*1024 {
		t.Errorf("after 10,000 grants and releases: %d deadlines and %d queued, want 0 and at most %d",
			len(e.deadlines), len(e.queue), 2*1024)
	}
}

// startTestEmbedded starts the embedded store and a client of it, with its
// options changed by tweak.
func startTestEmbedded(t *testing.T, tweak ...func(*redis.Options)) *redis.Client {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	emb, err := Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	opt, err := redis.ParseURL(emb.URL())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tweak {
		f(opt)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// step is one command and the reply it must get, or a pause.
type step struct {
	give  []any
	want  any
	pause time.Duration
}

func args(a ...any) []any { return a }

// resolve prefixes the key names (k, k2, z) and computes fromNow times.
func (s step) resolve(prefix string) []any {
	out := make([]any, len(s.give))
	for i, a := range s.give {
		switch v := a.(type) {
		case string:
			if v == "k" || v == "k2" || v == "z" {
				v = prefix + v
			}
			out[i] = v
		case fromNow:
			out[i] = time.Now().Add(v.d).UnixNano() / int64(v.unit)
		default:
			out[i] = a
		}
	}
	return out
}

// fromNow is a Unix time d from now, in unit.
type fromNow struct{ d, unit time.Duration }

// between is an integer reply from lo to hi.
type between struct{ lo, hi int64 }

func (b between) check(got any, err error) string {
	n, ok := got.(int64)
	if err != nil || !ok || n < b.lo || n > b.hi {
		return fmt.Sprintf("got %v %v, want %d to %d", got, err, b.lo, b.hi)
	}
	return ""
}

// unixAbout is a Unix time d from now, in unit, within a second.
type unixAbout struct{ d, unit time.Duration }

func (u unixAbout) check(got any, err error) string {
	want := time.Now().Add(u.d).UnixNano() / int64(u.unit)
	slack := int64(time.Second / u.unit)
	return between{want - slack, want + slack}.check(got, err)
}

// errWith is an error reply containing its text.
type errWith string

func (e errWith) check(got any, err error) string {
	if err == nil || !strings.Contains(err.Error(), string(e)) {
		return fmt.Sprintf("got %v %v, want an error with %q", got, err, string(e))
	}
	return ""
}

// checkReply says how got differs from want, or is empty.
func checkReply(want, got any, err error) string {
	if w, ok := want.(interface{ check(any, error) string }); ok {
		return w.check(got, err)
	}
	if err != nil || got != want {
		return fmt.Sprintf("got %v %v, want %v", got, err, want)
	}
	return ""
}
