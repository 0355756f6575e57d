package embedded

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2/server"
)

// expiry gives the embedded store (miniredis) Redis's own way of expiring keys,
// so that its cost does not grow with the number of keys it holds.
//
// miniredis keeps a key's TTL as the time left, which moves only when told to:
// FastForward(d) subtracts d from every TTL, walking and sorting all keys under
// the store's one lock (a ticker calling it every 5 ms kept a core busy from 30k
// keys on, and woke an expiry's waiter 78 ms late at 100k); ClockTTL(true) does
// the same walk lazily, but on every command, a script's calls included (27 ms a
// call at 100k keys, so half a second for one Baton script). Its public API has
// no cheaper clock, so expiry takes time out of miniredis's hands. Installed as
// the server's pre-command hook, the one extension point that sees every
// command, those a Lua script makes included, it:
//
//   - keeps each TTL as its deadline (Unix milliseconds) in miniredis's TTL slot,
//     which nothing decrements any more: PEXPIRE, EXPIRE, PEXPIREAT, EXPIREAT,
//     SETEX, PSETEX and the EX, PX, EXAT and PXAT options of SET and GETEX are
//     rewritten to give the deadline, and PTTL, TTL, PEXPIRETIME and EXPIRETIME
//     answer from it. miniredis's own comparisons (NX, XX, GT, LT, KEEPTTL) are
//     as right on deadlines as on times left;
//   - deletes a key past its deadline before a command that names it runs (lazy
//     expiry, as Redis does), and the others at their deadlines from a heap
//     (active expiry, so that memory, KEYS and DBSIZE follow). Each costs
//     O(log n) per key that expires and nothing per key that does not, and
//     what it keeps for a key goes with it (at its deadline, or when a script
//     deletes it);
//   - stops time for a script while it runs, as Redis 7 does: a script's calls
//     see the time of its first (miniredis gives redis.call and redis.pcall a
//     Ctx each, so a script that mixes the two sees time move where it
//     switches; Baton's scripts use redis.call only).
//
// The deadlines it keeps are hints, never later than a key's own; a key is only
// deleted after its own deadline, read in the same atomic step as the delete
// (inside a script, under miniredis's lock). It refuses the commands that would
// carry a TTL to another key (RENAME, COPY, MOVE, LMOVE, ...), keep TTLs on hash
// fields (HEXPIRE, ...) or run commands later (MULTI): Baton sends none of them,
// and the hook could not keep their TTLs right. A client connection is told
// from a script's call by its first command, which it sends with no Ctx
// (server.Peer: "server won't touch this"; miniredis gives a script's calls
// theirs before they run).
type expiry struct {
	srv *server.Server

	mu        sync.Mutex
	deadlines map[string]int64      // key -> a deadline (Unix ms) no later than its own
	queue     deadlineQueue         // the same, earliest first, for the sweeper
	clients   map[*server.Peer]bool // client connections; any other peer is a script's call
	bypass    map[*server.Peer]bool // the hook's own commands, let through as they are
	script    any                   // the Ctx of the calls of the script that runs now
	scriptNow int64                 // the time of that script's first call
	wake      chan struct{}

	sweepMu  sync.Mutex
	sweeper  *server.Peer // an in-process client that runs sweepScript
	sweepOut bytes.Buffer
	sweepW   *bufio.Writer
}

// sweepScript expires its KEYS: the hook expires every key a script's call
// names that is past its deadline, atomically, before the call.
const sweepScript = `for _, k in ipairs(KEYS) do redis.call('EXISTS', k) end return 0`

// maxDeadline is the latest deadline miniredis's TTL slot (a time.Duration)
// can hold: in the year 2262.
const maxDeadline = math.MaxInt64 / int64(time.Millisecond)

// newExpiry takes over expiry in srv and runs its sweeper until ctx ends.
// password, when set, is the one the store requires. It returns an error when
// the sweeper cannot log in.
func newExpiry(ctx context.Context, srv *server.Server, password string) (*expiry, error) {
	e := &expiry{
		srv:       srv,
		deadlines: map[string]int64{},
		clients:   map[*server.Peer]bool{},
		bypass:    map[*server.Peer]bool{},
		wake:      make(chan struct{}, 1),
	}
	e.sweepW = bufio.NewWriter(&e.sweepOut)
	e.sweeper = server.NewPeer(e.sweepW)
	srv.SetPreHook(e.hook)
	if password != "" {
		if err := e.sweeperDo("AUTH", password); err != nil {
			return nil, fmt.Errorf("embedded store expiry: %w", err)
		}
	}
	go e.run(ctx)
	return e, nil
}

