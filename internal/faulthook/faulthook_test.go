package faulthook_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/internal/faulthook"
	"github.com/batonhq/baton/internal/redistest"
)

// incr counts its calls in its first key and returns the count.
var incr = redis.NewScript(`return redis.call('INCR', KEYS[1])`)

func setup(t *testing.T) (*redis.Client, *faulthook.Hook, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ReadTimeout: 2 * time.Second})
	h := faulthook.Install(rdb)
	t.Cleanup(func() { _ = rdb.Close() })
	t.Cleanup(h.Close) // first: the hook lets go before the client closes
	if err := incr.Load(context.Background(), rdb).Err(); err != nil {
		t.Fatal(err)
	}
	return rdb, h, srv.Client(t)
}

// count reads what incr counted under key, with the inspecting client.
func count(t *testing.T, raw *redis.Client, key string) int {
	t.Helper()
	n, err := raw.Get(context.Background(), key).Int()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// awaitCount waits, for at most 5 s, until key counts want.
func awaitCount(t *testing.T, raw *redis.Client, key string, want int) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); count(t, raw, key) != want; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s counts %d, want %d", key, count(t, raw, key), want)
		}
	}
}

func isNetError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne)
}

func TestHoldBackFailsTheCallerAndDeliversTheSameCommandLater(t *testing.T) {
	rdb, h, raw := setup(t)
	ctx := context.Background()
	f := h.Arm(faulthook.Rule{Lock: "k", Nth: 2, Action: faulthook.HoldBack})
	if n, err := incr.Run(ctx, rdb, []string{"p:{k}"}).Int(); err != nil || n != 1 {
		t.Fatalf("the first call: %d %v, want 1 (the rule catches the second)", n, err)
	}
	select {
	case <-f.Caught():
		t.Fatal("caught before its call")
	default:
	}
	err := incr.Run(ctx, rdb, []string{"p:{k}"}).Err()
	if !isNetError(err) || !faulthook.IsBroken(err) {
		t.Fatalf("the held-back call answered %v, want a broken connection (a net.Error)", err)
	}
	<-f.Caught()
	if got := count(t, raw, "p:{k}"); got != 1 {
		t.Fatalf("the held-back call ran before its delivery: count %d", got)
	}
	if n, err := incr.Run(ctx, rdb, []string{"p:{k}"}).Int(); err != nil || n != 2 {
		t.Fatalf("the call after the caught one: %d %v, want 2", n, err)
	}
	d := f.Deliver()
	if len(d) != 1 || d[0].Err != nil || d[0].Reply != int64(3) {
		t.Fatalf("delivered %v, want one call answered 3", d)
	}
	if f.Count() != 1 {
		t.Fatalf("caught %d calls, want 1", f.Count())
	}
}

func TestHoldBackWithADelayDeliversByItself(t *testing.T) {
	rdb, h, raw := setup(t)
	h.Arm(faulthook.Rule{Lock: "k", Action: faulthook.HoldBack, Delay: 100 * time.Millisecond})
	if err := incr.Run(context.Background(), rdb, []string{"p:{k}"}).Err(); !faulthook.IsBroken(err) {
		t.Fatalf("got %v, want a broken connection", err)
	}
	awaitCount(t, raw, "p:{k}", 1)
}

func TestDropReplyRunsTheCallAndLosesItsReply(t *testing.T) {
	rdb, h, raw := setup(t)
	h.Arm(faulthook.Rule{Lock: "k", Action: faulthook.DropReply})
	if err := incr.Run(context.Background(), rdb, []string{"p:{k}"}).Err(); !faulthook.IsBroken(err) {
		t.Fatalf("got %v, want a broken connection", err)
	}
	if got := count(t, raw, "p:{k}"); got != 1 {
		t.Fatalf("count %d, want 1: the call runs", got)
	}
}

