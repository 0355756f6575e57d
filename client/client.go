package client

import (
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// DefaultUserAgent is the User-Agent sent unless WithUserAgent says otherwise.
const DefaultUserAgent = "baton-go-client/1"

// DefaultURL is the server New talks to when given no URL and BATON_URL is unset.
const DefaultURL = "http://localhost:8080"

// DefaultRetryMaxTime is how long, by default, a request whose answer was lost
// is retried (see WithRetryMaxTime).
const DefaultRetryMaxTime = 10 * time.Second

// maxIdlePerHost is how many idle connections the default transport keeps to the
// server: enough for a benchmark's worth of concurrent requests to reuse them.
const maxIdlePerHost = 1024

// Client talks to one Baton server. It is safe for concurrent use; share one.
type Client struct {
	base     string // the server's base URL, without a trailing slash
	hc       *http.Client
	ua       string
	key      string // the API key; never logged, never in an error
	keySet   bool   // WithAPIKey was given, so BATON_API_KEY is not read
	retryMax time.Duration

	mu       sync.Mutex
	sessions map[string]*Session // the live sessions NewSession made, by id
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the Client send its requests with hc instead of the
// default, which is tuned for many concurrent requests to one host. A Timeout
// on hc bounds long-polls too, so keep it above the longest wait you ask for.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.hc = hc }
}

// WithUserAgent sets the User-Agent header of every request; empty sends none.
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.ua = ua }
}

// WithAPIKey sends key as "Authorization: Bearer <key>" on every request.
// Without this option the key is read from BATON_API_KEY; with it, even an
// empty key, the environment is not read (empty sends no key).
func WithAPIKey(key string) Option {
	return func(c *Client) { c.key, c.keySet = key, true }
}

// WithRetryMaxTime bounds how long a POST whose answer was lost (a transport
// error, or a 502, 503 or 504) is retried with the same Idempotency-Key and
// body, and how long Unlock and Session.Close retry theirs. The default is
// DefaultRetryMaxTime; 0 sends every request once. The call's context bounds
// the retries too.
func WithRetryMaxTime(d time.Duration) Option {
	return func(c *Client) { c.retryMax = max(0, d) }
}

// New returns a Client for the Baton server at baseURL, such as
// "http://localhost:8080". An empty baseURL means BATON_URL, and DefaultURL
// when that is unset too. The API key is WithAPIKey's, else BATON_API_KEY's. A
// bad baseURL is reported by the first call.
func New(baseURL string, opts ...Option) *Client {
	if baseURL == "" {
		baseURL = os.Getenv("BATON_URL")
	}
	if baseURL == "" {
		baseURL = DefaultURL
	}
	c := &Client{base: strings.TrimRight(baseURL, "/"), ua: DefaultUserAgent, retryMax: DefaultRetryMaxTime}
	for _, o := range opts {
		o(c)
	}
	if !c.keySet {
		c.key = os.Getenv("BATON_API_KEY")
	}
	if c.hc == nil {
		c.hc = defaultHTTPClient()
	}
	return c
}

// BaseURL is the server's URL, without a trailing slash. Add a Lease's URL to
// it for the lease's absolute URL.
func (c *Client) BaseURL() string { return c.base }

// defaultHTTPClient is tuned for many concurrent requests to one host: a large
// idle pool (the standard library keeps only 2 idle connections per host, so a
// burst would open and close connections by the thousand), no cap on open
// connections, and no overall Timeout, because long-polls are bounded by their
// context and wait instead.
func defaultHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          maxIdlePerHost,
		MaxIdleConnsPerHost:   maxIdlePerHost,
		MaxConnsPerHost:       0,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}}
}
