package main

import (
	"errors"
	"fmt"
	"time"
)

// Config is read once from the environment (BATON_*); tests build it directly.
type Config struct {
	Addr            string        `envconfig:"ADDR" default:":8080"`
	RedisURL        string        `envconfig:"REDIS_URL"`
	KeyPrefix       string        `envconfig:"KEY_PREFIX" default:"baton"`
	DefaultTTL      time.Duration `envconfig:"DEFAULT_TTL" default:"30s"`
	MinTTL          time.Duration `envconfig:"MIN_TTL" default:"100ms"`
	MaxTTL          time.Duration `envconfig:"MAX_TTL" default:"24h"`
	MaxWait         time.Duration `envconfig:"MAX_WAIT" default:"60s"`
	TicketTTL       time.Duration `envconfig:"TICKET_TTL" default:"10s"`
	MaxWaiters      int           `envconfig:"MAX_WAITERS" default:"50000"`
	LogLevel        string        `envconfig:"LOG_LEVEL" default:"info"`
	LogFormat       string        `envconfig:"LOG_FORMAT" default:"json"`
	ShutdownDelay   time.Duration `envconfig:"SHUTDOWN_DELAY" default:"1s"`
	ShutdownTimeout time.Duration `envconfig:"SHUTDOWN_TIMEOUT" default:"10s"`
	// WaitReplicas > 0: every grant waits (WAIT) for that many replicas to
	// acknowledge it, at most WaitTimeout; see store.Options.
	WaitReplicas int           `envconfig:"WAIT_REPLICAS" default:"0"`
	WaitTimeout  time.Duration `envconfig:"WAIT_TIMEOUT" default:"100ms"`
	// FenceGuard is how long a name's fence key outlives its last grant; fences
	// only grow as long as the Redis clock never steps back by more than this.
	FenceGuard time.Duration `envconfig:"FENCE_GUARD" default:"1h"`
	// DebugAddr, when set, serves Go's runtime profiles there (debug.go).
	DebugAddr string `envconfig:"DEBUG_ADDR"`
}

func (c Config) validate() error {
	var errs []error
	if c.MinTTL <= 0 || c.MinTTL > c.MaxTTL {
		errs = append(errs, fmt.Errorf("BATON_MIN_TTL (%v) must be positive and at most BATON_MAX_TTL (%v)", c.MinTTL, c.MaxTTL))
	}
	if c.DefaultTTL < c.MinTTL || c.DefaultTTL > c.MaxTTL {
		errs = append(errs, fmt.Errorf("BATON_DEFAULT_TTL (%v) must be between BATON_MIN_TTL and BATON_MAX_TTL", c.DefaultTTL))
	}
	if c.MaxWait < 0 {
		errs = append(errs, errors.New("BATON_MAX_WAIT must not be negative"))
	}
	if c.TicketTTL < 100*time.Millisecond {
		errs = append(errs, errors.New("BATON_TICKET_TTL must be at least 100ms"))
	}
	if c.MaxWaiters < 1 {
		errs = append(errs, errors.New("BATON_MAX_WAITERS must be at least 1"))
	}
	if c.LogFormat != "json" && c.LogFormat != "console" {
		errs = append(errs, errors.New("BATON_LOG_FORMAT must be json or console"))
	}
	if c.ShutdownDelay < 0 || c.ShutdownTimeout <= 0 {
		errs = append(errs, errors.New("BATON_SHUTDOWN_DELAY must not be negative and BATON_SHUTDOWN_TIMEOUT must be positive"))
	}
	if c.WaitReplicas < 0 {
		errs = append(errs, errors.New("BATON_WAIT_REPLICAS must not be negative (0 turns WAIT off)"))
	}
	if c.WaitReplicas > 0 && c.RedisURL == "" {
		errs = append(errs, errors.New("BATON_WAIT_REPLICAS needs BATON_REDIS_URL: the embedded store has no replicas"))
	}
	// WAIT must end well within the Redis client's 2s read timeout.
	if c.FenceGuard < time.Second {
		errs = append(errs, fmt.Errorf("BATON_FENCE_GUARD (%v) must be at least 1s: it is the longest backward step of the Redis clock fences survive", c.FenceGuard))
	}
	if c.WaitTimeout < time.Millisecond || c.WaitTimeout > time.Second {
		errs = append(errs, fmt.Errorf("BATON_WAIT_TIMEOUT (%v) must be between 1ms and 1s", c.WaitTimeout))
	}
	return errors.Join(errs...)
}
