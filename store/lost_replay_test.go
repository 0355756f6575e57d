package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/faulthook"
	"github.com/batonhq/baton/store"
)

// A retry with an Idempotency-Key replays the hold its first request made. A
// replay whose answer never reached its client told nobody of the hold: when
// the first request's answer was lost too, nobody knows the hold, and it must
// end within the settle window, as a hold whose only request lost its answer
// does.
func TestAHoldWhoseRequestAndItsReplayBothLostTheirAnswersEndsWithinTheSettleWindow(t *testing.T) {
	s, h := faultyStore(t, store.Options{})
	req := store.AcquireRequest{Name: "x", TTL: time.Minute, Owner: "A", IdemKey: "k", BodyHash: "b"}

	// What the store does on its own (its cleanups) is held up until both
	// requests have run.
	background := h.Arm(faulthook.Rule{Lock: "x", Untagged: true, Every: true, Action: faulthook.HoldBack})

	// A's call runs on a free lock (a grant), and its reply is lost; A's
	// client gives up.
	lostA := h.Arm(faulthook.Rule{Lock: "x", Tag: "A", Action: faulthook.DropReply})
	ctxA, leaveA := context.WithCancel(as("A"))
	defer leaveA()
	a := request(ctxA, s, req)
	caught(t, lostA, "A's call")
	leaveA()
	notGranted(t, "A, gone,", a)

	// B, A's retry with its key, runs (a replay of A's hold), and its reply is
	// lost too; B's client gives up as well.
	lostB := h.Arm(faulthook.Rule{Lock: "x", Tag: "B", Action: faulthook.DropReply})
	ctxB, leaveB := context.WithCancel(as("B"))
	defer leaveB()
	b := request(ctxB, s, req)
	caught(t, lostB, "B's call")
	leaveB()
	notGranted(t, "B, gone,", b)

	since := time.Now()
	delivered(t, "the store's own calls", background.Deliver())
	freeWithin(t, s, "x", since, "a hold whose request and whose replay both lost their answers")
}
