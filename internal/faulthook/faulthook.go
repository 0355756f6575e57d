// Package faulthook injects faults into the script calls of a go-redis client,
// for tests of what a late, lost or slow call does to a lock. It is a test
// helper: nothing outside tests imports it.
//
// A Hook is installed on a client a test makes itself, before the store gets
// it:
//
//	rdb, _ := redisconn.NewClient(url)
//	h := faulthook.New()
//	rdb.AddHook(h) // or faulthook.Install(rdb), which also reads its read timeout
//	s := store.New(rdb, opts)
//
// It selects calls only by what a test outside the store can know: the
// command is a script call (EVALSHA, EVAL, FCALL, FCALL_RO, or any other
// EVAL* or FCALL* form: name, script, number of keys, keys, arguments), one of
// its KEYS carries the lock's hash tag "{name}", and, optionally, the call is
// made on behalf of a request the test tagged (Tag), or on behalf of none (the
// gateway's own background work: cleanups, pokes). A Rule armed with Arm
// catches the Nth such call after arming (the next by default), or every one,
// and does to it one of:
//
//   - HoldBack: the caller gets a broken connection at once, while the same
//     command, byte for byte, is kept in the network and reaches Redis later,
//     on another connection: when the test calls Fault.Deliver, or Rule.Delay
//     after it was caught. This is the first copy of a call the store sends
//     again.
//   - DropReply: the command runs, and its reply is lost: the caller gets a
//     broken connection.
//   - Stall: the command reaches Redis only Rule.Delay after it was sent. A
//     caller whose read times out first (the client's read timeout, or its
//     context's deadline) gets a timeout error then, and the command still
//     runs at Rule.Delay, as a command sent to a Redis that froze does.
//
// Pipelines are handled command by command the same way (a MULTI/EXEC
// transaction as one unit). The broken connection is a *net.OpError (a
// net.Error, as a reset or a timeout is), so the caller cannot tell it from
// the real thing.
//
// Close (give it to t.Cleanup after the store's Close, so that it runs
// first) disarms every rule, drops the copies not delivered yet, lets stalled
// callers go with their timeout, and waits for the deliveries under way.
package faulthook

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Action is what a rule does to the calls it catches.
type Action int

const (
	// HoldBack fails the call at once as a broken connection, and delivers the
	// same command later (Fault.Deliver, or Rule.Delay after it was caught).
	HoldBack Action = iota + 1
	// DropReply runs the call and fails it as a broken connection.
	DropReply
	// Stall sends the call Rule.Delay late; the caller times out meanwhile if
	// its read timeout or context deadline comes first.
	Stall
)

func (a Action) String() string {
	switch a {
	case HoldBack:
		return "hold back"
	case DropReply:
		return "drop reply"
	case Stall:
		return "stall"
	}
	return "action " + strconv.Itoa(int(a))
}

// Rule selects script calls and says what to do to them.
type Rule struct {
	Lock string // the calls one of whose KEYS contains "{Lock}"
	// Tag: only calls made under a context tagged so (Tag); Untagged: only
	// calls made under no tag at all. Neither: any call.
	Tag      string
	Untagged bool
	// Nth: catch the Nth selected call after arming (0 or 1: the next one);
	// Every: catch every selected call until Disarm or Deliver.
	Nth   int
	Every bool

	Action Action
	// Delay: HoldBack delivers each call caught this long after it was caught
	// (0: only on Deliver); Stall sends it this long late.
	Delay time.Duration
}

// DefaultReadTimeout is the read timeout a Hook made by New assumes, the
// store's (redisconn.NewClient).
const DefaultReadTimeout = 2 * time.Second

// Hook is a go-redis hook (redis.Hook) that applies the rules armed on it.
type Hook struct {
	mu          sync.Mutex
	readTimeout time.Duration
	faults      []*Fault
	sources     map[string]string    // SHA-1 -> a script seen in an EVAL, to deliver an EVALSHA after NOSCRIPT
	activity    map[string]*activity // hash tag -> script calls on it
	closed      chan struct{}
	isClosed    bool // guarded by mu: nothing new is sent late
	closeOnce   sync.Once
	running     sync.WaitGroup // late sends under way (added to under mu, before isClosed)
}

