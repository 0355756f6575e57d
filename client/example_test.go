package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton/client"
)

// baseURL is where the Baton server listens; TestMain points it at a test server.
var baseURL = "http://localhost:8080"

func Example() {
	ctx := context.Background()
	c := client.New(baseURL)

	res, err := c.Acquire(ctx, "invoices:2024-06", client.AcquireOptions{
		TTL: 30 * time.Second, Wait: 5 * time.Second, Owner: "billing-worker-3",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	lease := res.Lease
	fmt.Println("holding, fence > 0:", lease.Fence > 0)

	// Someone else who will not wait is refused, and told for how long.
	_, err = c.Acquire(ctx, "invoices:2024-06", client.AcquireOptions{})
	var p *client.Problem
	if errors.Is(err, client.ErrLockHeld) && errors.As(err, &p) {
		fmt.Println("held by", p.Owner)
	}

	rel, err := c.Release(ctx, "invoices:2024-06", lease.ID)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("released:", rel.Released)
	// Output:
	// holding, fence > 0: true
	// held by billing-worker-3
	// released: true
}

func ExampleClient_Lock() {
	ctx := context.Background()
	c := client.New(baseURL) // "": BATON_URL, else http://localhost:8080; the key: BATON_API_KEY

	h, err := c.Lock(ctx, "reports", client.LockOptions{TTL: 30 * time.Second, Wait: 10 * time.Second, Owner: "worker-3"})
	if err != nil {
		fmt.Println(err) // errors.Is(err, client.ErrLockHeld): not granted within Wait
		return
	}
	defer h.Unlock(ctx) // renewed every 10 s until then

	select {
	case <-h.Lost():
		fmt.Println("lost:", h.Err()) // stop touching what the lock protects
	default:
		fmt.Println("holding, fence > 0:", h.Fence() > 0)
	}
	// Output:
	// holding, fence > 0: true
}

func ExampleClient_NewSession() {
	ctx := context.Background()
	c := client.New(baseURL)

	s, err := c.NewSession(ctx, client.SessionOptions{TTL: 30 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx) // releases every hold of the session

	for _, name := range []string{"invoice:1", "invoice:2"} {
		if _, err := s.Lock(ctx, name, client.LockOptions{Wait: 5 * time.Second}); err != nil {
			fmt.Println(err)
			return
		}
	}
	info, err := c.GetSession(ctx, s.ID())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("holds in the session:", info.Locks)
	// Output:
	// holds in the session: 2
}
