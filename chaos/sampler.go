package main

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/chaos/check"
)

// sampleEvery is the sampler's pace.
const sampleEvery = 50 * time.Millisecond

// sampler reads the workload's locks' holds in Redis (the exclusive hold's hash
// P:{N}, and each shared hold's: fence, owner, at, and PTTL) every sampleEvery, from the workload's start until the checks after
// it end, so that holds no client was told of can be seen and timed
// (check.Orphans), and so can the moments a lock changed hands that no answer
// reported (check.Watches).
//
// Why a sampler: the runner must see holds granted to requests whose answer
// never reached a client, and only Redis knows of those. MONITOR would show every
// script call, but not what the scripts did (a grant is an EVALSHA whose effect
// depends on the state), it slows Redis for everyone, and it loses what happens
// while its connection is down. Keyspace notifications (hset/expire/del/
// expired on the lock key) say that the hash changed but not to whom it belongs
// now, so each would need a read anyway, and they too are lost while the
// subscriber's connection is down (a Redis kill, a freeze). A read of a few small
// hashes every 50 ms in one MULTI (a read-only script per lock, since shared
// holds are listed in a sorted set) costs Redis nothing measurable, needs no
// configuration, and sees every hold that lasts longer than 50 ms; the holds
// that matter here last longer than the ticket ttl (a second). Each lock has
// the owner label of the request it was granted to (every workload request
// carries a label of its own) and its grant time on the Redis clock, which is
// all the judgement needs.
type sampler struct {
	locks []string

	mu      sync.Mutex
	src     redis.UniversalClient
	own     []redis.UniversalClient // clients the sampler closes when it stops
	samples []check.Sample

	stop chan struct{}
	done chan struct{}
}

// newSamplerClient is a client for the sampler's reads, with timeouts short
// enough that a frozen Redis costs a few missed samples, not the sampler.
func newSamplerClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
		ReadTimeout: time.Second, WriteTimeout: time.Second, PoolSize: 2})
}

// startSampler starts sampling locks through src, which it closes when it stops.
func startSampler(src *redis.Client, locks []string) *sampler {
	s := &sampler{locks: locks, src: src, own: []redis.UniversalClient{src}, stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

// use makes the sampler read through c from now on (a Sentinel scenario's
// failover client, a Cluster scenario's cluster client: one MULTI per node),
// and close it when it stops.
func (s *sampler) use(c redis.UniversalClient) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.src = c
	s.own = append(s.own, c)
}

// close stops sampling and returns the samples.
func (s *sampler) close() []check.Sample {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.own {
		_ = c.Close()
	}
	return s.samples
}

func (s *sampler) run() {
	defer close(s.done)
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sample()
		}
	}
}

// readHolds reads one lock's live holds (lua/lib.lua): the exclusive hold's
// record at the end of the lock's string (P:{N}), and each shared hold's
// record (P:{N}:h), each live while its deadline has not passed, as {fence,
// owner, at, pttl, shared}. Only reads: it changes nothing, not even what a
// script of Baton's would prune.
const readHolds = `
local out = {}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function hold(v, sh)
  local f = {}
  for x in string.gmatch(v .. '\t', '([^\t]*)\t') do
    f[#f + 1] = x
  end
  local d = tonumber(f[2])
  if d and d >= now then
    out[#out + 1] = {f[4], f[17] or '', f[6], d - now, sh}
  end
end
local v = redis.call('GET', KEYS[1])
if v then
  local x = string.match(v, '^[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|(.*)$')
  if x and x ~= '' then
    hold(x, 0)
  end
end
for _, r in ipairs(redis.call('HVALS', KEYS[1] .. ':h')) do
  hold(r, 1)
end
return out
`

// sample reads every lock at once (MULTI), so that one reading is one moment:
// a Sample per hold, the one with the highest fence marked Top, or one not
// Held for a free lock.
func (s *sampler) sample() {
	s.mu.Lock()
	c := s.src
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cmds := make([]*redis.Cmd, len(s.locks))
	sent := time.Now()
	_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, l := range s.locks {
			cmds[i] = p.Eval(ctx, readHolds, []string{keyPrefix + ":{" + l + "}"})
		}
		return nil
	})
	got := time.Now()
	if err != nil {
		return // Redis down, frozen or out of reach: no reading this time
	}
	out := make([]check.Sample, 0, len(s.locks))
	for i, l := range s.locks {
		holds, _ := cmds[i].Slice()
		top := -1
		for _, x := range holds {
			v, ok := x.([]any)
			if !ok || len(v) != 5 {
				continue
			}
			smp := check.Sample{Lock: l, Sent: sent, Got: got, Held: true, Owner: str(v[1]), Shared: v[4] == int64(1)}
			smp.Fence, _ = strconv.ParseInt(str(v[0]), 10, 64)
			if ms, err := strconv.ParseInt(str(v[2]), 10, 64); err == nil {
				smp.GrantedAt = time.UnixMilli(ms)
			}
			if pttl, ok := v[3].(int64); ok {
				smp.PTTL = time.Duration(pttl) * time.Millisecond
			}
			if top < 0 || smp.Fence > out[top].Fence {
				top = len(out)
			}
			out = append(out, smp)
		}
		if top < 0 {
			out = append(out, check.Sample{Lock: l, Sent: sent, Got: got})
			continue
		}
		out[top].Top = true
	}
	s.mu.Lock()
	s.samples = append(s.samples, out...)
	s.mu.Unlock()
}

func str(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}