type activity struct {
	inFlight int
	last     time.Time
}

// New returns a Hook that assumes the store's read timeout (DefaultReadTimeout).
func New() *Hook {
	return &Hook{readTimeout: DefaultReadTimeout, sources: map[string]string{}, activity: map[string]*activity{},
		closed: make(chan struct{})}
}

// Install makes a Hook with rdb's read timeout and adds it to rdb.
func Install(rdb redis.UniversalClient) *Hook {
	h := New()
	var rt time.Duration
	switch c := rdb.(type) {
	case *redis.Client:
		rt = c.Options().ReadTimeout
	case *redis.ClusterClient:
		rt = c.Options().ReadTimeout
	}
	if rt > 0 {
		h.readTimeout = rt
	}
	rdb.AddHook(h)
	return h
}

// ReadTimeout is the read timeout a stalled caller waits for at most: a
// stall longer than this makes its caller time out.
func (h *Hook) ReadTimeout() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.readTimeout
}

// SetReadTimeout sets the read timeout a stalled caller waits for at most.
func (h *Hook) SetReadTimeout(d time.Duration) {
	h.mu.Lock()
	h.readTimeout = d
	h.mu.Unlock()
}

type tagKey struct{}

// Tag marks the calls made under ctx (and every context derived from it) as
// made on behalf of the request called tag.
func Tag(ctx context.Context, tag string) context.Context {
	return context.WithValue(ctx, tagKey{}, tag)
}

func tagOf(ctx context.Context) (string, bool) {
	t, ok := ctx.Value(tagKey{}).(string)
	return t, ok
}

// Arm starts applying r and returns its Fault.
func (h *Hook) Arm(r Rule) *Fault {
	if r.Lock == "" {
		panic("faulthook: a rule needs a lock name")
	}
	if r.Action == 0 {
		panic("faulthook: a rule needs an action")
	}
	f := &Fault{h: h, rule: r, armed: true, caught: make(chan struct{})}
	h.mu.Lock()
	h.faults = append(h.faults, f)
	h.mu.Unlock()
	return f
}

// Fault is an armed rule: what it caught, and the copies it holds back.
type Fault struct {
	h     *Hook
	rule  Rule
	armed bool // guarded by h.mu, as all below
	seen  int  // selected calls since arming
	n     int  // calls caught
	held  []*copyOf
	// caught closes on the first call caught.
	caught     chan struct{}
	caughtOnce sync.Once
}

// Caught is closed once the rule has caught a call.
func (f *Fault) Caught() <-chan struct{} { return f.caught }

// Count is how many calls the rule has caught.
func (f *Fault) Count() int {
	f.h.mu.Lock()
	defer f.h.mu.Unlock()
	return f.n
}

// Disarm stops the rule catching calls; copies it holds back stay held.
func (f *Fault) Disarm() {
	f.h.mu.Lock()
	f.armed = false
	f.h.mu.Unlock()
}

// Delivery is the outcome of a held-back call delivered late.
type Delivery struct {
	Args  []any // the command as sent
	Reply any   // its reply, nil when Err is set
	Err   error
}

func (d Delivery) String() string {
	what := "?"
	if len(d.Args) > 0 {
		what = str(d.Args[0])
	}
	if d.Err != nil {
		return what + ": " + d.Err.Error()
	}
	if v, ok := d.Reply.([]any); ok && len(v) > 0 { // a script's reply: its leading words
		words := str(v[0])
		for _, x := range v[1:min(len(v), 3)] {
			if w, ok := x.(string); ok {
				words += " " + w
			}
		}
		return what + ": " + words
	}
	return fmt.Sprintf("%s: %v", what, d.Reply)
}

