package park

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// poller watches many sockets with one epoll instance. Each registration is
// one-shot: it reports once, then stays quiet until armed again. The epoll
// descriptor is itself waited on through Go's network poller (an os.File in
// non-blocking mode), so no thread sits in epoll_wait.
type poller struct {
	f      *os.File
	epfd   int
	handle func(token uint64, ev event)
	done   chan struct{}
}

// event is what a socket reported.
type event uint8

const (
	evReadable event = 1 << iota // bytes to read: the next request has begun
	evHangUp                     // the peer closed (its side, or all of it) or reset the connection
)

func newPoller(handle func(uint64, event)) (*poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll: %w", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		_ = unix.Close(epfd)
		return nil, fmt.Errorf("epoll: %w", err)
	}
	p := &poller{f: os.NewFile(uintptr(epfd), "park-epoll"), epfd: epfd, handle: handle, done: make(chan struct{})}
	go p.loop()
	return p, nil
}

// watch arms fd: once for a hang-up, and for bytes to read as well when
// readable is set. The token comes back with the event.
func (p *poller) watch(fd int, token uint64, readable bool, add bool) error {
	ev := unix.EpollEvent{Events: unix.EPOLLRDHUP | unix.EPOLLONESHOT}
	if readable {
		ev.Events |= unix.EPOLLIN
	}
	ev.Fd, ev.Pad = int32(uint32(token)), int32(uint32(token>>32))
	op := unix.EPOLL_CTL_MOD
	if add {
		op = unix.EPOLL_CTL_ADD
	}
	return unix.EpollCtl(p.epfd, op, fd, &ev)
}

// forget removes fd; its events in flight, if any, find no token any more.
func (p *poller) forget(fd int) {
	_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, fd, nil)
}

func (p *poller) loop() {
	defer close(p.done)
	rc, err := p.f.SyscallConn()
	if err != nil {
		return
	}
	events := make([]unix.EpollEvent, 256)
	for {
		var n int
		var werr error
		err := rc.Read(func(fd uintptr) bool {
			for {
				n, werr = unix.EpollWait(int(fd), events, 0)
				if !errors.Is(werr, unix.EINTR) {
					return n != 0 || werr != nil
				}
			}
		})
		if err != nil || werr != nil {
			return // closed
		}
		for _, e := range events[:n] {
			var ev event
			if e.Events&unix.EPOLLIN != 0 {
				ev |= evReadable
			}
			if e.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				ev |= evHangUp
			}
			p.handle(uint64(uint32(e.Fd))|uint64(uint32(e.Pad))<<32, ev)
		}
	}
}

// close stops the loop and closes the epoll descriptor.
func (p *poller) close() {
	_ = p.f.Close()
	<-p.done
}

// errAgain: peek found nothing to read yet.
var errAgain = unix.EAGAIN

// peek is how many bytes (0 or 1) wait to be read on fd without taking them:
// 0 at the end of the stream, -1 with the error (errAgain: none yet).
func peek(fd int) (int, error) {
	var b [1]byte
	for {
		n, _, err := unix.Recvfrom(fd, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return -1, errAgain
		case err != nil:
			return -1, err
		}
		return n, nil
	}
}
