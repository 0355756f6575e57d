package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/auth"
	"github.com/batonhq/baton/handlers"
	"github.com/batonhq/baton/internal/redistest"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/park"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/store/redisconn"
)

// The HTTP tests run the whole stack (handlers, store, real redis-server) and
// validate every request and response against api/openapi.yaml.

var (
	sharedRedis *redistest.Server
	specRouter  routers.Router
)

func TestMain(m *testing.M) {
	doc, err := openapi3.NewLoader().LoadFromData(api.Spec)
	if err == nil {
		err = doc.Validate(context.Background())
	}
	if err == nil {
		specRouter, err = gorillamux.NewRouter(doc)
	}
	if err != nil {
		println("api/openapi.yaml:", err.Error())
		os.Exit(2)
	}
	s, stop := redistest.MustStartMain()
	sharedRedis = s
	code := m.Run()
	stop()
	stopCluster()
	os.Exit(code)
}

// The tests of the HTTP API, the tickets, the invariants, sessions and listing
// run against one Redis and against a 3-master, 3-replica Redis Cluster
// (onBoth); the cluster starts on first use and is shared.
var (
	clusterOnce   sync.Once
	sharedCluster *redistest.Cluster
	stopCluster   = func() {}
)

func theCluster() *redistest.Cluster {
	clusterOnce.Do(func() { sharedCluster, stopCluster = redistest.MustStartClusterMain() })
	return sharedCluster
}

// onBoth runs f against one Redis ("redis") and against a Redis Cluster
// ("cluster").
func onBoth(t *testing.T, f func(t *testing.T, cluster bool)) {
	t.Run("redis", func(t *testing.T) { f(t, false) })
	t.Run("cluster", func(t *testing.T) { f(t, true) })
}

// syncBuffer collects log output from many goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// env is one Baton server (handlers + store) over httptest, on a Redis of its own
// or the shared one, with a key prefix of its own.
type env struct {
	t       *testing.T
	URL     string
	Store   *store.Store
	Redis   redis.UniversalClient // a client for inspecting Redis (a cluster client on a cluster)
	Server  *redistest.Server     // nil on a cluster
	Prefix  string
	Logs    *syncBuffer
	Metrics *metrics.Metrics
	client  *http.Client

	Guard    *auth.Guard  // keys mode only
	KeysFile string       // keys mode only
	Handler  http.Handler // the server's handler, for requests from other peers
	Lot      *park.Lot    // where long-polls park; nil with NoPark
}

// envOptions tune newEnv; zero values are the defaults of API.md.
type envOptions struct {
	Cluster    bool              // on the shared Redis Cluster (Redis and RedisURL are then ignored)
	Redis      *redistest.Server // default: the shared one
	RedisURL   string            // where the store connects, e.g. a proxy in front of Redis; default: Redis's URL
	Prefix     string            // default: fresh per env
	Limits     handlers.Limits
	TicketTTL  time.Duration
	MaxWaiters int
	// KeyMaxWaiters is the max_waiters of keys that set none (keys mode).
	KeyMaxWaiters int
	// KeyCaps are the caps on live objects of keys that set none (keys
	// mode); BuiltinCaps the built-in principal's (protected mode).
	KeyCaps, BuiltinCaps auth.Caps
	// Keys, when set, is a keys file (YAML): the server runs in keys mode.
	Keys             string
	Protected        bool // protected mode: loopback peers only
	IdempotencyGrace time.Duration
	// NoPark serves every long-poll on net/http's goroutine, as without a lot
	// (cmd/server's BATON_PARK=off, or a platform without epoll).
	NoPark bool
	// The bounds of the store's calls waiting for a turn; default the store's.
	MaxQueuedCalls int
	MaxQueueWait   time.Duration
}