// Deliver disarms the rule and sends every copy it holds back now, in the
// order they were caught, one after the other, each once its predecessor has
// run. It returns their outcomes.
func (f *Fault) Deliver() []Delivery {
	f.h.mu.Lock()
	f.armed = false
	held := f.held
	f.held = nil
	f.h.mu.Unlock()
	var out []Delivery
	for _, c := range held {
		out = append(out, f.h.deliver(c)...)
	}
	return out
}

// Close disarms every rule, drops the copies not delivered yet, ends the
// stalls (their callers time out now) and waits for the deliveries under way.
func (h *Hook) Close() {
	h.closeOnce.Do(func() {
		h.mu.Lock()
		for _, f := range h.faults {
			f.armed = false
			f.held = nil
		}
		h.isClosed = true
		h.mu.Unlock()
		close(h.closed)
	})
	h.running.Wait()
}

// WaitQuiet waits until no script call on lock has been under way for quiet
// (the gateway's background work on it is done), for at most limit. It
// reports whether it got there.
func (h *Hook) WaitQuiet(lock string, quiet, limit time.Duration) bool {
	end := time.Now().Add(limit)
	for {
		h.mu.Lock()
		a := h.activity[lock]
		ok := a == nil || (a.inFlight == 0 && time.Since(a.last) >= quiet)
		h.mu.Unlock()
		if ok {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A copy of a call (or of a transaction) held back or sent late.
type copyOf struct {
	ctx  context.Context // the caller's, without its cancellation
	args [][]any
	send func(context.Context, []redis.Cmder) error
	tags []string
}

// ErrBroken is what a caller whose call a rule caught gets: a connection
// reset, as the client reports one.
var ErrBroken error = &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}

// ErrTimeout is what a stalled caller gets when its read times out.
var ErrTimeout error = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}

// DialHook implements redis.Hook.
func (h *Hook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h *Hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	send := func(ctx context.Context, cmds []redis.Cmder) error { return next(ctx, cmds[0]) }
	return func(ctx context.Context, cmd redis.Cmder) error {
		f, tags := h.pick(ctx, cmd.Args())
		defer h.track(tags)()
		if f == nil {
			return next(ctx, cmd)
		}
		return f.apply(ctx, []redis.Cmder{cmd}, send, tags)
	}
}

// ProcessPipelineHook implements redis.Hook: each command of a pipeline is
// selected and faulted on its own; a transaction (MULTI ... EXEC) as one unit,
// by the first of its commands a rule catches.
func (h *Hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && strings.EqualFold(cmds[0].Name(), "multi") {
			var f *Fault
			var tags []string
			for _, c := range cmds {
				g, t := h.pick(ctx, c.Args())
				tags = append(tags, t...)
				if f == nil {
					f = g
				}
			}
			defer h.track(tags)()
			if f == nil {
				return next(ctx, cmds)
			}
			return f.apply(ctx, cmds, next, tags)
		}
		var pass, dropped []redis.Cmder
		type stalled struct {
			f    *Fault
			cmd  redis.Cmder
			tags []string
		}
		var stalls []stalled
		var all []string
		for _, c := range cmds {
			f, tags := h.pick(ctx, c.Args())
			all = append(all, tags...)
			switch {
			case f == nil:
				pass = append(pass, c)
			case f.rule.Action == HoldBack:
				_ = f.apply(ctx, []redis.Cmder{c}, next, tags)
			case f.rule.Action == DropReply:
				pass = append(pass, c)
				dropped = append(dropped, c)
			default:
				stalls = append(stalls, stalled{f, c, tags})
			}
		}
		defer h.track(all)()
		var wg sync.WaitGroup
		for _, s := range stalls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := s.f.apply(ctx, []redis.Cmder{s.cmd}, next, s.tags); err != nil && s.cmd.Err() == nil {
					s.cmd.SetErr(err)
				}
			}()
		}
		if len(pass) > 0 {
			_ = next(ctx, pass)
		}
		for _, c := range dropped {
			c.SetErr(ErrBroken)
		}
		wg.Wait()
		for _, c := range cmds {
			if err := c.Err(); err != nil {
				return err
			}
		}
		return nil
	}
}

