package client_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/batonhq/baton/client"
)

// enqueue queues a fair ticket on a held lock.
func (e *env) enqueue(name string) *client.Ticket {
	e.t.Helper()
	res, err := e.C.Acquire(e.ctx(), name, client.AcquireOptions{Fair: true, Owner: "queued"})
	if err != nil {
		e.t.Fatalf("enqueue on %q: %v", name, err)
	}
	if res.Ticket == nil || res.Lease != nil {
		e.t.Fatalf("enqueue on %q: got %+v, want a ticket alone", name, res)
	}
	return res.Ticket
}

func TestFairTicket(t *testing.T) {
	e := newEnv(t)
	holder := e.acquire("fair", client.AcquireOptions{})
	tk := e.enqueue("fair")
	if tk.Name != "fair" || tk.Position != 1 || tk.TicketTTL != 10*time.Second || tk.URL != "/v1/locks/fair/tickets/"+tk.ID {
		t.Fatalf("ticket %+v", tk)
	}
	if st, err := e.C.State(e.ctx(), "fair"); err != nil || st.Waiters != 1 {
		t.Fatalf("state %+v, %v; want 1 waiter", st, err)
	}

	res, err := e.C.Poll(e.ctx(), "fair", tk.ID, 0)
	if err != nil || res.Lease != nil || res.Ticket == nil || res.Ticket.Position != 1 || res.Ticket.ID != tk.ID {
		t.Fatalf("poll without wait %+v, %v; want the ticket", res, err)
	}
	res, err = e.C.Poll(e.ctx(), "fair", tk.ID, 50*time.Millisecond)
	if err != nil || res.Ticket == nil {
		t.Fatalf("poll that times out %+v, %v; want the ticket", res, err)
	}

	type result struct {
		res *client.PollResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := e.C.Poll(e.ctx(), "fair", tk.ID, 10*time.Second)
		done <- result{res, err}
	}()
	e.awaitWaiters(1)
	if _, err := e.C.Release(e.ctx(), "fair", holder.ID); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.res.Ticket != nil || r.res.Lease == nil || r.res.Lease.Fence <= holder.Fence ||
		r.res.Lease.Owner != "queued" || r.res.Lease.URL != "/v1/locks/fair/leases/"+r.res.Lease.ID {
		t.Fatalf("poll after release %+v, %v", r.res, r.err)
	}
	if _, err := e.C.Release(e.ctx(), "fair", r.res.Lease.ID); err != nil {
		t.Fatalf("release the granted lease: %v", err)
	}
}

func TestCancel(t *testing.T) {
	e := newEnv(t)
	e.acquire("cancel", client.AcquireOptions{})
	tk := e.enqueue("cancel")
	if err := e.C.Cancel(e.ctx(), "cancel", tk.ID); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	wantProblem(t, e.C.Cancel(e.ctx(), "cancel", tk.ID), client.ErrTicketGone, http.StatusGone)
	_, err := e.C.Poll(e.ctx(), "cancel", tk.ID, time.Second)
	wantProblem(t, err, client.ErrTicketGone, http.StatusGone)
	if st, err := e.C.State(e.ctx(), "cancel"); err != nil || st.Waiters != 0 {
		t.Fatalf("state %+v, %v; want no waiters", st, err)
	}
}
