package redisconn

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis Cluster: what the store needs beyond go-redis's cluster client. A
// script is sent once (OnceCmd), a slot's migration is waited out (TryAgain),
// MOVED and ASK replies are read (Redirect), and a key's slot is computed
// (Slot) as the server does.

// OnceCmd is a command the cluster client must not send again after a
// connection error or timeout: it may have run. (go-redis's cluster client
// retries those errors once on the same node and once more on another,
// whatever MaxRetries says, unless the command says NoRetry.) Redirections are
// still followed: a MOVED or ASK reply means it did not run.
type OnceCmd struct{ *redis.Cmd }

// NoRetry implements redis.Cmder.
func (OnceCmd) NoRetry() bool { return true }

// tryAgainBudget bounds how long a call waits out a slot's migration.
const tryAgainBudget = 2 * time.Second

// TryAgain reports whether a call that failed with err should be sent again,
// after waiting its turn: a TRYAGAIN reply (a script on a slot being migrated
// names a key that is on the other node, or on neither) says it did not run,
// and a slot's migration usually ends within milliseconds. Bounded by the
// call's context and by tryAgainBudget.
func TryAgain(ctx context.Context, err error, attempt int) bool {
	if !redis.HasErrorPrefix(err, "TRYAGAIN") {
		return false
	}
	pause := tryAgainPause(attempt)
	if pause == 0 {
		return false
	}
	t := time.NewTimer(pause)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// tryAgainPause is the pause before attempt+1: 10 ms doubling to 200 ms, 0
// once tryAgainBudget is spent.
func tryAgainPause(attempt int) time.Duration {
	var spent time.Duration
	for i := 0; ; i++ {
		p := min(10*time.Millisecond<<min(i, 5), 200*time.Millisecond)
		if spent+p > tryAgainBudget {
			return 0
		}
		if i == attempt {
			return p
		}
		spent += p
	}
}

// Redirect reads a MOVED or ASK error: its kind, slot and address.
func Redirect(err error) (kind string, slotNo int, addr string, ok bool) {
	var rerr redis.Error
	if err == nil || !errors.As(err, &rerr) {
		return "", 0, "", false
	}
	f := strings.Fields(rerr.Error())
	if len(f) != 3 || (f[0] != "MOVED" && f[0] != "ASK") {
		return "", 0, "", false
	}
	n, err := strconv.Atoi(f[1])
	if err != nil {
		return "", 0, "", false
	}
	// Redis writes an IPv6 address unbracketed ("::1:7001"): the port is
	// after the last colon.
	addr = f[2]
	if i := strings.LastIndexByte(addr, ':'); i > 0 && !strings.HasPrefix(addr, "[") {
		addr = net.JoinHostPort(addr[:i], addr[i+1:])
	}
	return f[0], n, addr, true
}

// Slot is Redis Cluster's hash slot of key: CRC16 (XMODEM) of its hash tag,
// or of the whole key when it has none, modulo 16384.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc % 16384)
}