var prefixSeq atomic.Int64

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	if o.Redis == nil {
		o.Redis = sharedRedis
	}
	if o.Prefix == "" {
		o.Prefix = "h" + strconv.FormatInt(prefixSeq.Add(1), 10) + "x" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	}
	if o.Limits == (handlers.Limits{}) {
		o.Limits = handlers.Limits{DefaultTTL: 30 * time.Second, MinTTL: 100 * time.Millisecond, MaxTTL: 24 * time.Hour, MaxWait: 60 * time.Second}
	}
	if o.RedisURL == "" {
		o.RedisURL = o.Redis.URL()
	}
	var inspect redis.UniversalClient
	if o.Cluster {
		o.Redis, o.RedisURL = nil, theCluster().URL()
		inspect = theCluster().Client(t)
	} else {
		inspect = o.Redis.Client(t)
	}
	rdb, gate, err := redisconn.NewGatedClient(o.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	log := zerolog.New(logs)
	m := metrics.New()
	st := store.New(rdb, store.Options{Prefix: o.Prefix, TicketTTL: o.TicketTTL, MaxWaiters: o.MaxWaiters, Logger: log, Metrics: m,
		IdempotencyGrace: o.IdempotencyGrace, Gate: gate, MaxQueuedCalls: o.MaxQueuedCalls, MaxQueueWait: o.MaxQueueWait})
	var guard *auth.Guard
	var keysFile string
	if o.Keys != "" {
		keysFile = filepath.Join(t.TempDir(), "keys.yaml")
		if err := os.WriteFile(keysFile, []byte(o.Keys), 0o600); err != nil {
			t.Fatal(err)
		}
		if guard, err = auth.NewGuard(auth.Config{File: keysFile, Logger: log, ReloadErrors: m.AuthReloadErrors,
			KeyMaxWaiters: o.KeyMaxWaiters, KeyCaps: o.KeyCaps}); err != nil {
			t.Fatal(err)
		}
	}
	if o.Protected {
		if guard, err = auth.NewGuard(auth.Config{Logger: log, KeyCaps: o.KeyCaps, BuiltinCaps: o.BuiltinCaps}); err != nil {
			t.Fatal(err)
		}
	}
	// Wired as cmd/server wires it: waiting long-polls park (package park).
	var lot *park.Lot
	if !o.NoPark {
		if lot, err = park.New(park.Config{IdleTimeout: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	h := handlers.NewServer(handlers.Deps{Store: st, Limits: o.Limits, Logger: log, Metrics: m, Spec: api.Spec, Guard: guard, Lot: lot})
	srv := httptest.NewUnstartedServer(h)
	if lot != nil {
		srv.Config.Handler, srv.Config.ConnContext = lot.Handler(h), lot.ConnContext
		srv.Listener = lot.Listen(srv.Listener)
	}
	srv.Start()
	e := &env{t: t, URL: srv.URL, Store: st, Redis: inspect, Server: o.Redis, Prefix: o.Prefix,
		Logs: logs, Metrics: m, client: &http.Client{Timeout: 90 * time.Second}, Guard: guard, KeysFile: keysFile,
		Handler: h, Lot: lot}
	t.Cleanup(func() {
		st.Shutdown()
		srv.Close()
		if lot != nil {
			lot.Close()
		}
		_ = st.Close()
		_ = rdb.Close()
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	return e
}

// resp is a response whose body has been read and validated against the spec.
type resp struct {
	Status int
	Header http.Header
	Raw    []byte
	Body   map[string]any
	Close  bool // the server closes the connection after it (Connection: close, which Go moves out of Header)
}

// Str, Int and Bool read top-level body fields.
func (r *resp) Str(k string) string { s, _ := r.Body[k].(string); return s }
func (r *resp) Int(k string) int64  { f, _ := r.Body[k].(json.Number); n, _ := f.Int64(); return n }
func (r *resp) Bool(k string) bool  { b, _ := r.Body[k].(bool); return b }

// req is a request to send; Body is marshalled to JSON unless it is a string or
// []byte. A Header of "" removes that header; "Host" sets the request's Host.
type req struct {
	Method  string
	Path    string
	Body    any
	Header  map[string]string
	Context context.Context
}

// do sends a request, validates it and its response against api/openapi.yaml, and
// fails the test on any mismatch.
func (e *env) do(r req) *resp {
	e.t.Helper()
	res, err := e.try(r)
	if err != nil {
		e.t.Fatalf("%s %s: %v", r.Method, r.Path, err)
	}
	return res
}

// try is do without failing on transport errors (for requests a test cancels).
func (e *env) try(r req) (*resp, error) {
	e.t.Helper()
	var body []byte
	switch b := r.Body.(type) {
	case nil:
	case string:
		body = []byte(b)
	case []byte:
		body = b
	default:
		var err error
		if body, err = json.Marshal(b); err != nil {
			e.t.Fatal(err)
		}
	}
	ctx := r.Context
	if ctx == nil {
		ctx = context.Background()
	}
	hr, err := http.NewRequestWithContext(ctx, r.Method, e.URL+r.Path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	for k, v := range r.Header {
		switch {
		case http.CanonicalHeaderKey(k) == "Host": // Go sends hr.Host, never a Host header
			hr.Host = v
		case v == "":
			hr.Header.Del(k)
		default:
			hr.Header.Set(k, v)
		}
	}
	hres, err := e.client.Do(hr)
	if err != nil {
		return nil, err
	}
	defer hres.Body.Close()
	raw, err := io.ReadAll(hres.Body)
	if err != nil {
		return nil, err
	}
	out := &resp{Status: hres.StatusCode, Header: hres.Header, Raw: raw, Close: hres.Close}
	if len(raw) > 0 && strings.Contains(hres.Header.Get("Content-Type"), "json") {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&out.Body); err != nil {
			e.t.Errorf("%s %s: body is not JSON: %v: %q", r.Method, r.Path, err, raw)
		}
	}
	e.validate(hr, body, out)
	return out, nil
}

// validate checks the response (status, headers, body) against the spec, and the
// headers every response must carry.
func (e *env) validate(hr *http.Request, body []byte, out *resp) {
	e.t.Helper()
	if out.Header.Get("Cache-Control") != "no-store" {
		e.t.Errorf("%s %s: Cache-Control %q, want no-store", hr.Method, hr.URL.Path, out.Header.Get("Cache-Control"))
	}
	if out.Header.Get("X-Request-Id") == "" {
		e.t.Errorf("%s %s: no X-Request-Id", hr.Method, hr.URL.Path)
	}
	head := hr.Method == http.MethodHead
	if head && len(out.Raw) > 0 {
		e.t.Errorf("HEAD %s: a body of %d bytes, want none", hr.URL.Path, len(out.Raw))
	}
	vr := specRequest(hr)
	vr.Body = io.NopCloser(bytes.NewReader(body))
	route, params, err := specRouter.FindRoute(vr)
	if err != nil {
		if out.Status == http.StatusNotFound || out.Status == http.StatusMethodNotAllowed {
			return // a route the spec does not have, answered as such
		}
		if strings.Contains(hr.URL.Path, "//") && out.Status == http.StatusBadRequest && out.Str("type") == "/problems/invalid-name" {
			return // an empty {name} segment: the spec cannot route it, the server rejects it
		}
		e.t.Errorf("%s %s: not in api/openapi.yaml: %v", hr.Method, hr.URL.Path, err)
		return
	}
	in := &openapi3filter.RequestValidationInput{
		Request: vr, PathParams: params, Route: route,
		Options: &openapi3filter.Options{ExcludeRequestBody: true, ExcludeRequestQueryParams: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
	}
	rv := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 out.Status,
		Header:                 out.Header,
		Body:                   io.NopCloser(bytes.NewReader(out.Raw)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, ExcludeResponseBody: head},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), rv); err != nil {
		e.t.Errorf("%s %s: response %d does not match api/openapi.yaml: %v\nbody: %s", hr.Method, hr.URL.Path, out.Status, err, out.Raw)
	}
}

// specRequest is hr as the spec routes it: a HEAD is answered as the GET is,
// without the body (RFC 9110), so the spec lists only the GET.
func specRequest(hr *http.Request) *http.Request {
	vr := hr.Clone(context.Background())
	if vr.Method == http.MethodHead {
		vr.Method = http.MethodGet
	}
	return vr
}

// keys lists every Redis key of this env's prefix.
func (e *env) keys() []string {
	e.t.Helper()
	keys, err := allKeys(context.Background(), e.Redis, e.Prefix+":*")
	if err != nil {
		e.t.Fatal(err)
	}
	return keys
}

// snapshot is every key of this env's prefix with its type and value, to compare
// Redis before and after a request (sameKeys). A lock's "w" part is left out: it
// is the time until which the lock's releases are announced, which a waiter
// that gives up moves to its wait's end, and which changes nothing else. A key
// that expires while it is read (KEYS listed it, it was gone when read: Redis
// has no empty hash or sorted set) is left out, as it is from a snapshot taken a
// moment later.
func (e *env) snapshot() map[string]string {
	e.t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, k := range e.keys() {
		typ := e.Redis.Type(ctx, k).Val()
		var v any
		switch typ {
		case "none":
			continue
		case "string":
			s, err := e.Redis.Get(ctx, k).Result()
			if err == redis.Nil {
				continue
			}
			v = s
			if strings.HasSuffix(k, "}") { // a lock
				lv := parseLock(s)
				lv.parts[1] = ""
				v = strings.Join(lv.parts, "|")
			}
		case "hash":
			h := e.Redis.HGetAll(ctx, k).Val()
			if len(h) == 0 {
				continue
			}
			v = h
		case "zset":
			z := e.Redis.ZRangeWithScores(ctx, k, 0, -1).Val()
			if len(z) == 0 {
				continue
			}
			v = z
		}
		b, _ := json.Marshal(v)
		out[k] = typ + " " + string(b)
		if e.Redis.PTTL(ctx, k).Val() > 0 {
			out[k] += expiring
		}
	}
	return out
}

// expiring ends the snapshot entry of a key that has a ttl.
const expiring = " (expiring)"

// sameKeys reports whether Redis holds what it held at before: every key as it
// was, but for keys that have run out meanwhile by their own ttl (a tombstone,
// a short hold), which no request removed.
func sameKeys(before, after map[string]string) bool {
	for k, v := range before {
		if w, ok := after[k]; ok && w != v || !ok && !strings.HasSuffix(v, expiring) {
			return false
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			return false
		}
	}
	return true
}

// awaitReady asks /readyz until it answers 200, which also loads the scripts.
// The first ask after a start can outlast the store's read timeout on a
// loaded machine (503), which is no fault of what a test checks next.
func (e *env) awaitReady() {
	e.t.Helper()
	pollUntil(e.t, 30*time.Second, "/readyz 200", func() bool {
		r, err := e.try(req{Method: "GET", Path: "/readyz"})
		return err == nil && r.Status == http.StatusOK
	})
}

// acquire takes a lock that must be free and returns the lease response.
func (e *env) acquire(name string, body map[string]any) *resp {
	e.t.Helper()
	r := e.do(req{Method: "POST", Path: "/v1/locks/" + name, Body: body})
	if r.Status != http.StatusCreated {
		e.t.Fatalf("acquire %s: status %d: %s", name, r.Status, r.Raw)
	}
	return r
}

// wantStatus fails unless the response has the status (and, for problems, the kind).
func wantStatus(t *testing.T, r *resp, status int, kind string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Raw)
	}
	if kind != "" {
		if got := r.Str("type"); got != "/problems/"+kind {
			t.Fatalf("problem type %q, want /problems/%s: %s", got, kind, r.Raw)
		}
		if r.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("Content-Type %q, want application/problem+json", r.Header.Get("Content-Type"))
		}
		if r.Int("status") != int64(status) {
			t.Fatalf("problem status %d, want %d", r.Int("status"), status)
		}
	}
}

// allKeys is KEYS pattern on one Redis, and on every master of a cluster.
func allKeys(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return rdb.Keys(ctx, pattern).Result()
	}
	var mu sync.Mutex
	var all []string
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		keys, err := c.Keys(ctx, pattern).Result()
		mu.Lock()
		all = append(all, keys...)
		mu.Unlock()
		return err
	})
	return all, err
}

