package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// etcdClient speaks etcd's JSON gateway (grpc-gateway over the v3 API) with
// net/http, as a client without an etcd library would: one acquire+release pair
// is lease grant, lock, unlock and lease revoke.
type etcdClient struct {
	base string
	hc   *http.Client
}

func newEtcdClient(base string) *etcdClient {
	return &etcdClient{base: base, hc: &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
	}}}
}

// call POSTs body to path and decodes the answer into out (when not nil).
func (c *etcdClient) call(ctx context.Context, path string, body any, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd %s: %s: %s", path, resp.Status, bytes.TrimSpace(rb))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(rb, out)
}

// grant creates a lease of ttl seconds and returns its ID and the TTL etcd gave
// it (etcd raises a TTL below its minimum).
func (c *etcdClient) grant(ctx context.Context, ttl int) (id string, granted int, err error) {
	var r struct {
		ID  string
		TTL string
	}
	if err := c.call(ctx, "/v3/lease/grant", map[string]any{"TTL": ttl}, &r); err != nil {
		return "", 0, err
	}
	if r.ID == "" {
		return "", 0, fmt.Errorf("etcd lease grant: no ID")
	}
	granted, _ = strconv.Atoi(r.TTL)
	return r.ID, granted, nil
}

// lock blocks until name is held under lease and returns the lock's key (base64).
func (c *etcdClient) lock(ctx context.Context, name, lease string) (string, error) {
	var r struct{ Key string }
	err := c.call(ctx, "/v3/lock/lock", map[string]any{"name": b64(name), "lease": lease}, &r)
	if err == nil && r.Key == "" {
		err = fmt.Errorf("etcd lock: no key")
	}
	return r.Key, err
}

func (c *etcdClient) unlock(ctx context.Context, key string) error {
	return c.call(ctx, "/v3/lock/unlock", map[string]any{"key": key}, nil)
}

func (c *etcdClient) revoke(ctx context.Context, lease string) error {
	return c.call(ctx, "/v3/lease/revoke", map[string]any{"ID": lease}, nil)
}

// queued counts the keys under name's lock prefix: the holder and its waiters
// (etcd's lock puts name/<lease> and waits for the lower revisions to go).
func (c *etcdClient) queued(ctx context.Context, name string) (int, error) {
	var r struct{ Count string }
	err := c.call(ctx, "/v3/kv/range", map[string]any{
		"key": b64(name + "/"), "range_end": b64(name + "0"), "count_only": true,
	}, &r)
	if err != nil {
		return 0, err
	}
	if r.Count == "" {
		return 0, nil
	}
	return strconv.Atoi(r.Count)
}

// pair is one acquire+release as a client of this API must do it.
func (c *etcdClient) pair(ctx context.Context, name string) error {
	lease, _, err := c.grant(ctx, 30)
	if err != nil {
		return err
	}
	key, err := c.lock(ctx, name, lease)
	if err != nil {
		return err
	}
	if err := c.unlock(ctx, key); err != nil {
		return err
	}
	return c.revoke(ctx, lease)
}

// leaseWorker is a long-lived client as etcd's own concurrency package runs one:
// it grants one lease up front and takes every lock under it, so that a pair is
// lock and unlock, 2 calls. The lease's 60 s TTL outlives any run, so no
// keep-alive is sent while measuring (a real client would send one every TTL/3,
// one call in 20 s); done revokes it.
func (c *etcdClient) leaseWorker(ctx context.Context) (pairFunc, func(), error) {
	lease, _, err := c.grant(ctx, 60)
	if err != nil {
		return nil, nil, err
	}
	pair := func(ctx context.Context, name string) error {
		key, err := c.lock(ctx, name, lease)
		if err != nil {
			return err
		}
		return c.unlock(ctx, key)
	}
	done := func() { _ = c.revoke(context.WithoutCancel(ctx), lease) }
	return pair, done, nil
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
