package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/client"
)

// The commands scenario measures, black-box, what an uncontended exclusive
// acquire+release costs Redis in commands, and what a released name leaves in
// it, for each system on the shared redis-server.
//
// Commands: after a warm-up on one name, MONITOR runs while one client makes a
// fixed number of pairs on that name, one after another. Two ECHO markers sent
// on this program's own connection bound the window, so that no line of it is
// lost and none from before or after counts. A line counts for the pairs when a
// script ran it (MONITOR shows script-inner commands from "lua") or when it
// names the lock; any other line is background (PING, TIME, a secret's refresh:
// what a server does on a timer, whatever the load), counted apart by command.
//
// Command time: the same pairs again without MONITOR (which slows scripts
// down), in batches, the time Redis spent in their commands by INFO
// commandstats in the least batch: the time of the commands clients sent,
// scripts with the commands they ran (commandstats counts a script's inner
// commands again under their own names, so a command's time counts in the share
// of its calls that MONITOR saw come from a client).
//
// Keys: N names each acquired and released once (16 clients), then the keys
// Redis holds for them (SCAN MATCH on the names), right after the last release:
// what a released name leaves while its fence guard runs.

// commandsRow is one system's figures.
type commandsRow struct {
	Scenario     string         `json:"scenario"`
	System       string         `json:"system"`
	Pairs        int            `json:"pairs"`
	PerPair      float64        `json:"commands_per_pair"`
	InnerPerPair float64        `json:"script_inner_per_pair"`
	ExecPerPair  float64        `json:"command_usec_per_pair"`
	Background   map[string]int `json:"background_commands"`
	Names        int            `json:"names"`
	KeysPerName  float64        `json:"keys_per_released_name"`
}

// monitorCount is what MONITOR saw of a run of pairs.
type monitorCount struct {
	pair, inner int            // lines of the pairs, and of them those run by scripts
	top, lua    map[string]int // lines of the pairs by command: sent by a client, run by a script
	background  map[string]int // other lines, by command
}

func newMonitorCount() monitorCount {
	return monitorCount{top: map[string]int{}, lua: map[string]int{}, background: map[string]int{}}
}

// add counts one MONITOR line, `<time> [<db> <client>] "<command>" "<arg>" ...`,
// of the pairs on the lock name.
func (c *monitorCount) add(line, name string) {
	_, rest, _ := strings.Cut(line, "[")
	src, rest, _ := strings.Cut(rest, "] ")
	cmd, _, _ := strings.Cut(strings.TrimPrefix(rest, `"`), `"`)
	cmd = strings.ToLower(cmd)
	switch {
	case strings.HasSuffix(src, " lua"):
		c.pair++
		c.inner++
		c.lua[cmd]++
	case strings.Contains(rest, name):
		c.pair++
		c.top[cmd]++
	default:
		c.background[cmd]++
	}
}

// monitor is a connection in MONITOR mode.
type monitor struct {
	conn net.Conn
	r    *bufio.Reader
}

func startMonitor(addr string) (*monitor, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	m := &monitor{conn: conn, r: bufio.NewReaderSize(conn, 1<<16)}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		conn.Close()
		return nil, err
	}
	if l, err := m.line(); err != nil || l != "+OK" {
		conn.Close()
		return nil, fmt.Errorf("monitor: %q, %v", l, err)
	}
	return m, nil
}

func (m *monitor) line() (string, error) {
	_ = m.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	s, err := m.r.ReadString('\n')
	return strings.TrimRight(s, "\r\n"), err
}

// until reads up to the line of `ECHO marker`, handing every line before it to f.
func (m *monitor) until(marker string, f func(string)) error {
	end := `"echo" "` + marker + `"`
	for {
		l, err := m.line()
		if err != nil {
			return fmt.Errorf("monitor: %w", err)
		}
		if strings.HasSuffix(strings.ToLower(l), end) {
			return nil
		}
		if f != nil {
			f(l)
		}
	}
}

// countCommands makes n pairs on name, one after another, after a warm-up, and
// counts what MONITOR on the Redis of stats saw of them. stats makes no other
// call meanwhile.
func countCommands(ctx context.Context, stats *redis.Client, pair pairFunc, name string, n int) (monitorCount, error) {
	c := newMonitorCount()
	for range 20 {
		if err := pair(ctx, name); err != nil {
			return c, fmt.Errorf("warm-up: %w", err)
		}
	}
	m, err := startMonitor(stats.Options().Addr)
	if err != nil {
		return c, err
	}
	defer m.conn.Close()
	mark := "bench-mark-" + pollID()
	if err := stats.Echo(ctx, mark+"-start").Err(); err != nil {
		return c, err
	}
	if err := m.until(mark+"-start", nil); err != nil {
		return c, err
	}
	for range n {
		if err := pair(ctx, name); err != nil {
			return c, err
		}
	}
	if err := stats.Echo(ctx, mark+"-end").Err(); err != nil {
		return c, err
	}
	return c, m.until(mark+"-end", func(l string) { c.add(l, name) })
}

