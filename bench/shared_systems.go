package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/client"
)

// sharedSystems are the systems of the shared scenario: Baton over HTTP, and
// redis-script, Baton's scripts called in process (as Redisson's read-write lock
// and semaphore call theirs): the floor Baton's HTTP layer can approach.
func (e *env) sharedSystems(ctx context.Context) ([]sharedSystem, func(), error) {
	var ss []sharedSystem
	var closers []func()
	if e.cfg.wantSystem(sysBaton) {
		b := newBatonShared(e.batonURL)
		if err := b.pair(ctx, "shared-check"); err != nil {
			b.hc.CloseIdleConnections()
			return nil, nil, fmt.Errorf("baton: %w (a Baton from before shared holds? leave the scenario out: -only)", err)
		}
		closers = append(closers, b.hc.CloseIdleConnections)
		ss = append(ss, sharedSystem{sysBaton, b.pair, b.round, e.batonPIDs()})
	}
	if e.cfg.wantSystem(sysRedisScript) {
		rdb := newRedisClient(e.redis.Addr())
		closers = append(closers, func() { rdb.Close() })
		s := newScriptLocker(rdb, scriptPrefix)
		ss = append(ss, sharedSystem{sysRedisScript, s.sharedPair, scriptSharedRound(rdb, s), []int{e.redisPID}})
	}
	return ss, func() {
		for _, c := range closers {
			c()
		}
	}, nil
}

// batonShared takes shared holds over HTTP. client/ has no shared option, so
// the acquire is posted here; polls and releases go through client/, over the
// same connections.
type batonShared struct {
	c    *client.Client
	hc   *http.Client
	base string
}

func newBatonShared(base string) *batonShared {
	hc := benchHTTPClient(nil)
	return &batonShared{c: client.New(base, client.WithHTTPClient(hc)), hc: hc, base: base}
}

// benchHTTPClient is tuned as client/'s default (a large idle pool, no overall
// timeout: long-polls are bounded by their context), with wrap, if not nil,
// around its transport.
func benchHTTPClient(wrap func(http.RoundTripper) http.RoundTripper) *http.Client {
	var rt http.RoundTripper = &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	if wrap != nil {
		rt = wrap(rt)
	}
	return &http.Client{Transport: rt}
}

type sharedAcquireJSON struct {
	Shared bool  `json:"shared"`
	TTLms  int64 `json:"ttl_ms,omitempty"`
	Fair   bool  `json:"fair,omitempty"`
}

// acquire asks for a shared hold on name (ttl 0: the server's default): it
// returns the lease id when granted (201), or the ticket id when queued (202,
// only when fair).
func (b *batonShared) acquire(ctx context.Context, name string, ttl time.Duration, fair bool) (lease, ticket string, err error) {
	body, err := json.Marshal(sharedAcquireJSON{Shared: true, TTLms: ttl.Milliseconds(), Fair: fair})
	if err != nil {
		return "", "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.base+"/v1/locks/"+url.PathEscape(name), bytes.NewReader(body))
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.hc.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", "", err
	}
	var v struct {
		Lease  string `json:"lease"`
		Ticket string `json:"ticket"`
		Shared bool   `json:"shared"`
	}
	switch resp.StatusCode {
	case http.StatusCreated:
		if err := json.Unmarshal(data, &v); err != nil || v.Lease == "" || !v.Shared {
			return "", "", fmt.Errorf("shared acquire %q: 201 without a shared lease: %s", name, data)
		}
		return v.Lease, "", nil
	case http.StatusAccepted:
		if err := json.Unmarshal(data, &v); err != nil || v.Ticket == "" {
			return "", "", fmt.Errorf("shared acquire %q: 202 without a ticket: %s", name, data)
		}
		return "", v.Ticket, nil
	}
	return "", "", fmt.Errorf("shared acquire %q: %s %s", name, resp.Status, strings.TrimSpace(string(data)))
}

// pair takes a shared hold on name with the server's default ttl and releases it.
func (b *batonShared) pair(ctx context.Context, name string) error {
	lease, _, err := b.acquire(ctx, name, 0, false)
	if err != nil {
		return err
	}
	_, err = b.c.Release(ctx, name, lease)
	return err
}