// hook runs before every command, a script's calls included. It returns true
// when it has answered the command itself.
func (e *expiry) hook(c *server.Peer, cmd string, args ...string) bool {
	e.mu.Lock()
	if e.bypass[c] {
		e.mu.Unlock()
		return false
	}
	if c.Ctx == nil && !e.clients[c] {
		e.clients[c] = true
		c.OnDisconnect(func() {
			e.mu.Lock()
			delete(e.clients, c)
			e.mu.Unlock()
		})
	}
	inScript := !e.clients[c]
	now := time.Now().UnixMilli()
	if inScript {
		if c.Ctx != e.script {
			e.script, e.scriptNow = c.Ctx, now
		}
		now = e.scriptNow
	}
	var due []string
	for _, a := range args {
		if at, ok := e.deadlines[a]; ok && at <= now {
			due = append(due, a)
		}
	}
	e.mu.Unlock()

	if msg := refused(cmd, args); msg != "" {
		c.WriteError(msg)
		return true
	}
	if len(due) > 0 {
		switch {
		case inScript:
			for _, k := range due {
				e.expire(c, k, now)
			}
		case !runsScript(cmd): // a script's calls expire what they name themselves
			_ = e.sweep(due) // on failure the command sees the key, as before its deadline
		}
	}
	if inScript && (cmd == "DEL" || cmd == "UNLINK" || cmd == "GETDEL") {
		// Only in a script, where nothing can come between this and the delete
		// (and whose caller logged in): the hints of deleted keys need not wait
		// for their deadlines to go.
		e.forget(args)
	}
	switch cmd {
	case "PEXPIRE", "EXPIRE", "PEXPIREAT", "EXPIREAT":
		return e.expireCmd(c, cmd, args, now)
	case "SET":
		return e.expireOption(c, cmd, args, 2, now)
	case "GETEX":
		return e.expireOption(c, cmd, args, 1, now)
	case "SETEX", "PSETEX":
		return e.setex(c, cmd, args, now)
	case "PTTL", "TTL", "PEXPIRETIME", "EXPIRETIME":
		return e.ttlCmd(c, cmd, args, now)
	}
	return false
}

// refused names why cmd cannot run on the embedded store, or is empty.
func refused(cmd string, args []string) string {
	switch cmd {
	case "RENAME", "RENAMENX", "COPY", "MOVE", "SWAPDB", "RESTORE",
		"LMOVE", "BLMOVE", "RPOPLPUSH", "BRPOPLPUSH",
		"HEXPIRE", "HPEXPIRE", "HEXPIREAT", "HPEXPIREAT", "HPERSIST", "HTTL", "HPTTL", "HSETEX", "HGETEX",
		"MULTI":
	case "SELECT":
		if len(args) != 1 || args[0] == "0" {
			return ""
		}
	default:
		return ""
	}
	return "ERR " + cmd + " is not supported by Baton's embedded store"
}

func runsScript(cmd string) bool {
	switch cmd {
	case "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO":
		return true
	}
	return false
}

// expireCmd runs PEXPIRE, EXPIRE, PEXPIREAT or EXPIREAT as PEXPIRE with the
// deadline. It leaves malformed commands to miniredis.
func (e *expiry) expireCmd(c *server.Peer, cmd string, args []string, now int64) bool {
	if len(args) < 2 {
		return false
	}
	v, err := strconv.ParseInt(args[1], 10, 64)
	if err != nil {
		return false
	}
	at, ok := deadline(expireUnits[cmd], v, now)
	if !ok {
		c.WriteError(invalidExpire(cmd))
		return true
	}
	return e.runAndNote(c, args[0], append([]string{"PEXPIRE", args[0], strconv.FormatInt(at, 10)}, args[2:]...))
}

// expireUnits gives each expire command's argument as a SET option.
var expireUnits = map[string]string{"PEXPIRE": "PX", "EXPIRE": "EX", "PEXPIREAT": "PXAT", "EXPIREAT": "EXAT"}

// expireOption rewrites SET's or GETEX's EX, PX, EXAT or PXAT (in args from
// index from on) to PX with the deadline. It leaves everything else to miniredis.
func (e *expiry) expireOption(c *server.Peer, cmd string, args []string, from int, now int64) bool {
	out := slices.Clone(args)
	changed := false
	for i := from; i < len(out)-1; i++ {
		unit := strings.ToUpper(out[i])
		if unit != "EX" && unit != "PX" && unit != "EXAT" && unit != "PXAT" {
			continue
		}
		v, err := strconv.ParseInt(out[i+1], 10, 64)
		if err != nil {
			return false
		}
		at, ok := deadline(unit, v, now)
		if v <= 0 || !ok {
			c.WriteError(invalidExpire(cmd))
			return true
		}
		out[i], out[i+1] = "PX", strconv.FormatInt(at, 10)
		changed = true
		i++
	}
	if !changed {
		return false
	}
	return e.runAndNote(c, args[0], append([]string{cmd}, out...))
}