// execTime makes n more pairs on name, in batches of execBatch, and returns the
// time per pair Redis spent in the commands clients sent (see monitorCount.top)
// by INFO commandstats, in the least batch: commandstats times commands on the
// wall clock, so a batch in which another process preempted Redis mid-command
// counts that time too, and on a loaded machine most do.
func execTime(ctx context.Context, stats *redis.Client, pair pairFunc, name string, n int, c monitorCount) (float64, error) {
	before, err := commandUsec(ctx, stats)
	if err != nil {
		return 0, err
	}
	var batches []float64
	for done := 0; done < n; done += execBatch {
		k := min(execBatch, n-done)
		for range k {
			if err := pair(ctx, name); err != nil {
				return 0, err
			}
		}
		after, err := commandUsec(ctx, stats)
		if err != nil {
			return 0, err
		}
		var usec float64
		for cmd, top := range c.top {
			usec += float64(after[cmd]-before[cmd]) * float64(top) / float64(top+c.lua[cmd])
		}
		batches = append(batches, usec/float64(k))
		before = after
	}
	return slices.Min(batches), nil
}

// execBatch is the pairs of one batch of execTime.
const execBatch = 10

// commandUsec is INFO commandstats' usec by command, lower case.
func commandUsec(ctx context.Context, stats *redis.Client) (map[string]int64, error) {
	info, err := stats.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("info commandstats: %w", err)
	}
	m := map[string]int64{}
	for _, l := range strings.Split(info, "\n") {
		cmd, fields, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(l), "cmdstat_"), ":")
		if !ok {
			continue
		}
		for _, f := range strings.Split(fields, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("info commandstats: %q", l)
				}
				m[strings.ToLower(cmd)] = n
			}
		}
	}
	return m, nil
}

// keysLeft acquires and releases n names once each (namesClients clients) and
// returns the keys Redis then holds whose names hold prefix, per name.
func keysLeft(ctx context.Context, stats *redis.Client, pair pairFunc, prefix string, n int) (float64, error) {
	errs, first := pairs(ctx, pair, n, func(i int) string { return prefix + strconv.Itoa(i) })
	if errs > 0 {
		return 0, fmt.Errorf("%d of %d pairs failed; first: %w", errs, n, first)
	}
	keys := map[string]bool{} // SCAN may return a key twice
	iter := stats.Scan(ctx, 0, "*"+prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys[iter.Val()] = true
	}
	return float64(len(keys)) / float64(n), iter.Err()
}

// runCommandsAll measures every system on the shared redis-server: Baton,
// baton-ref, and the in-process ones.
func runCommandsAll(ctx context.Context, e *env, cfg config, res *results) error {
	rdb := newRedisClient(e.redis.Addr())
	defer rdb.Close()
	var systems []namesSystem
	if cfg.wantSystem(sysBaton) {
		systems = append(systems, namesSystem{sysBaton, batonPair(client.New(e.batonURL), 0)})
	}
	if e.ref != nil {
		systems = append(systems, namesSystem{sysBatonRef, batonPair(client.New(e.refURL), 0)})
	}
	for _, s := range []namesSystem{
		{sysFloor, newFloorLocker(rdb, floorPrefix).pair},
		{sysRedislock, newRedislockLocker(rdb, redislockPrefix).pair},
		{sysRedisScript, newScriptLocker(rdb, scriptPrefix).pair},
	} {
		if cfg.wantSystem(s.system) {
			systems = append(systems, s)
		}
	}
	for _, s := range systems {
		c, err := countCommands(ctx, e.stats, s.pair, s.system+".monitor", cfg.monitorPairs)
		if err != nil {
			return fmt.Errorf("%s: %w", s.system, err)
		}
		exec, err := execTime(ctx, e.stats, s.pair, s.system+".monitor", cfg.monitorPairs, c)
		if err != nil {
			return fmt.Errorf("%s: %w", s.system, err)
		}
		keys, err := keysLeft(ctx, e.stats, s.pair, "kpn."+s.system+".", cfg.keysNames)
		if err != nil {
			return fmt.Errorf("%s: %w", s.system, err)
		}
		row := commandsRow{Scenario: "commands", System: s.system, Pairs: cfg.monitorPairs,
			PerPair:      round(float64(c.pair)/float64(cfg.monitorPairs), 2),
			InnerPerPair: round(float64(c.inner)/float64(cfg.monitorPairs), 2),
			ExecPerPair:  round(exec, 2),
			Background:   c.background, Names: cfg.keysNames, KeysPerName: round(keys, 3)}
		res.Commands = append(res.Commands, row)
		fmt.Printf("commands %-12s %5.2f Redis commands per pair (%.2f in scripts) over %d pairs on one name; background meanwhile: %s; %.1f µs of command time per pair; %.3f keys per released name (%d names)\n",
			s.system, row.PerPair, row.InnerPerPair, row.Pairs, backgroundLabel(row.Background), row.ExecPerPair, row.KeysPerName, row.Names)
	}
	return nil
}

// backgroundLabel writes {"ping": 3, "time": 1} as "ping 3, time 1", or "none".
func backgroundLabel(bg map[string]int) string {
	if len(bg) == 0 {
		return "none"
	}
	var out []string
	for cmd, n := range bg {
		out = append(out, cmd+" "+strconv.Itoa(n))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