// must drops an error a test has no use for (the result is then empty).
func must[T any](v T, _ error) T { return v }

// ownRedisEnv is an env on a redis-server of its own, so that its script calls
// can be counted (a waiter's first check is awaited that way: it announces
// itself nowhere else).
func ownRedisEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	if o.Redis == nil {
		o.Redis = redistest.Start(t)
	}
	return newEnv(t, o)
}

// awaitCalls waits until the env's Redis has run at least n scripts.
func (e *env) awaitCalls(n int) {
	e.t.Helper()
	pollUntil(e.t, 10*time.Second, "script calls >= "+itoa(n), func() bool { return scriptCalls(e.t, e) >= n })
}

// parkChecked parks a long-poll (a non-fair acquire with a wait) and returns
// once it has made its first check after subscribing: two script calls, its
// try on arrival and that check.
func (e *env) parkChecked(name string, body map[string]any) <-chan answer {
	e.t.Helper()
	base := scriptCalls(e.t, e)
	ch := e.parkWaiter(name, body)
	e.awaitCalls(base + 2)
	return ch
}

// leftKeys lists the lock's keys other than the lock's own, with their
// remaining lives.
func (e *env) leftKeys(name string) []string {
	e.t.Helper()
	ctx := context.Background()
	var left []string
	for _, k := range e.keys() {
		if strings.HasPrefix(k, e.lockKey(name)) && k != e.lockKey(name) {
			left = append(left, k+" (pttl "+e.Redis.PTTL(ctx, k).Val().Round(time.Second).String()+")")
		}
	}
	sort.Strings(left)
	return left
}

// heldBy reports whether the lock is held with the owner label.
func (e *env) heldBy(name, owner string) bool {
	e.t.Helper()
	st := e.do(req{Method: "GET", Path: "/v1/locks/" + name})
	return st.Bool("held") && st.Str("owner") == owner
}

// queueLen is the number of entries in the lock's queue.
func (e *env) queueLen(name string) int64 {
	return e.Redis.ZCard(context.Background(), e.lockKey(name)+":q").Val()
}
