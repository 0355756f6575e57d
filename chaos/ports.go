package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/batonhq/baton/internal/redistest"
)

// A Baton process is started again where its clients expect it: on the ports
// it was given at first. They are chosen below the kernel's ephemeral range
// (redistest.StablePort), so no outgoing connection (of this program, of a
// Baton, of anything else on the machine) is given one while the process is
// down; only another listener can take it. A start that finds a port taken
// waits for it (bindWait); if it is still taken then, the process moves to
// other ports, and every dialer of this program that reaches a Baton (the
// clients' transport, the probes', the hang-ups') follows it there through
// batonAddrs: the clients keep the URLs they were made with.

// bindWait is how long a start waits for a Baton's ports to be free again
// before it moves the process to others; maxMoves how often it may move in one
// start.
const (
	bindWait = 5 * time.Second
	maxMoves = 3
)

// errPortTaken is a start that found one of the process's ports taken.
var errPortTaken = errors.New("port taken")

// batonAddrs maps the address a Baton process was first given (host:port of its
// base or debug URL) to the one it listens on now, for the processes that
// moved.
var batonAddrs sync.Map

// dialBaton dials addr, or where the Baton process first given addr listens now.
func dialBaton(ctx context.Context, network, addr string) (net.Conn, error) {
	if to, ok := batonAddrs.Load(addr); ok {
		addr = to.(string)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// loopback is 127.0.0.1:port.
func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// batonPorts are a listen and a debug address for a Baton process, free now and
// outside the ephemeral range.
func batonPorts() (addr, debug string, err error) {
	for {
		p, err := redistest.StablePort()
		if err != nil {
			return "", "", err
		}
		d, err := redistest.StablePort()
		if err != nil {
			return "", "", err
		}
		if p != d {
			return loopback(p), loopback(d), nil
		}
	}
}

// free reports whether a listener could be opened on addr now.
func free(addr string) bool {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// move gives the process new ports (it is not running) and has this program's
// dialers follow it there.
func (b *baton) move() error {
	addr, debug, err := batonPorts()
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.env = append(b.env, "BATON_ADDR="+addr, "BATON_DEBUG_ADDR="+debug) // the last of a repeated variable wins
	b.addr, b.debugAddr = addr, debug
	batonAddrs.Store(b.addr0, addr)
	batonAddrs.Store(b.debug0, debug)
	b.moves = append(b.moves, fmt.Sprintf("%s, debug %s", addr, debug))
	return nil
}
