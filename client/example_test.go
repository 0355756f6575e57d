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
