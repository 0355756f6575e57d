package redistest_test

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/redistest"
)

// A server's port is below the kernel's ephemeral range, so no outgoing
// connection takes it while the server is down; and Restart waits out
// another listener that holds the port a while, then starts on it.
func TestServerPortOutsideTheEphemeralRange(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skip(err)
	}
	low, err := strconv.Atoi(strings.Fields(string(b))[0])
	if err != nil || low < 11000 {
		t.Skipf("ephemeral range %q leaves no room below it", b)
	}
	s := redistest.Start(t)
	if s.Port >= low {
		t.Fatalf("port %d is in the ephemeral range (from %d)", s.Port, low)
	}
	s.Kill()
	l, err := net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(500*time.Millisecond, func() { l.Close() })
	start := time.Now()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Fatalf("restarted after %v, while another listener held the port", d)
	}
	if err := s.Client(t).Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}
