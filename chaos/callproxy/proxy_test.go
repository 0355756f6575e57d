package callproxy

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/batonhq/baton/internal/redistest"
)

// incr counts its runs in KEYS[1] and answers {'done', count}.
const incr = `return {'done', redis.call('INCR', KEYS[1])}`

// setup starts a redis-server and a proxy in front of it, and returns a client
// through the proxy (no retries of its own, as Baton's store) and one direct.
func setup(t *testing.T, opts ...func(*redis.Options)) (*Proxy, *redis.Client, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	p, err := Start(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	o := &redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 5 * time.Second}
	for _, f := range opts {
		f(o)
	}
	via := redis.NewClient(o)
	t.Cleanup(func() { _ = via.Close() })
	direct := srv.Client(t)
	return p, via, direct
}

func count(t *testing.T, c *redis.Client, key string) int {
	t.Helper()
	v, err := c.Get(context.Background(), key).Int()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// await waits for ch, failing the test after a generous bound.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: not within 20s", what)
	}
}

// isReply reports whether err is an answer from Redis rather than a failed
// connection.
func isReply(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

func TestUnselectedCommandsPipelinesAndPubSubPassThrough(t *testing.T) {
	p, via, direct := setup(t)
	ctx := context.Background()
	idle := p.Arm(Fault{Lock: "elsewhere", Mode: LostReply})

	if err := via.Set(ctx, "k:{a}", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := via.Get(ctx, "k:{a}").Result(); err != nil || v != "v" {
		t.Fatalf("get = %q, %v", v, err)
	}
	cmds, err := via.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for range 200 {
			pl.Eval(ctx, incr, []string{"n:{a}"})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cmds {
		v, err := c.(*redis.Cmd).Slice()
		if err != nil || len(v) != 2 || v[1] != int64(i+1) {
			t.Fatalf("pipelined call %d answered %v, %v", i, v, err)
		}
	}
	sub := via.Subscribe(ctx, "ch")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := direct.Publish(ctx, "ch", "hello").Err(); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil || msg.Payload != "hello" {
		t.Fatalf("message %v, %v", msg, err)
	}
	if _, hit := idle.Result(); hit {
		t.Fatal("a fault on another lock selected a call")
	}
	if !p.Disarm(idle) {
		t.Fatal("Disarm of an unhit fault reported it hit")
	}
	await(t, idle.Done(), "a disarmed fault's Done")
}

func TestLateCallRunsOnceAfterTheClientSawItsConnectionBreak(t *testing.T) {
	p, via, direct := setup(t)
	ctx := context.Background()
	a := p.Arm(Fault{Lock: "a", Mode: Late, Delay: 300 * time.Millisecond})

	err := via.Eval(ctx, incr, []string{"n:{a}"}).Err()
	if err == nil || isReply(err) {
		t.Fatalf("the faulted call answered %v, want a broken connection", err)
	}
	await(t, a.Done(), "the late call")
	h, ok := a.Result()
	if !ok || h.Command != "EVAL" || len(h.Keys) != 1 || h.Keys[0] != "n:{a}" {
		t.Fatalf("hit %+v", h)
	}
	if h.Closed.IsZero() || h.Sent.Sub(h.Closed) < 300*time.Millisecond || h.Ran.Before(h.Sent) {
		t.Fatalf("closed %v, sent %v, ran %v: want sent at least 300ms after the close, then run", h.Closed, h.Sent, h.Ran)
	}
	if h.Reply != "done" {
		t.Fatalf("reply %q", h.Reply)
	}
	if n := count(t, direct, "n:{a}"); n != 1 {
		t.Fatalf("the call ran %d times", n)
	}
	// The fault is used up: the client's next call on the lock passes.
	if v, err := via.Eval(ctx, incr, []string{"n:{a}"}).Slice(); err != nil || v[1] != int64(2) {
		t.Fatalf("next call answered %v, %v", v, err)
	}
}

func TestLostReplyRunsTheCallAndBreaksTheConnection(t *testing.T) {
	p, via, direct := setup(t)
	ctx := context.Background()
	a := p.Arm(Fault{Lock: "a", Mode: LostReply})

	err := via.Eval(ctx, incr, []string{"n:{a}"}).Err()
	if err == nil || isReply(err) {
		t.Fatalf("the faulted call answered %v, want a broken connection", err)
	}
	await(t, a.Done(), "the call")
	h, _ := a.Result()
	if h.Ran.IsZero() || h.Reply != "done" || h.Closed.Before(h.Ran) {
		t.Fatalf("hit %+v: want run, then the client side closed", h)
	}
	if n := count(t, direct, "n:{a}"); n != 1 {
		t.Fatalf("the call ran %d times", n)
	}
}

func TestStalledCallRunsAfterTheClientTimedOut(t *testing.T) {
	p, via, direct := setup(t, func(o *redis.Options) { o.ReadTimeout = 300 * time.Millisecond })
	ctx := context.Background()
	a := p.Arm(Fault{Lock: "a", Mode: Stall, Delay: 900 * time.Millisecond})

	err := via.Eval(ctx, incr, []string{"n:{a}"}).Err()
	var nerr net.Error
	if !errors.As(err, &nerr) || !nerr.Timeout() {
		t.Fatalf("the stalled call answered %v, want the client's read timeout", err)
	}
	await(t, a.Done(), "the stalled call")
	h, _ := a.Result()
	if h.Sent.Sub(h.At) < 900*time.Millisecond || h.Reply != "done" {
		t.Fatalf("hit %+v: want sent 900ms after it was read, and run", h)
	}
	if n := count(t, direct, "n:{a}"); n != 1 {
		t.Fatalf("the call ran %d times", n)
	}
}

func TestStalledCallIsDeliveredToAClientStillWaiting(t *testing.T) {
	p, via, _ := setup(t)
	ctx := context.Background()
	a := p.Arm(Fault{Lock: "a", Mode: Stall, Delay: 200 * time.Millisecond})
	v, err := via.Eval(ctx, incr, []string{"n:{a}"}).Slice()
	if err != nil || v[1] != int64(1) {
		t.Fatalf("answered %v, %v", v, err)
	}
	await(t, a.Done(), "the stalled call")
}

func TestSelectsOnlyTheNextScriptCallWithTheLocksHashTag(t *testing.T) {
	p, via, direct := setup(t)
	ctx := context.Background()
	a := p.Arm(Fault{Lock: "a", Mode: LostReply})

	// Not script calls, or other tags: untouched.
	if err := via.Set(ctx, "n:{a}", 10, 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"n:{b}", "n:{ab}", "n:{a", "n:a", "n:{}{a}"} {
		if err := via.Eval(ctx, incr, []string{key}).Err(); err != nil {
			t.Fatalf("call on %s: %v", key, err)
		}
	}
	// EVALSHA, its second key tagged {a}: selected.
	sha, err := direct.ScriptLoad(ctx, `redis.call('INCR', KEYS[1]); return redis.call('INCR', KEYS[2])`).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := via.EvalSha(ctx, sha, []string{"m:{b}", "n:{a}"}).Err(); err == nil || isReply(err) {
		t.Fatalf("the selected call answered %v", err)
	}
	await(t, a.Done(), "the call")
	h, _ := a.Result()
	if h.Command != "EVALSHA" || h.Script != sha || h.Reply != "11" {
		t.Fatalf("hit %+v", h)
	}
	if err := via.EvalSha(ctx, sha, []string{"m:{b}", "n:{a}"}).Err(); err != nil {
		t.Fatalf("the next call on the lock: %v", err)
	}
	if n := count(t, direct, "n:{a}"); n != 12 {
		t.Fatalf("n:{a} = %d, want 12", n)
	}
}

func TestSkipLetsCallsPassBeforeSelectingOne(t *testing.T) {
	p, via, direct := setup(t)
	ctx := context.Background()
	first := p.Arm(Fault{Lock: "a", Mode: LostReply})
	third := p.Arm(Fault{Lock: "a", Mode: LostReply, Skip: 1})
	var errs []error
	for range 4 {
		errs = append(errs, via.Eval(ctx, incr, []string{"n:{a}"}).Err())
	}
	// The first call is the first fault's; the second passes; the third is
	// the second fault's; the fourth passes.
	if errs[0] == nil || errs[1] != nil || errs[2] == nil || errs[3] != nil {
		t.Fatalf("errors %v, want the first and third calls faulted", errs)
	}
	await(t, third.Done(), "the third call")
	if h, _ := first.Result(); h.Reply != "done" {
		t.Fatalf("first %+v", h)
	}
	if n := count(t, direct, "n:{a}"); n != 4 {
		t.Fatalf("%d calls ran, want 4", n)
	}
}

// TestPipelineAroundAFaultedCall sends three commands in one write: the one
// before the faulted call is answered, the call is faulted, and the one after
// it is never sent.
func TestPipelineAroundAFaultedCall(t *testing.T) {
	for _, mode := range []Mode{LostReply, Late} {
		t.Run(mode.String(), func(t *testing.T) {
			p, _, direct := setup(t)
			a := p.Arm(Fault{Lock: "a", Mode: mode, Delay: 100 * time.Millisecond})
			c, err := net.Dial("tcp", p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			pipeline := resp("SET", "before:{b}", "1") + resp("EVAL", incr, "1", "n:{a}") + resp("SET", "after:{b}", "1")
			if _, err := c.Write([]byte(pipeline)); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			if line, err := br.ReadString('\n'); err != nil || line != "+OK\r\n" {
				t.Fatalf("first reply %q, %v", line, err)
			}
			if rest, err := br.ReadString('\n'); err == nil {
				t.Fatalf("read %q after the faulted call, want the connection closed", rest)
			}
			await(t, a.Done(), "the call")
			if n := count(t, direct, "n:{a}"); n != 1 {
				t.Fatalf("the call ran %d times", n)
			}
			if n, err := direct.Exists(context.Background(), "before:{b}", "after:{b}").Result(); err != nil || n != 1 {
				t.Fatalf("%d of the commands around the call ran (%v), want the one before it only", n, err)
			}
		})
	}
}

func TestCloseDropsADelayedCallAndLeavesNoGoroutine(t *testing.T) {
	srv := redistest.Start(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // the redis-server's own are there already
	p, err := Start(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	via := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	a := p.Arm(Fault{Lock: "a", Mode: Late, Delay: time.Hour})
	if err := via.Eval(context.Background(), incr, []string{"n:{a}"}).Err(); err == nil {
		t.Fatal("the faulted call was answered")
	}
	_ = via.Close()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	await(t, a.Done(), "the dropped call")
	if h, _ := a.Result(); !h.Sent.IsZero() {
		t.Fatalf("sent at %v", h.Sent)
	}
	if n := count(t, srv.Client(t), "n:{a}"); n != 0 {
		t.Fatalf("the call ran %d times", n)
	}
}

func TestNamesAScriptByItsSourcesLastHeader(t *testing.T) {
	p, via, _ := setup(t)
	ctx := context.Background()
	src := "-- lib.lua: helpers\nlocal x = 1\n-- acquire.lua: the script\n" + incr
	sha, err := via.ScriptLoad(ctx, src).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"EVALSHA", "EVAL"} {
		a := p.Arm(Fault{Lock: "a", Mode: LostReply})
		if cmd == "EVALSHA" {
			_ = via.EvalSha(ctx, sha, []string{"n:{a}"}).Err()
		} else {
			_ = via.Eval(ctx, src, []string{"n:{a}"}).Err()
		}
		await(t, a.Done(), "the call")
		if h, _ := a.Result(); h.Command != cmd || h.Name != "acquire" || h.Script != sha {
			t.Fatalf("hit %s %s %q, want %s %s acquire", h.Command, h.Script, h.Name, cmd, sha)
		}
	}
}

// resp encodes a command as a RESP array of bulk strings.
func resp(args ...string) string {
	s := "*" + strconv.Itoa(len(args)) + "\r\n"
	for _, a := range args {
		s += "$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n"
	}
	return s
}
