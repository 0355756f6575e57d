package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/internal/redistest"
)

// The names scenario: what a lock name costs Redis once its last hold
// has ended. n distinct names are each acquired and released once; the keys and
// used_memory Redis holds beyond a baseline are read right after the last release,
// and again once the fence guard has passed and Redis has reclaimed the expired
// keys. It runs on a redis-server of its own, so that the other scenarios' keys
// (fence keys kept for Baton's default hour) neither blur the figures nor slow
// Redis's active expiry, with a Baton of its own started with a short guard.
const (
	namesClients = 16
	// namesExpiryBound bounds the wait, past the guard, for Redis's active expiry
	// to remove the expired keys; a SCAN then expires the rest on access.
	namesExpiryBound = 30 * time.Second
	namesPoll        = 20 * time.Millisecond
	// The footprint is read every namesSettleStep until two readings agree, for
	// at most namesSettleBound: Redis's cron (10 Hz) shrinks emptied hash tables.
	namesSettleStep  = 100 * time.Millisecond
	namesSettleBound = 3 * time.Second
)

// errLeftover marks a names run that found keys left after the guard.
var errLeftover = errors.New("keys left after the fence guard")

type namesSystem struct {
	system string
	pair   pairFunc
}

// footprint is what Redis holds at one moment: keys (DBSIZE), used_memory less
// what its clients use (the tot-mem of every connection in CLIENT LIST, computed
// when asked: query and reply buffers, which come and go with connections and
// their traffic, not with names; Redis trims an idle client's after 2 s), and
// used_memory itself.
type footprint struct {
	keys, bytes, used int64
}

func readFootprint(ctx context.Context, rdb *redis.Client) (footprint, error) {
	keys, err := rdb.DBSize(ctx).Result()
	if err != nil {
		return footprint{}, fmt.Errorf("dbsize: %w", err)
	}
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return footprint{}, fmt.Errorf("info memory: %w", err)
	}
	used, err := infoField(info, "used_memory")
	if err != nil {
		return footprint{}, err
	}
	list, err := rdb.ClientList(ctx).Result()
	if err != nil {
		return footprint{}, fmt.Errorf("client list: %w", err)
	}
	clients, err := clientsMemory(list)
	if err != nil {
		return footprint{}, err
	}
	return footprint{keys: keys, bytes: used - clients, used: used}, nil
}

// clientsMemory sums the tot-mem fields of a CLIENT LIST reply.
func clientsMemory(list string) (int64, error) {
	var sum int64
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		found := false
		for _, kv := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(kv, "tot-mem="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("client list: tot-mem=%q", v)
				}
				sum, found = sum+n, true
			}
		}
		if !found {
			return 0, fmt.Errorf("client list: no tot-mem in %q", line)
		}
	}
	return sum, nil
}

// infoField reads an integer field of an INFO reply.
func infoField(info, field string) (int64, error) {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO has no %s", field)
}

// settle reads the footprint until keys and bytes hold still from one reading
// to the next, and returns the last reading.
func settle(ctx context.Context, rdb *redis.Client) (footprint, error) {
	last, err := readFootprint(ctx, rdb)
	if err != nil {
		return last, err
	}
	tick := time.NewTicker(namesSettleStep)
	defer tick.Stop()
	for deadline := time.Now().Add(namesSettleBound); time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-tick.C:
		}
		f, err := readFootprint(ctx, rdb)
		if err != nil {
			return f, err
		}
		if f.keys == last.keys && f.bytes == last.bytes {
			return f, nil
		}
		last = f
	}
	return last, nil
}

// namesRow is one system at one n.
type namesRow struct {
	Scenario    string  `json:"scenario"`
	System      string  `json:"system"`
	Names       int     `json:"names"`
	Clients     int     `json:"clients"`
	GuardMs     int64   `json:"fence_guard_ms"`
	PairsPerSec float64 `json:"pairs_per_sec"`
	// Bytes are used_memory less the clients' tot-mem beyond the baseline
	// (see footprint); Used is used_memory's own difference, clients included.
	KeysReleased  int64   `json:"keys_after_release"`
	BytesReleased int64   `json:"bytes_after_release"`
	UsedReleased  int64   `json:"used_memory_after_release"`
	NameReleased  float64 `json:"bytes_per_name_after_release"`
	// InGuard is the bytes per name whose key was still counted: the cost of a
	// name during its guard. 0 when no key was left.
	InGuard    float64 `json:"bytes_per_name_in_guard"`
	KeysGuard  int64   `json:"keys_after_guard"`
	BytesGuard int64   `json:"bytes_after_guard"`
	UsedGuard  int64   `json:"used_memory_after_guard"`
	NameGuard  float64 `json:"bytes_per_name_after_guard"`
	GoneMs     float64 `json:"keys_gone_ms_after_last_release"`
	Scanned    bool    `json:"scan_needed"`
	Errors     int64   `json:"errors"`

	seconds float64
}

