package client_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/batonhq/baton/client"
)

// A rejected key is a clear error naming the lock, at once: never a retry loop.
func TestKeyRejected(t *testing.T) {
	r := startRig(t)
	tests := []struct {
		name   string
		key    string
		lock   string
		want   error
		status int
	}{
		{"no key", "", "client:a", client.ErrUnauthorized, http.StatusUnauthorized},
		{"unknown key", "bk_" + strings.Repeat("x", 43), "client:b", client.ErrUnauthorized, http.StatusUnauthorized},
		{"outside its grants", r.Keys.Limited, "other:c", client.ErrForbidden, http.StatusForbidden},
		{"read only", r.Keys.Reader, "client:d", client.ErrForbidden, http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := client.New(r.Proxy.URL, client.WithAPIKey(tt.key))
			before := r.count("/v1/locks/" + tt.lock)
			_, err := c.Lock(r.ctx(), tt.lock, client.LockOptions{Fair: true, Wait: 5e9})
			wantProblem(t, err, tt.want, tt.status)
			if !strings.Contains(err.Error(), `"`+tt.lock+`"`) {
				t.Errorf("error %q does not name the lock", err)
			}
			if tt.key != "" && strings.Contains(err.Error(), tt.key) {
				t.Errorf("error %q shows the key", err)
			}
			if n := r.count("/v1/locks/"+tt.lock) - before; n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
		})
	}
}

// New reads BATON_URL and BATON_API_KEY when given neither; an explicit
// option wins over the environment.
func TestEnvironment(t *testing.T) {
	r := startRig(t)
	t.Setenv("BATON_URL", r.URL)
	t.Setenv("BATON_API_KEY", r.Keys.Limited)
	c := client.New("")
	if c.BaseURL() != r.URL {
		t.Fatalf("BaseURL %q, want %q", c.BaseURL(), r.URL)
	}
	h, err := c.Lock(r.ctx(), "client:env", client.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Unlock(r.ctx()); err != nil {
		t.Fatal(err)
	}
	_, err = client.New("", client.WithAPIKey(r.Keys.Reader)).Lock(r.ctx(), "client:env", client.LockOptions{})
	if !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("WithAPIKey(reader): %v, want ErrForbidden", err)
	}
	t.Setenv("BATON_URL", "")
	if got := client.New("").BaseURL(); got != client.DefaultURL {
		t.Fatalf("BaseURL %q, want %q", got, client.DefaultURL)
	}
}