func TestStallShorterThanTheReadTimeoutAnswersLate(t *testing.T) {
	rdb, h, _ := setup(t)
	h.Arm(faulthook.Rule{Lock: "k", Action: faulthook.Stall, Delay: 200 * time.Millisecond})
	start := time.Now()
	n, err := incr.Run(context.Background(), rdb, []string{"p:{k}"}).Int()
	if err != nil || n != 1 {
		t.Fatalf("got %d %v, want 1", n, err)
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Fatalf("answered after %v, want at least the stall", took)
	}
}

func TestStallPastTheReadTimeoutTimesOutAndRunsLater(t *testing.T) {
	rdb, h, raw := setup(t)
	h.SetReadTimeout(100 * time.Millisecond)
	h.Arm(faulthook.Rule{Lock: "k", Action: faulthook.Stall, Delay: 400 * time.Millisecond})
	err := incr.Run(context.Background(), rdb, []string{"p:{k}"}).Err()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("got %v, want a timeout", err)
	}
	if got := count(t, raw, "p:{k}"); got != 0 {
		t.Fatalf("count %d right after the timeout, want 0: the call is still on its way", got)
	}
	awaitCount(t, raw, "p:{k}", 1)
}

func TestStallEndsAtTheContextDeadline(t *testing.T) {
	rdb, h, raw := setup(t)
	h.Arm(faulthook.Rule{Lock: "k", Action: faulthook.Stall, Delay: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := incr.Run(ctx, rdb, []string{"p:{k}"}).Err(); !faulthook.IsBroken(err) {
		t.Fatalf("got %v, want a timeout", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("answered after %v, want about the context's 50ms", took)
	}
	awaitCount(t, raw, "p:{k}", 1)
}

func TestRulesSelectByLockAndTag(t *testing.T) {
	rdb, h, raw := setup(t)
	bg := context.Background()
	a := faulthook.Tag(bg, "a")
	fa := h.Arm(faulthook.Rule{Lock: "k", Tag: "a", Every: true, Action: faulthook.HoldBack})
	fu := h.Arm(faulthook.Rule{Lock: "k", Untagged: true, Every: true, Action: faulthook.HoldBack})
	for _, c := range []struct {
		ctx  context.Context
		key  string
		held bool
	}{
		{a, "p:{k}:1", true},
		{bg, "p:{k}:2", true},
		{faulthook.Tag(bg, "b"), "p:{k}:3", false},
		{a, "p:{j}:4", false},
		{context.WithoutCancel(a), "p:{k}:5", true}, // derived contexts keep the tag
	} {
		err := incr.Run(c.ctx, rdb, []string{c.key}).Err()
		if held := faulthook.IsBroken(err); held != c.held {
			t.Errorf("%s: held back %v (%v), want %v", c.key, held, err, c.held)
		}
	}
	// A command that is not a script call is never selected.
	if err := rdb.Incr(a, "p:{k}:6").Err(); err != nil {
		t.Errorf("INCR: %v", err)
	}
	if fa.Count() != 2 || fu.Count() != 1 {
		t.Fatalf("caught %d tagged and %d untagged, want 2 and 1", fa.Count(), fu.Count())
	}
	fa.Deliver()
	fu.Deliver()
	for _, k := range []string{"p:{k}:1", "p:{k}:2", "p:{k}:5"} {
		if got := count(t, raw, k); got != 1 {
			t.Errorf("%s counts %d after delivery, want 1", k, got)
		}
	}
}

func TestPipelineCommandsAreFaultedOneByOne(t *testing.T) {
	rdb, h, raw := setup(t)
	ctx := context.Background()
	f := h.Arm(faulthook.Rule{Lock: "k", Action: faulthook.HoldBack})
	var k, j *redis.Cmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		k = incr.EvalSha(ctx, p, []string{"p:{k}"})
		j = incr.EvalSha(ctx, p, []string{"p:{j}"})
		return nil
	})
	if !faulthook.IsBroken(err) || !faulthook.IsBroken(k.Err()) {
		t.Fatalf("pipeline %v, its call on k %v: want a broken connection", err, k.Err())
	}
	if n, err := j.Int(); err != nil || n != 1 {
		t.Fatalf("its call on j: %d %v, want 1", n, err)
	}
	if got := count(t, raw, "p:{k}"); got != 0 {
		t.Fatalf("k counts %d before delivery", got)
	}
	if d := f.Deliver(); len(d) != 1 || d[0].Reply != int64(1) {
		t.Fatalf("delivered %v", d)
	}
}

func TestTransactionIsFaultedAsOneUnit(t *testing.T) {
	rdb, h, raw := setup(t)
	ctx := context.Background()
	f := h.Arm(faulthook.Rule{Lock: "k", Action: faulthook.HoldBack})
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		incr.EvalSha(ctx, p, []string{"p:{k}"})
		p.Incr(ctx, "p:{k}:plain")
		return nil
	})
	if !faulthook.IsBroken(err) {
		t.Fatalf("transaction: %v, want a broken connection", err)
	}
	if got := count(t, raw, "p:{k}:plain"); got != 0 {
		t.Fatalf("part of the held-back transaction ran: %d", got)
	}
	f.Deliver()
	if count(t, raw, "p:{k}") != 1 || count(t, raw, "p:{k}:plain") != 1 {
		t.Fatal("the delivered transaction did not run whole")
	}
}

