package main

import (
	"strings"
	"testing"
	"time"
)

func TestValidateWait(t *testing.T) {
	tests := []struct {
		give    func(*Config)
		wantErr string
	}{
		{give: func(c *Config) {}},
		{give: func(c *Config) { c.RedisURL, c.WaitReplicas = "redis+sentinel://h/m", 1 }},
		{give: func(c *Config) { c.WaitReplicas = -1 }, wantErr: "BATON_WAIT_REPLICAS must not be negative"},
		{give: func(c *Config) { c.WaitReplicas = 1 }, wantErr: "BATON_WAIT_REPLICAS needs BATON_REDIS_URL"},
		{give: func(c *Config) { c.WaitTimeout = 0 }, wantErr: "BATON_WAIT_TIMEOUT"},
		{give: func(c *Config) { c.WaitTimeout = 2 * time.Second }, wantErr: "BATON_WAIT_TIMEOUT"},
	}
	for i, tt := range tests {
		cfg := testConfig()
		cfg.WaitTimeout = 100 * time.Millisecond
		tt.give(&cfg)
		err := cfg.validate()
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("case %d: got %v, want no error", i, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("case %d: got %v, want an error containing %q", i, err, tt.wantErr)
		}
	}
}
