package redisconn

import (
	"errors"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// IsDialError reports a failure to connect at all: refused, unreachable, or a
// dial that timed out.
func IsDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// IsConnError reports a broken, refused or timed-out connection, or a closed pool.
func IsConnError(err error) bool {
	if errors.Is(err, redis.ErrClosed) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var nerr net.Error
	if errors.As(err, &nerr) {
		return true
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "EOF") || strings.Contains(msg, "connection") || strings.Contains(msg, "pool timeout")
}
