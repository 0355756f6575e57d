package redisconn

import (
	"slices"
	"strings"
	"testing"
)

func TestParseSentinelAddrs(t *testing.T) {
	tests := []struct {
		give string
		want []string
	}{
		{give: "redis+sentinel://h1/m", want: []string{"h1:26379"}},
		{give: "redis+sentinel://h1:1,h2/m", want: []string{"h1:1", "h2:26379"}},
		{give: "redis+sentinel://[::1]/m", want: []string{"[::1]:26379"}},
		{give: "redis+sentinel://[::1]:5000,[fe80::1]/m", want: []string{"[::1]:5000", "[fe80::1]:26379"}},
	}
	for _, tt := range tests {
		fo, err := parseSentinelURL(tt.give)
		if err != nil {
			t.Errorf("%s: %v", tt.give, err)
			continue
		}
		if !slices.Equal(fo.SentinelAddrs, tt.want) {
			t.Errorf("%s: addresses %q, want %q", tt.give, fo.SentinelAddrs, tt.want)
		}
	}
}

func TestParseClusterURL(t *testing.T) {
	tests := []struct {
		give      string
		want      []string
		user, pwd string
		tls       bool
	}{
		{give: "redis+cluster://h1", want: []string{"h1:6379"}},
		{give: "redis+cluster://h1:7000,h2:7001,[::1]:7002", want: []string{"h1:7000", "h2:7001", "[::1]:7002"}},
		{give: "redis+cluster://[::1]", want: []string{"[::1]:6379"}},
		{give: "redis+cluster://u:p%40ss@h1:7000/0", want: []string{"h1:7000"}, user: "u", pwd: "p@ss"},
		{give: "rediss+cluster://:pw@h1:7000,h2:7001", want: []string{"h1:7000", "h2:7001"}, pwd: "pw", tls: true},
	}
	for _, tt := range tests {
		o, err := parseClusterURL(tt.give)
		if err != nil {
			t.Errorf("%s: %v", tt.give, err)
			continue
		}
		if !slices.Equal(o.Addrs, tt.want) || o.Username != tt.user || o.Password != tt.pwd || (o.TLSConfig != nil) != tt.tls {
			t.Errorf("%s: addrs %q user %q password %q tls %v", tt.give, o.Addrs, o.Username, o.Password, o.TLSConfig != nil)
		}
	}
	// An error never echoes the URL: it may carry a password.
	if _, err := parseClusterURL("redis+cluster://u:hunter2@h1:7000/5"); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error %v", err)
	}
}

// No error from NewClient shows any part of a URL's password, also of one with
// an unencoded '/' or '%': cmd/server reports that error when it cannot start,
// so it would reach the logs. A cluster URL's userinfo ends at its last '@',
// so a '/' in the password is not taken for the start of the path; and a URL
// with a user name or password that does not parse gets an error that says so
// without quoting it (urlError), since go-redis's ParseURL and net/url quote
// the part they refuse, which may hold the rest of the password.
func TestURLErrorsNeverEchoThePassword(t *testing.T) {
	tests := []struct{ give, secret string }{
		{give: "redis+cluster://u:hunter/2secret@h1:7000", secret: "2secret"},
		{give: "rediss+cluster://u:hunter/2secret@h1:7000,h2:7001/0", secret: "2secret"},
		{give: "redis://u:hunter/2secret@h1:7000/0", secret: "hunter"},
		{give: "redis://u:pa%zzsecret@h1:7000/0", secret: "zzsecret"},
	}
	for _, tt := range tests {
		_, err := NewClient(tt.give)
		if err != nil && strings.Contains(err.Error(), tt.secret) {
			t.Errorf("NewClient(a URL with password part %q): error %q shows it", tt.secret, err)
		}
	}
}