// pick returns the fault that catches a call with these args (nil: none),
// and the hash tags of its keys when it is a script call.
func (h *Hook) pick(ctx context.Context, args []any) (*Fault, []string) {
	name := ""
	if len(args) > 0 {
		name = strings.ToLower(str(args[0]))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if name == "eval" && len(args) > 1 {
		src := str(args[1])
		sum := sha1.Sum([]byte(src))
		h.sources[hex.EncodeToString(sum[:])] = src
	}
	keys, ok := scriptKeys(name, args)
	if !ok {
		return nil, nil
	}
	tags := hashTags(keys)
	tag, tagged := tagOf(ctx)
	var chosen *Fault
	for _, f := range h.faults {
		r := f.rule
		if !f.armed || !names(keys, r.Lock) || (r.Tag != "" && tag != r.Tag) || (r.Untagged && tagged) {
			continue
		}
		f.seen++
		if chosen == nil && (r.Every || f.seen == max(r.Nth, 1)) {
			chosen = f
			f.n++
			f.armed = r.Every
			f.caughtOnce.Do(func() { close(f.caught) })
		}
	}
	return chosen, tags
}

// apply does the fault's action to cmds (one command, or a transaction),
// which send sends.
func (f *Fault) apply(ctx context.Context, cmds []redis.Cmder, send func(context.Context, []redis.Cmder) error, tags []string) error {
	h := f.h
	switch f.rule.Action {
	case HoldBack:
		c := h.copy(ctx, cmds, send, tags)
		if f.rule.Delay > 0 {
			h.later(f.rule.Delay, c)
		} else {
			h.mu.Lock()
			f.held = append(f.held, c)
			h.mu.Unlock()
		}
		return fail(cmds, ErrBroken)
	case DropReply:
		_ = send(ctx, cmds)
		return fail(cmds, ErrBroken)
	}
	// Stall.
	start := time.Now()
	h.mu.Lock()
	timeout := start.Add(h.readTimeout)
	h.mu.Unlock()
	if d, ok := ctx.Deadline(); ok && d.Before(timeout) {
		timeout = d
	}
	sendAt := start.Add(f.rule.Delay)
	if sendAt.Before(timeout) { // the reply comes in time
		if !h.sleep(time.Until(sendAt)) {
			return fail(cmds, ErrTimeout)
		}
		if ctx.Err() != nil { // sent anyway; go-redis reads it whatever the context says
			ctx = context.WithoutCancel(ctx)
		}
		return send(ctx, cmds)
	}
	h.later(time.Until(sendAt), h.copy(ctx, cmds, send, tags))
	h.sleep(time.Until(timeout))
	return fail(cmds, ErrTimeout)
}

func fail(cmds []redis.Cmder, err error) error {
	for _, c := range cmds {
		c.SetErr(err)
	}
	return err
}

func (h *Hook) copy(ctx context.Context, cmds []redis.Cmder, send func(context.Context, []redis.Cmder) error, tags []string) *copyOf {
	c := &copyOf{ctx: context.WithoutCancel(ctx), send: send, tags: tags}
	for _, cmd := range cmds {
		c.args = append(c.args, append([]any(nil), cmd.Args()...))
	}
	return c
}

// later delivers c after d, unless the hook is closed first.
func (h *Hook) later(d time.Duration, c *copyOf) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.isClosed {
		return
	}
	h.running.Add(1)
	go func() {
		defer h.running.Done()
		if h.sleep(d) {
			h.deliver(c)
		}
	}()
}

// sleep waits d; false when the hook was closed first.
func (h *Hook) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-h.closed:
		return false
	}
}