// round queues n shared fair tickets (each POST returns its ticket before the
// next is sent), has each long-poll its ticket, waits until Baton holds all n
// polls, and releases the exclusive holder. The grants are released once all n
// hold, outside the measured time.
func (b *batonShared) round(ctx context.Context, name string, n int) (first, last time.Duration, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hold, err := b.c.Acquire(ctx, name, client.AcquireOptions{TTL: time.Minute})
	if err != nil {
		return 0, 0, err
	}
	if hold.Lease == nil {
		return 0, 0, fmt.Errorf("holder of %q not granted", name)
	}
	tickets := make([]string, n)
	for i := range n {
		lease, ticket, err := b.acquire(ctx, name, time.Minute, true)
		if err != nil {
			return 0, 0, err
		}
		if lease != "" {
			return 0, 0, fmt.Errorf("shared waiter %d of %q granted beside the exclusive holder", i, name)
		}
		tickets[i] = ticket
	}
	before, err := batonWaiters(ctx, b.base)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	at := make([]time.Duration, n)
	leases := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, t := range tickets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				res, err := b.c.Poll(ctx, name, t, 30*time.Second)
				if err != nil {
					errs[i] = err
					return
				}
				if res.Lease != nil {
					at[i], leases[i] = time.Since(start), res.Lease.ID
					return
				}
			}
		}()
	}
	released := time.Duration(0)
	err = awaitWaiters(ctx, b.base, before+n, 10*time.Second)
	if err == nil {
		released = time.Since(start)
		_, err = b.c.Release(ctx, name, hold.Lease.ID)
	}
	if err != nil {
		cancel()
	}
	wg.Wait()
	for _, e := range errs {
		if err == nil && e != nil {
			err = e
		}
	}
	if err != nil {
		return 0, 0, err
	}
	first, last = spread(released, at)
	for _, l := range leases {
		if _, err := b.c.Release(ctx, name, l); err != nil {
			return 0, 0, err
		}
	}
	return first, last, nil
}

// sharedPair takes a shared hold on name and releases it, as Baton's store does.
func (s *scriptLocker) sharedPair(ctx context.Context, name string) error {
	return s.pairMode(ctx, name, true)
}

// scriptSharedRound is the run of shared grants without HTTP: the holder and n
// shared fair tickets queued with Baton's acquire script, the holder's release
// granting the whole run in one script call, and the grants read from one
// pub/sub subscription, as Baton's dispatcher reads them.
func scriptSharedRound(rdb *redis.Client, s *scriptLocker) sharedRound {
	return func(ctx context.Context, name string, n int) (first, last time.Duration, err error) {
		keys := s.keys(name)
		holder := leaseHash()
		if err := s.acquire(ctx, keys, s.args(holder, 60000, "new", "", "", false, 0, ""), "granted"); err != nil {
			return 0, 0, fmt.Errorf("holder of %q: %w", name, err)
		}
		ps := rdb.Subscribe(ctx, keys[0]+":ev")
		defer ps.Close()
		if _, err := ps.Receive(ctx); err != nil {
			return 0, 0, err
		}
		waiting := map[string]bool{} // ticket hashes not granted yet
		leases := make([]string, n)  // the lease hash each ticket is granted under
		for i := range n {
			th := leaseHash()
			leases[i] = leaseHash()
			if err := s.acquire(ctx, keys, s.args(leaseHash(), 60000, "fair", th, leases[i], true, 60000, pollID()), "queued"); err != nil {
				return 0, 0, fmt.Errorf("shared waiter %d of %q: %w", i, name, err)
			}
			waiting[th] = true
		}
		start := time.Now()
		if err := s.release(ctx, keys, holder); err != nil {
			return 0, 0, err
		}
		at := make([]time.Duration, 0, n)
		for len(at) < n {
			msg, err := ps.ReceiveMessage(ctx)
			if err != nil {
				return 0, 0, err
			}
			th, ok := strings.CutPrefix(msg.Payload, "g:")
			if !ok {
				continue
			}
			th, _, _ = strings.Cut(th, ":")
			if !waiting[th] {
				return 0, 0, fmt.Errorf("grant to an unknown ticket, or twice")
			}
			delete(waiting, th)
			at = append(at, time.Since(start))
		}
		for _, l := range leases {
			if err := s.release(ctx, keys, l); err != nil {
				return 0, 0, err
			}
		}
		return at[0], at[n-1], nil
	}
}
