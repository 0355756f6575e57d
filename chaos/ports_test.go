package main

import (
	"errors"
	"net"
	"strings"
	"testing"
)

// A Baton whose port another listener holds is not started there (that
// listener would answer its readiness probe); moved, it gets fresh ports
// outside the ephemeral range, and this program's dialers, asking for the
// address it was first given, reach it where it is now.
func TestTakenPortMovesTheBaton(t *testing.T) {
	addr, debug, err := batonPorts()
	if err != nil {
		t.Fatal(err)
	}
	squatter, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer squatter.Close()
	b := &baton{name: "T", bin: "/nonexistent", dir: t.TempDir(), addr0: addr, debug0: debug, addr: addr, debugAddr: debug}
	if err := b.startOnce(); !errors.Is(err, errPortTaken) || b.starts != 0 {
		t.Fatalf("start on a taken port: %v (%d processes started)", err, b.starts)
	}
	if err := b.move(); err != nil {
		t.Fatal(err)
	}
	defer batonAddrs.Delete(addr)
	defer batonAddrs.Delete(debug)
	if b.addr == addr || b.debugAddr == debug || !strings.Contains(b.env[len(b.env)-2], b.addr) {
		t.Fatalf("moved to %s, debug %s (env %v)", b.addr, b.debugAddr, b.env)
	}
	l, err := net.Listen("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Addr, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			accepted <- c.RemoteAddr()
			c.Close()
		}
	}()
	c, err := dialBaton(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := <-accepted; got.String() != c.LocalAddr().String() {
		t.Fatalf("dialled %s, the moved Baton's listener saw %s", c.LocalAddr(), got)
	}
}
