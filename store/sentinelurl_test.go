package store

import (
	"slices"
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