// namesRun measures one system on n names. After a warm-up (whose keys it
// deletes) and once used_memory holds still, it takes the baseline; then
// namesClients workers acquire and release order:00000000 ... once each. Right
// after the last release it reads the footprint, then polls DBSIZE until it is
// back at the baseline (for at most guard+bound, then SCANs once to
// expire the rest on access), lets used_memory settle and reads it again. It
// returns an error wrapping errLeftover, with the row, when keys remain.
func namesRun(ctx context.Context, rdb *redis.Client, s namesSystem, n int, guard, bound time.Duration) (namesRow, error) {
	row := namesRow{Scenario: "names", System: s.system, Names: n, Clients: namesClients, GuardMs: guard.Milliseconds()}
	if err := namesWarm(ctx, rdb, s.pair); err != nil {
		return row, fmt.Errorf("warm-up: %w", err)
	}
	base, err := settle(ctx, rdb)
	if err != nil {
		return row, err
	}

	start := time.Now()
	errs, firstErr := pairs(ctx, s.pair, n, func(i int) string { return fmt.Sprintf("order:%08d", i) })
	end := time.Now()
	released, err := readFootprint(ctx, rdb)
	if err != nil {
		return row, err
	}
	if errs*100 > int64(n) {
		return row, fmt.Errorf("%d errors in %d pairs; first: %w", errs, n, firstErr)
	}
	gone, scanned, err := awaitKeys(ctx, rdb, base.keys, end, end.Add(guard+bound))
	if err != nil {
		return row, err
	}
	after, err := settle(ctx, rdb)
	if err != nil {
		return row, err
	}

	row.seconds = end.Sub(start).Seconds()
	row.Errors = errs
	row.PairsPerSec = round(float64(n)/row.seconds, 0)
	row.KeysReleased = released.keys - base.keys
	row.BytesReleased = released.bytes - base.bytes
	row.UsedReleased = released.used - base.used
	row.NameReleased = round(float64(row.BytesReleased)/float64(n), 1)
	if row.KeysReleased > 0 {
		row.InGuard = round(float64(row.BytesReleased)/float64(row.KeysReleased), 1)
	}
	row.KeysGuard = after.keys - base.keys
	row.BytesGuard = after.bytes - base.bytes
	row.UsedGuard = after.used - base.used
	row.NameGuard = round(float64(row.BytesGuard)/float64(n), 1)
	row.GoneMs = round(float64(gone.Microseconds())/1000, 0)
	row.Scanned = scanned
	if row.KeysGuard > 0 {
		return row, fmt.Errorf("%w: %s, %d names, guard %v: %d keys %.1f s after the last release; for example %s",
			errLeftover, s.system, n, guard, row.KeysGuard, time.Since(end).Seconds(), sampleKeys(ctx, rdb))
	}
	if errs > 0 {
		fmt.Printf("names %-12s %d names: %d pairs failed; first: %v\n", s.system, n, errs, firstErr)
	}
	return row, nil
}

// pairs runs pair on n names with namesClients workers, each name once, and
// returns the number of pairs that failed and the first error.
func pairs(ctx context.Context, pair pairFunc, n int, name func(int) string) (int64, error) {
	var next, errs atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range namesClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				if err := pair(ctx, name(int(i))); err != nil {
					errs.Add(1)
					once.Do(func() { first = err })
				}
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return errs.Load(), err
	}
	return errs.Load(), first
}

// namesWarm opens every connection the run will use (16 concurrent pairs, a few
// times over) and loads the scripts, then deletes what the warm-up left, so that
// the baseline holds the connections and scripts but no key of the run.
func namesWarm(ctx context.Context, rdb *redis.Client, pair pairFunc) error {
	const rounds = 4
	errs, first := pairs(ctx, pair, rounds*namesClients, func(i int) string { return "warm:" + strconv.Itoa(i) })
	if errs > 0 {
		return first
	}
	iter := rdb.Scan(ctx, 0, "*warm:*", 1000).Iterator()
	for iter.Next(ctx) {
		if err := rdb.Del(ctx, iter.Val()).Err(); err != nil {
			return err
		}
	}
	return iter.Err()
}

// awaitKeys polls DBSIZE until it is down to want and returns how long after
// from that was. Past deadline it SCANs the keyspace once (Redis expires a key
// past its time when a command touches it); the caller reads DBSIZE again.
func awaitKeys(ctx context.Context, rdb *redis.Client, want int64, from, deadline time.Time) (time.Duration, bool, error) {
	tick := time.NewTicker(namesPoll)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		n, err := rdb.DBSize(ctx).Result()
		if err != nil {
			return 0, false, err
		}
		if n <= want {
			return time.Since(from), false, nil
		}
		select {
		case <-ctx.Done():
			return 0, false, ctx.Err()
		case <-tick.C:
		}
	}
	iter := rdb.Scan(ctx, 0, "", 1000).Iterator()
	for iter.Next(ctx) {
	}
	return time.Since(from), true, iter.Err()
}