// deliver sends a copy now (an EVALSHA whose script Redis lost, as EVAL when
// the script was seen) and returns the outcome of each of its commands.
func (h *Hook) deliver(c *copyOf) []Delivery {
	defer h.track(c.tags)()
	send := func(cmds []redis.Cmder) {
		if err := c.send(c.ctx, cmds); err != nil && len(cmds) == 1 && cmds[0].Err() == nil {
			cmds[0].SetErr(err) // the client's Process sets it; its hooks' next does not
		}
	}
	cmds := clones(c.ctx, c.args)
	send(cmds)
	if len(cmds) == 1 && redis.HasErrorPrefix(cmds[0].Err(), "NOSCRIPT") {
		a := c.args[0]
		h.mu.Lock()
		src, ok := h.sources[strings.ToLower(str(a[1]))]
		h.mu.Unlock()
		if ok {
			cmds = clones(c.ctx, [][]any{append([]any{"eval", src}, a[2:]...)})
			send(cmds)
		}
	}
	out := make([]Delivery, len(cmds))
	for i, cmd := range cmds {
		out[i] = Delivery{Args: cmd.Args(), Err: cmd.Err()}
		if v, ok := cmd.(*redis.Cmd); ok && cmd.Err() == nil {
			out[i].Reply = v.Val()
		}
	}
	return out
}

func clones(ctx context.Context, args [][]any) []redis.Cmder {
	cmds := make([]redis.Cmder, len(args))
	for i, a := range args {
		switch strings.ToLower(str(a[0])) {
		case "multi":
			cmds[i] = redis.NewStatusCmd(ctx, a...)
		case "exec":
			cmds[i] = redis.NewSliceCmd(ctx, a...)
		default:
			cmds[i] = redis.NewCmd(ctx, a...)
		}
	}
	return cmds
}

// track counts a script call under way on its hash tags until the returned
// func is called.
func (h *Hook) track(tags []string) func() {
	if len(tags) == 0 {
		return func() {}
	}
	h.mu.Lock()
	for _, t := range tags {
		a := h.activity[t]
		if a == nil {
			a = &activity{}
			h.activity[t] = a
		}
		a.inFlight++
		a.last = time.Now()
	}
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		for _, t := range tags {
			a := h.activity[t]
			a.inFlight--
			a.last = time.Now()
		}
		h.mu.Unlock()
	}
}

// scriptKeys returns the KEYS of a script call (name, script or function,
// number of keys, keys, arguments); ok is false for any other command.
func scriptKeys(name string, args []any) ([]string, bool) {
	if !strings.HasPrefix(name, "eval") && !strings.HasPrefix(name, "fcall") || len(args) < 3 {
		return nil, false
	}
	n, err := strconv.Atoi(str(args[2]))
	if err != nil || n < 0 || 3+n > len(args) {
		return nil, false
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = str(args[3+i])
	}
	return keys, true
}

// hashTags returns the distinct hash tags ("{...}" contents) of keys.
func hashTags(keys []string) []string {
	var tags []string
	for _, k := range keys {
		i := strings.IndexByte(k, '{')
		if i < 0 {
			continue
		}
		j := strings.IndexByte(k[i+1:], '}')
		if j <= 0 {
			continue
		}
		if t := k[i+1 : i+1+j]; !hasTag(tags, t) {
			tags = append(tags, t)
		}
	}
	return tags
}

// names reports whether one of keys contains the lock's hash tag.
func names(keys []string, lock string) bool {
	for _, k := range keys {
		if strings.Contains(k, "{"+lock+"}") {
			return true
		}
	}
	return false
}

func hasTag(tags []string, t string) bool {
	for _, x := range tags {
		if x == t {
			return true
		}
	}
	return false
}

func str(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

var _ redis.Hook = (*Hook)(nil)

// IsBroken reports whether err is the broken connection or timeout a fault
// gave its caller.
func IsBroken(err error) bool { return errors.Is(err, ErrBroken) || errors.Is(err, ErrTimeout) }
