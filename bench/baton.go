package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/batonhq/baton/client"
)

// batonPair is one uncontended acquire and release over HTTP, with a lease of
// ttl (0: the server's default).
func batonPair(c *client.Client, ttl time.Duration) pairFunc {
	return func(ctx context.Context, name string) error {
		res, err := c.Acquire(ctx, name, client.AcquireOptions{TTL: ttl})
		if err != nil {
			return err
		}
		if res.Lease == nil {
			return fmt.Errorf("acquire %q: no lease", name)
		}
		_, err = c.Release(ctx, name, res.Lease.ID)
		return err
	}
}

// batonHandoff queues n fair tickets in arrival order (each POST returns its
// ticket before the next is sent), has every waiter long-poll its ticket, waits
// until all n polls are held by Baton, then releases the holder. A granted waiter
// releases at once, which hands the lock to the next ticket.
func batonHandoff(c *client.Client, base string) handoffRound {
	return func(ctx context.Context, name string, n int, ch *chain) error {
		hold, err := c.Acquire(ctx, name, client.AcquireOptions{TTL: time.Minute})
		if err != nil {
			return err
		}
		if hold.Lease == nil {
			return fmt.Errorf("holder of %q not granted", name)
		}
		tickets := make([]*client.Ticket, n)
		for i := range n {
			res, err := c.Acquire(ctx, name, client.AcquireOptions{TTL: time.Minute, Fair: true})
			if err != nil {
				return err
			}
			if res.Ticket == nil {
				return fmt.Errorf("waiter %d of %q: no ticket", i, name)
			}
			tickets[i] = res.Ticket
		}
		before, err := batonWaiters(ctx, base)
		if err != nil {
			return err
		}
		var wg sync.WaitGroup
		errc := make(chan error, n)
		for i, t := range tickets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					res, err := c.Poll(ctx, name, t.ID, 30*time.Second)
					if err != nil {
						errc <- err
						return
					}
					if res.Lease != nil {
						ch.granted(i)
						ch.releasing()
						if _, err := c.Release(ctx, name, res.Lease.ID); err != nil {
							errc <- err
						}
						return
					}
				}
			}()
		}
		if err := awaitWaiters(ctx, base, before+n, 10*time.Second); err != nil {
			return err
		}
		ch.releasing()
		if _, err := c.Release(ctx, name, hold.Lease.ID); err != nil {
			return err
		}
		wg.Wait()
		close(errc)
		return <-errc
	}
}

// batonExpiry: the holder takes a short lease and vanishes; a non-fair waiter
// blocks behind it. Timed on this machine's clock, as etcd's is: the lease end
// is the holder's answer's arrival plus the TTL it gave (Baton's ttl, by the
// Redis clock), the grant the waiter's answer's arrival.
func batonExpiry(c *client.Client, ttl time.Duration) expiryRep {
	return func(ctx context.Context, name string) (expiryObs, error) {
		sent := time.Now()
		hold, err := c.Acquire(ctx, name, client.AcquireOptions{TTL: ttl})
		if err != nil {
			return expiryObs{}, err
		}
		got := time.Now()
		if hold.Lease == nil {
			return expiryObs{}, fmt.Errorf("holder of %q not granted", name)
		}
		left := hold.Lease.TTL
		if left <= 0 {
			left = ttl
		}
		if time.Until(got.Add(left)) < expiryLead {
			return expiryObs{}, errLate
		}
		w, err := c.Acquire(ctx, name, client.AcquireOptions{TTL: time.Minute, Wait: 10 * time.Second})
		if err != nil {
			return expiryObs{}, err
		}
		if w.Lease == nil {
			return expiryObs{}, fmt.Errorf("waiter of %q not granted", name)
		}
		o := observe(sent, got, left, time.Now())
		_, err = c.Release(ctx, name, w.Lease.ID)
		return o, err
	}
}

// batonWaiters reads the baton_waiters gauge: the long-polls Baton holds.
func batonWaiters(ctx context.Context, base string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := metricsClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "baton_waiters "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f), err
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no baton_waiters in /metrics")
}

var metricsClient = &http.Client{Timeout: 10 * time.Second}

// awaitWaiters polls the gauge until Baton holds at least n long-polls.
func awaitWaiters(ctx context.Context, base string, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		got, err := batonWaiters(ctx, base)
		if err != nil {
			return err
		}
		if got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("baton holds %d long-polls after %v, want %d", got, timeout, n)
		}
		time.Sleep(time.Millisecond) // the gauge is the only signal there is
	}
}