// sampleKeys names up to five keys Redis holds, with their remaining time.
func sampleKeys(ctx context.Context, rdb *redis.Client) string {
	var out []string
	iter := rdb.Scan(ctx, 0, "", 100).Iterator()
	for len(out) < 5 && iter.Next(ctx) {
		life := "no expiry"
		if pttl, _ := rdb.PTTL(ctx, iter.Val()).Result(); pttl > 0 {
			life = "expires in " + pttl.String()
		}
		out = append(out, fmt.Sprintf("%s (%s)", iter.Val(), life))
	}
	if err := iter.Err(); err != nil {
		out = append(out, err.Error())
	}
	return strings.Join(out, ", ")
}

// runNamesAll measures Baton, redis-script and redislock at each of the mode's
// name counts, smallest first, the systems interleaved. Keys left after the
// guard are recorded in res.failures and the run goes on; main then fails.
func runNamesAll(ctx context.Context, e *env, cfg config, res *results) error {
	if !cfg.wantSystem(sysBaton) && !cfg.wantSystem(sysRedisScript) && !cfg.wantSystem(sysRedislock) {
		return nil
	}
	guard := cfg.namesGuard
	srv, err := redistest.StartServer(e.dir)
	if err != nil {
		return err
	}
	defer srv.Stop()
	pid, err := redisPID(ctx, srv.Addr())
	if err != nil {
		return err
	}
	if e.pinned {
		if err := pinProcess(pid, serverCPU); err != nil {
			return err
		}
	}
	e.pin.Processes["redis-server (names)"] = allowedCPUs(pid)

	load := newRedisClient(srv.Addr())
	defer load.Close()
	stats := redis.NewClient(&redis.Options{Addr: srv.Addr(), ClientName: benchClientName, PoolSize: 1})
	defer stats.Close()

	var systems []namesSystem
	if cfg.wantSystem(sysBaton) {
		p, url, err := e.startBaton(ctx, "BATON_REDIS_URL="+srv.URL(), "BATON_FENCE_GUARD="+guard.String())
		if err != nil {
			return err
		}
		defer p.stop(10 * time.Second)
		e.pin.Processes["baton (names)"] = allowedCPUs(p.pid())
		systems = append(systems, namesSystem{sysBaton, batonPair(client.New(url), guard)})
	}
	if cfg.wantSystem(sysRedisScript) {
		systems = append(systems, namesSystem{sysRedisScript, newScriptLockerWith(load, scriptPrefix, guard, guard).pair})
	}
	if cfg.wantSystem(sysRedislock) {
		rl := newRedislockLocker(load, redislockPrefix)
		rl.ttl = guard
		systems = append(systems, namesSystem{sysRedislock, rl.pair})
	}
	fmt.Printf("names: %v names, %d clients, fence guard %v (baton: BATON_FENCE_GUARD=%v; redis-script: the same in lua.Compose), leases of %v, on a redis-server of its own\n",
		cfg.namesCounts, namesClients, guard, guard, guard)
	for _, n := range cfg.namesCounts {
		for _, s := range systems {
			if m, ok := cfg.namesMax[s.system]; ok && n > m {
				fmt.Printf("names %-12s %7d names: skipped, this mode runs it with at most %d\n", s.system, n, m)
				continue
			}
			row, err := namesRun(ctx, stats, s, n, guard, namesExpiryBound)
			if err != nil && !errors.Is(err, errLeftover) {
				return fmt.Errorf("%s, %d names: %w", s.system, n, err)
			}
			res.Names = append(res.Names, row)
			fmt.Printf("names %-12s %7d names in %5.1f s: %6.0f pairs/s; after the last release %7d keys, %9d B (%5.1f B/name, %5.1f B per name in its guard; used_memory %+d B); "+
				"after the guard %d keys, %+d B (%+.1f B/name; used_memory %+d B), keys gone %.2f s after the last release%s\n",
				s.system, n, row.seconds, row.PairsPerSec, row.KeysReleased, row.BytesReleased, row.NameReleased, row.InGuard, row.UsedReleased,
				row.KeysGuard, row.BytesGuard, row.NameGuard, row.UsedGuard, row.GoneMs/1000, scanNote(row.Scanned))
			if err != nil {
				fmt.Printf("names FAIL: %v\n", err)
				res.failures = append(res.failures, err.Error())
			}
		}
	}
	return nil
}

func scanNote(scanned bool) string {
	if scanned {
		return " (after a SCAN: active expiry had not removed them in time)"
	}
	return ""
}