// setex runs SETEX or PSETEX as SET with PX and the deadline.
func (e *expiry) setex(c *server.Peer, cmd string, args []string, now int64) bool {
	if len(args) != 3 {
		return false
	}
	v, err := strconv.ParseInt(args[1], 10, 64)
	if err != nil || v <= 0 {
		return false // miniredis says what is wrong
	}
	unit := "EX"
	if cmd == "PSETEX" {
		unit = "PX"
	}
	at, ok := deadline(unit, v, now)
	if !ok {
		c.WriteError(invalidExpire(cmd))
		return true
	}
	return e.runAndNote(c, args[0], []string{"SET", args[0], args[2], "PX", strconv.FormatInt(at, 10)})
}

// ttlCmd answers PTTL, TTL, PEXPIRETIME or EXPIRETIME from the key's deadline.
func (e *expiry) ttlCmd(c *server.Peer, cmd string, args []string, now int64) bool {
	if len(args) != 1 {
		return false
	}
	reply := e.do(c, "PTTL", args[0])
	at, ok := intReply(reply)
	if !ok {
		c.WriteRaw(string(reply)) // an error, such as NOAUTH
		return true
	}
	if at < 0 { // -2: no such key, -1: no TTL
		c.WriteInt(int(at))
		return true
	}
	left := max(at-now, 0)
	switch cmd {
	case "PTTL":
		c.WriteInt(int(left))
	case "TTL":
		c.WriteInt(int((left + 500) / 1000)) // rounded, as Redis does
	case "PEXPIRETIME":
		c.WriteInt(int(at))
	case "EXPIRETIME":
		c.WriteInt(int(at / 1000))
	}
	return true
}

// deadline turns an expiry of unit EX, PX, EXAT or PXAT into a deadline in Unix
// ms; false when it is out of the range the store can keep.
func deadline(unit string, v, now int64) (int64, bool) {
	if unit == "EX" || unit == "EXAT" {
		if v > maxDeadline/1000 || v < -maxDeadline/1000 {
			return 0, false
		}
		v *= 1000
	}
	if v > maxDeadline || v < -maxDeadline {
		return 0, false
	}
	if unit == "EX" || unit == "PX" {
		v += now
	}
	return v, v <= maxDeadline
}

func invalidExpire(cmd string) string {
	return fmt.Sprintf("ERR invalid expire time in '%s' command", strings.ToLower(cmd))
}

// runAndNote runs the rewritten command args for c, answers c with its reply,
// and notes key's deadline after it.
func (e *expiry) runAndNote(c *server.Peer, key string, args []string) bool {
	c.WriteRaw(string(e.do(c, args...)))
	if at, ok := intReply(e.do(c, "PTTL", key)); ok && at >= 0 {
		e.note(key, at)
	}
	return true
}

// expire deletes key if it is past its deadline, for a call of a script, whose
// lock makes the check and the delete one step; and it keeps key's hint exact.
func (e *expiry) expire(c *server.Peer, key string, now int64) {
	at, ok := intReply(e.do(c, "PTTL", key))
	if ok && at >= 0 && at <= now {
		e.do(c, "DEL", key)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if ok && at > now {
		e.deadlines[key] = at
		e.push(key, at)
	} else {
		delete(e.deadlines, key)
	}
}

// do runs args as c would (same connection state: database, login, script),
// past the hook, and returns the reply.
func (e *expiry) do(c *server.Peer, args ...string) []byte {
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	p := server.NewPeer(w)
	p.Ctx, p.Resp3 = c.Ctx, c.Resp3
	e.mu.Lock()
	e.bypass[p] = true
	e.mu.Unlock()
	e.srv.Dispatch(p, args)
	e.mu.Lock()
	delete(e.bypass, p)
	e.mu.Unlock()
	_ = w.Flush() // to a bytes.Buffer: cannot fail
	return out.Bytes()
}

// intReply reads a RESP integer reply.
func intReply(reply []byte) (int64, bool) {
	s, ok := bytes.CutPrefix(reply, []byte(":"))
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(string(bytes.TrimSuffix(s, []byte("\r\n"))), 10, 64)
	return n, err == nil
}

// forget drops the hints of keys.
func (e *expiry) forget(keys []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, k := range keys {
		delete(e.deadlines, k)
	}
}

// note records that key has a TTL with deadline at: the hint only ever moves
// earlier here, so that one set by a concurrent command is never overwritten by
// a later deadline; a hint that turns out early costs one check.
func (e *expiry) note(key string, at int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if old, ok := e.deadlines[key]; ok && old <= at {
		return
	}
	e.deadlines[key] = at
	e.push(key, at)
}