func TestDeliveryAfterRedisLostTheScriptSendsItsSource(t *testing.T) {
	rdb, h, raw := setup(t)
	ctx := context.Background()
	if err := incr.Eval(ctx, rdb, []string{"p:{k}"}).Err(); err != nil { // the hook learns its source
		t.Fatal(err)
	}
	f := h.Arm(faulthook.Rule{Lock: "k", Action: faulthook.HoldBack})
	if err := incr.EvalSha(ctx, rdb, []string{"p:{k}"}).Err(); !faulthook.IsBroken(err) {
		t.Fatalf("got %v", err)
	}
	if err := raw.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if d := f.Deliver(); len(d) != 1 || d[0].Err != nil || d[0].Reply != int64(2) {
		t.Fatalf("delivered %v, want 2", d)
	}
}

func TestCloseDropsWhatIsHeldAndEndsStalls(t *testing.T) {
	rdb, h, raw := setup(t)
	ctx := context.Background()
	h.Arm(faulthook.Rule{Lock: "k", Action: faulthook.HoldBack})
	if err := incr.Run(ctx, rdb, []string{"p:{k}"}).Err(); !faulthook.IsBroken(err) {
		t.Fatal(err)
	}
	f := h.Arm(faulthook.Rule{Lock: "j", Action: faulthook.Stall, Delay: time.Minute})
	done := make(chan error, 1)
	go func() { done <- incr.Run(ctx, rdb, []string{"p:{j}"}).Err() }()
	<-f.Caught()
	h.Close()
	if err := <-done; !faulthook.IsBroken(err) {
		t.Fatalf("the stalled call got %v after Close, want a timeout", err)
	}
	if count(t, raw, "p:{k}") != 0 || count(t, raw, "p:{j}") != 0 {
		t.Fatal("a copy was delivered after Close")
	}
	if n, err := incr.Run(ctx, rdb, []string{"p:{k}"}).Int(); err != nil || n != 1 {
		t.Fatalf("after Close: %d %v, want the call to pass", n, err)
	}
}

func TestWaitQuietWaitsForCallsUnderWay(t *testing.T) {
	rdb, h, _ := setup(t)
	f := h.Arm(faulthook.Rule{Lock: "k", Action: faulthook.Stall, Delay: 300 * time.Millisecond})
	done := make(chan struct{})
	go func() { defer close(done); _ = incr.Run(context.Background(), rdb, []string{"p:{k}"}).Err() }()
	<-f.Caught()
	if h.WaitQuiet("k", 10*time.Millisecond, 50*time.Millisecond) {
		t.Fatal("quiet while a call is stalled")
	}
	if !h.WaitQuiet("k", 50*time.Millisecond, 5*time.Second) {
		t.Fatal("never quiet")
	}
	select {
	case <-done:
	default:
		t.Fatal("quiet before the call ended")
	}
}
