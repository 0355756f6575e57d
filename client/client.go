package client

import (
	"net"
	"net/http"
	"strings"
	"time"
)

// DefaultUserAgent is the User-Agent sent unless WithUserAgent says otherwise.
const DefaultUserAgent = "baton-go-client/1"

// maxIdlePerHost is how many idle connections the default transport keeps to the
// server: enough for a benchmark's worth of concurrent requests to reuse them.
const maxIdlePerHost = 1024

// Client talks to one Baton server. It is safe for concurrent use; share one.
type Client struct {
	base string // the server's base URL, without a trailing slash
	hc   *http.Client
	ua   string
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

// New returns a Client for the Baton server at baseURL, such as
// "http://localhost:8080". A bad baseURL is reported by the first call.
func New(baseURL string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), ua: DefaultUserAgent}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = defaultHTTPClient()
	}
	return c
}

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
