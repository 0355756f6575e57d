// Package callproxy is a TCP proxy that speaks enough of the Redis protocol
// (RESP2 and RESP3) to fault one script call at a time: it sits between a
// client (a Baton process) and Redis, reads the commands the client sends
// (RESP arrays, pipelined or not) and the replies Redis sends back, and passes
// them on untouched and in order, except the one script call (EVAL, EVALSHA,
// FCALL and their read-only forms) an armed Fault selects: the next such call
// whose keys carry the fault's lock name as their hash tag ({name}).
//
// What it does to that call is the fault's Mode:
//
//   - Late: the client side is closed at once (the client sees a broken
//     connection and recovers as it does: a retry on a new connection, an
//     unknown outcome), while the connection to Redis is kept; the call is
//     sent to Redis Delay later, and its reply dropped. A copy of a call the
//     client gave up on runs after the client has moved on.
//   - LostReply: the call is sent at once; its reply is dropped and the client
//     side closed instead of delivering it. The call ran, and the client cannot
//     know.
//   - Stall: the call is held Delay, then sent; its reply goes to the client
//     if the client is still there (a Delay past the client's read timeout
//     makes the client give up on the connection first).
//
// Commands the client sent after the faulted call on the same connection
// (the rest of its pipeline) are not sent, as on any connection that broke;
// those sent before it get their replies first. A connection that subscribes
// (pub/sub) is passed through without any of this.
package callproxy

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Mode is what a fault does to the call it selects.
type Mode int

const (
	// Late closes the client side at once, sends the call Delay later and
	// drops its reply.
	Late Mode = iota + 1
	// LostReply sends the call at once, drops its reply and closes the client
	// side.
	LostReply
	// Stall holds the call Delay, then sends it, and delivers its reply if
	// the client is still there.
	Stall
)

func (m Mode) String() string {
	switch m {
	case Late:
		return "late"
	case LostReply:
		return "lost-reply"
	case Stall:
		return "stall"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// Fault selects the next script call on a lock and says what to do with it.
type Fault struct {
	Lock  string // the hash tag a key of the call must carry: {Lock}
	Mode  Mode
	Delay time.Duration // Late: from the client side's close to the send; Stall: how long the call is held
	// Skip is how many script calls on the lock the fault lets pass before it
	// selects one; a call an earlier armed fault selects does not count.
	Skip int
}

// Hit is what became of an armed fault's call.
type Hit struct {
	Fault
	Command string // EVALSHA, EVAL, FCALL, ...
	Script  string // its SHA (an EVAL's: its source's), or the function's name
	// Name is the script's name, from the "-- name.lua:" header of its
	// source (the last one: Baton prepends its library), as an EVAL or a
	// SCRIPT LOAD through the proxy showed it; an FCALL's function name; or
	// "" when unknown.
	Name string
	Keys []string // the call's keys
	At   time.Time
	// Closed is when the client side was closed (Late, LostReply; zero for a
	// Stall, whose client may close it itself).
	Closed time.Time
	// Sent is when the call was written to Redis; zero if it never was (the
	// proxy was closed first).
	Sent time.Time
	// Ran is when Redis's reply came, zero if it never did (Redis went away
	// first); Reply sums it up: a status or error, or a script's reply code
	// (the first element of its array).
	Ran   time.Time
	Reply string
}

// Armed is a fault waiting for its call, and then what became of it.
type Armed struct {
	p    *Proxy
	f    Fault
	skip int // calls let pass so far (Proxy.mu)
	hit  chan struct{}
	done chan struct{}

	mu  sync.Mutex
	res Hit
	end bool
}

// Fault is the fault armed.
func (a *Armed) Fault() Fault { return a.f }

// Hit is closed once a call was selected.
func (a *Armed) Hit() <-chan struct{} { return a.hit }

// Done is closed once the selected call's fate is known: its reply came (and
// was delivered or dropped), or it never will (Redis or the proxy went away).
func (a *Armed) Done() <-chan struct{} { return a.done }

// Result is what became of the call so far; ok is false while none was selected.
func (a *Armed) Result() (h Hit, ok bool) {
	a.mu.Lock()
	h = a.res
	a.mu.Unlock()
	h.Keys = append([]string(nil), h.Keys...)
	if h.Name == "" && h.Command != "" {
		h.Name = a.p.name(h.Script)
	}
	return h, !h.At.IsZero()
}

func (a *Armed) update(f func(*Hit)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(&a.res)
}

// finish marks the call's fate known, once.
func (a *Armed) finish() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.end {
		a.end = true
		close(a.done)
	}
}

// Proxy is one listening proxy in front of one Redis.
type Proxy struct {
	ln       net.Listener
	upstream string
	closing  chan struct{}
	wg       sync.WaitGroup

	mu    sync.Mutex
	armed []*Armed
	links map[*link]bool
	shut  bool
}

// names maps the SHA (hex) of each script whose source went through any
// proxy to its name: a SHA names the same source everywhere, and a Baton
// process whose EVALSHA finds the script that another loaded never sends
// the source through its own proxy.
var names = struct {
	sync.Mutex
	m map[string]string
}{m: map[string]string{}}

// scriptHeader is a Baton script's first line: "-- acquire.lua: ...".
var scriptHeader = regexp.MustCompile(`(?m)^-- ([A-Za-z0-9_]+)\.lua:`)

// learn notes the name of a script whose source went through the proxy.
func (p *Proxy) learn(src []byte) string {
	m := scriptHeader.FindAllSubmatch(src, -1)
	if len(m) == 0 {
		return ""
	}
	name := string(m[len(m)-1][1])
	sum := sha1.Sum(src)
	names.Lock()
	defer names.Unlock()
	names.m[hex.EncodeToString(sum[:])] = name
	return name
}

// name is the name learnt for a script's SHA, or "".
func (p *Proxy) name(sha string) string {
	names.Lock()
	defer names.Unlock()
	return names.m[strings.ToLower(sha)]
}

// Start listens on a free loopback port and proxies each connection to
// upstream (host:port).
func Start(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, upstream: upstream, closing: make(chan struct{}), links: map[*link]bool{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is where the proxy listens (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Arm arms a fault: the next script call on f.Lock, from any connection, gets
// it. Faults armed on one lock are used in the order armed.
func (p *Proxy) Arm(f Fault) *Armed {
	a := &Armed{p: p, f: f, hit: make(chan struct{}), done: make(chan struct{})}
	a.res.Fault = f
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = append(p.armed, a)
	return a
}

// Disarm withdraws a fault that selected no call yet; it reports whether it
// did (false: a call was selected, or is being).
func (p *Proxy) Disarm(a *Armed) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.armed {
		if x == a {
			p.armed = append(p.armed[:i], p.armed[i+1:]...)
			a.finish()
			return true
		}
	}
	return false
}

// take returns the first armed fault whose lock is the hash tag of one of
// keys, and disarms it.
func (p *Proxy) take(keys []string) *Armed {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, a := range p.armed {
		if !a.on(keys) {
			continue
		}
		if a.skip < a.f.Skip {
			a.skip++ // let this one pass, and offer it to the next fault
			continue
		}
		p.armed = append(p.armed[:i], p.armed[i+1:]...)
		return a
	}
	return nil
}

// on reports whether a call with keys is on a's lock.
func (a *Armed) on(keys []string) bool {
	for _, k := range keys {
		if tag(k) == a.f.Lock {
			return true
		}
	}
	return false
}

// Close stops listening, closes every connection both ways, and waits for
// the proxy's goroutines; a delayed call not yet sent never is. Faults still
// armed are finished unhit.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.shut {
		p.mu.Unlock()
		return nil
	}
	p.shut = true
	close(p.closing)
	err := p.ln.Close()
	for l := range p.links {
		l.closeBoth()
	}
	for _, a := range p.armed {
		a.finish()
	}
	p.armed = nil
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.upstream, 2*time.Second)
		if err != nil {
			c.Close() // Redis refuses: so does the proxy
			continue
		}
		l := &link{p: p, cl: c, up: up, sending: true}
		l.cond = sync.NewCond(&l.mu)
		p.mu.Lock()
		if p.shut {
			p.mu.Unlock()
			c.Close()
			up.Close()
			return
		}
		p.links[l] = true
		p.wg.Add(2)
		p.mu.Unlock()
		go l.requests()
		go l.replies()
	}
}

// sleep sleeps d, or less if the proxy closes; it reports whether the proxy
// is still open.
func (p *Proxy) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.closing:
		return false
	}
}

// link is one client connection and its own connection to Redis.
type link struct {
	p      *Proxy
	cl, up net.Conn

	mu   sync.Mutex
	cond *sync.Cond // signalled when pending shrinks or replies stop
	// pending is, for each command sent to Redis whose reply has not come
	// back yet, what to do with that reply.
	pending    []expect
	sending    bool // requests is still running: more may be sent
	pubsub     bool // the client subscribed: pass everything through
	clientGone bool // the client side is closed (by the client, or by a fault)
	repliesEnd bool // replies has stopped: no reply will come any more

	clOnce, upOnce sync.Once
}

// expect is what to do with one reply.
type expect struct {
	armed *Armed // the faulted call's, or nil
	drop  bool   // do not deliver it
	close bool   // then close the client side
}

func (l *link) closeClient() {
	l.clOnce.Do(func() { l.cl.Close() })
	l.mu.Lock()
	l.clientGone = true
	l.mu.Unlock()
}

func (l *link) closeUp() { l.upOnce.Do(func() { l.up.Close() }) }

func (l *link) closeBoth() {
	l.clOnce.Do(func() { l.cl.Close() })
	l.closeUp()
}

// drained closes the connection to Redis once nothing more will be sent and
// every reply is in (for a pub/sub connection, once the client has gone); l.mu
// held.
func (l *link) drained() {
	if !l.sending && (len(l.pending) == 0 || l.pubsub) {
		l.closeUp()
	}
}

// requests reads the client's commands and sends them on to Redis.
func (l *link) requests() {
	defer l.p.wg.Done()
	br := bufio.NewReaderSize(l.cl, 32<<10)
	bw := bufio.NewWriterSize(l.up, 32<<10)
	defer func() {
		_ = bw.Flush() // what the client sent before it closed still reaches Redis
		l.mu.Lock()
		l.sending = false
		l.drained()
		l.mu.Unlock()
	}()
	for {
		raw, args, err := readCommand(br)
		if err != nil && !errors.Is(err, errNotCommand) {
			return // the client went away (a partial command is not sent)
		}
		if err != nil { // not a command this proxy reads: pass the rest through
			l.mu.Lock()
			l.pubsub = true
			l.mu.Unlock()
			_, _ = bw.Write(raw)
			_ = bw.Flush()
			_, _ = io.Copy(l.up, br)
			return
		}
		name := strings.ToUpper(string(first(args)))
		l.mu.Lock()
		pubsub := l.pubsub
		if !pubsub && subscribes(name) {
			l.pubsub, pubsub = true, true
		}
		l.mu.Unlock()
		var a *Armed
		var script string // the script's name, when its source is sent
		switch {
		case pubsub:
		case (name == "EVAL" || name == "EVAL_RO") && len(args) > 1:
			script = l.p.learn(args[1])
		case name == "SCRIPT" && len(args) > 2 && strings.EqualFold(string(args[1]), "LOAD"):
			l.p.learn(args[2])
		case strings.HasPrefix(name, "FCALL") && len(args) > 1:
			script = string(args[1])
		}
		if !pubsub {
			if keys, ok := scriptKeys(name, args); ok {
				a = l.p.take(keys)
				if a != nil {
					sha := string(args[1])
					if name == "EVAL" || name == "EVAL_RO" {
						sum := sha1.Sum(args[1])
						sha = hex.EncodeToString(sum[:])
					}
					a.update(func(h *Hit) {
						h.Command, h.Script, h.Name, h.Keys, h.At = name, sha, script, keys, time.Now()
					})
					close(a.hit)
				}
			}
		}
		if a == nil {
			if !pubsub {
				l.mu.Lock()
				l.pending = append(l.pending, expect{})
				l.mu.Unlock()
			}
			if _, err := bw.Write(raw); err != nil {
				return
			}
			if br.Buffered() == 0 {
				if err := bw.Flush(); err != nil {
					return
				}
			}
			continue
		}
		if err := bw.Flush(); err != nil {
			a.finish()
			return
		}
		if !l.fault(a, raw, bw) {
			return
		}
	}
}

// fault applies a's fault to the call raw; it reports whether the link goes
// on reading the client's commands (a Stall) or not.
func (l *link) fault(a *Armed, raw []byte, bw *bufio.Writer) bool {
	send := func(e expect) bool {
		l.mu.Lock()
		l.pending = append(l.pending, e)
		l.mu.Unlock()
		// Noted before the write: its reply may come, and Done close, before
		// the write returns.
		a.update(func(h *Hit) { h.Sent = time.Now() })
		_, err := bw.Write(raw)
		if err == nil {
			err = bw.Flush()
		}
		if err != nil {
			a.update(func(h *Hit) { h.Sent = time.Time{} })
			a.finish()
			return false
		}
		return true
	}
	switch a.f.Mode {
	case Stall:
		if !l.p.sleep(a.f.Delay) {
			a.finish()
			return false
		}
		return send(expect{armed: a})
	case LostReply:
		send(expect{armed: a, drop: true, close: true})
		return false // the rest of the client's pipeline is not sent
	default: // Late
		// The replies to what was sent before go to the client first.
		l.mu.Lock()
		for len(l.pending) > 0 && !l.repliesEnd {
			l.cond.Wait()
		}
		l.mu.Unlock()
		l.closeClient()
		a.update(func(h *Hit) { h.Closed = time.Now() })
		if !l.p.sleep(a.f.Delay) {
			a.finish()
			return false
		}
		send(expect{armed: a, drop: true})
		return false
	}
}

// replies reads Redis's replies and delivers them to the client, but those
// its faults drop.
func (l *link) replies() {
	defer l.p.wg.Done()
	br := bufio.NewReaderSize(l.up, 32<<10)
	bw := bufio.NewWriterSize(l.cl, 32<<10)
	defer func() {
		l.mu.Lock()
		l.repliesEnd = true
		left := l.pending
		l.pending = nil
		l.cond.Broadcast()
		l.mu.Unlock()
		for _, e := range left {
			if e.armed != nil {
				e.armed.finish()
			}
		}
		// Redis went away, or the link is done: so does the client side.
		l.closeBoth()
		l.p.mu.Lock()
		delete(l.p.links, l)
		l.p.mu.Unlock()
	}()
	var buf bytes.Buffer
	for {
		buf.Reset()
		typ, err := readValue(br, &buf)
		if err != nil {
			_ = bw.Flush()
			return
		}
		var e expect
		l.mu.Lock()
		// Pushes and attributes are no replies to a command.
		counted := !l.pubsub && typ != '>' && typ != '|' && len(l.pending) > 0
		if counted {
			e = l.pending[0]
		}
		last := counted && len(l.pending) == 1
		gone := l.clientGone
		l.mu.Unlock()
		if e.armed != nil {
			reply := summary(buf.Bytes())
			e.armed.update(func(h *Hit) { h.Ran, h.Reply = time.Now(), reply })
		}
		switch {
		case e.drop:
			if e.close {
				_ = bw.Flush()
				l.closeClient()
				e.armed.update(func(h *Hit) { h.Closed = time.Now() })
			}
		case !gone:
			_, err := bw.Write(buf.Bytes())
			// Flushed before the reply leaves pending: a Late fault waiting
			// for the replies before its call closes the client side then.
			if err == nil && (br.Buffered() == 0 || last) {
				err = bw.Flush()
			}
			if err != nil {
				l.closeClient() // the client went away: Redis's replies are still read
			}
		}
		if e.armed != nil {
			e.armed.finish()
		}
		l.mu.Lock()
		if counted {
			l.pending = l.pending[1:]
			l.cond.Broadcast()
		}
		l.drained()
		l.mu.Unlock()
	}
}

// subscribes reports commands after which a connection carries pushes, not
// replies to commands one for one.
func subscribes(name string) bool {
	switch name {
	case "SUBSCRIBE", "SSUBSCRIBE", "PSUBSCRIBE", "MONITOR":
		return true
	}
	return false
}

// scriptKeys returns the keys of a script call, and whether it is one.
func scriptKeys(name string, args [][]byte) ([]string, bool) {
	switch name {
	case "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO":
	default:
		return nil, false
	}
	if len(args) < 3 {
		return nil, false
	}
	n, err := strconv.Atoi(string(args[2]))
	if err != nil || n < 0 || 3+n > len(args) {
		return nil, false
	}
	keys := make([]string, n)
	for i := range n {
		keys[i] = string(args[3+i])
	}
	return keys, true
}

// tag is a key's hash tag, as Redis Cluster reads it: what lies between the
// first { and the first } after it, if not empty; else "".
func tag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return ""
	}
	return key[i+1 : i+1+j]
}

func first(args [][]byte) []byte {
	if len(args) == 0 {
		return nil
	}
	return args[0]
}

// maxBulk bounds a bulk string's length, as Redis's proto-max-bulk-len does.
const maxBulk = 512 << 20

// errNotCommand is a client's input that is not a RESP array of bulk strings.
var errNotCommand = errors.New("not a RESP command")

// readCommand reads one command: a RESP array of bulk strings. It returns the
// bytes read (to send on as they are) and the arguments. Input that is not
// such an array is returned with errNotCommand.
func readCommand(br *bufio.Reader) (raw []byte, args [][]byte, err error) {
	line, err := readLine(br)
	raw = append(raw, line...)
	if err != nil {
		return raw, nil, err
	}
	if len(line) < 3 || line[0] != '*' {
		return raw, nil, errNotCommand
	}
	n, err := strconv.Atoi(string(line[1 : len(line)-2]))
	if err != nil || n < 0 {
		return raw, nil, errNotCommand
	}
	args = make([][]byte, 0, n)
	for range n {
		h, err := readLine(br)
		raw = append(raw, h...)
		if err != nil {
			return raw, nil, err
		}
		if len(h) < 3 || h[0] != '$' {
			return raw, nil, errNotCommand
		}
		size, err := strconv.Atoi(string(h[1 : len(h)-2]))
		if err != nil || size < 0 || size > maxBulk {
			return raw, nil, errNotCommand
		}
		start := len(raw)
		raw = append(raw, make([]byte, size+2)...)
		if _, err := io.ReadFull(br, raw[start:]); err != nil {
			return raw, nil, err
		}
		args = append(args, raw[start:start+size])
	}
	return raw, args, nil
}

// readLine reads up to and including "\r\n" (a bare "\n" ends a line too).
func readLine(br *bufio.Reader) ([]byte, error) {
	var out []byte
	for {
		chunk, err := br.ReadSlice('\n')
		out = append(out, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == nil && (len(out) < 2 || out[len(out)-2] != '\r') {
			err = fmt.Errorf("line without CRLF: %q", out)
		}
		return out, err
	}
}

// readValue reads one RESP2 or RESP3 value into buf and returns its type byte.
func readValue(br *bufio.Reader, buf *bytes.Buffer) (byte, error) {
	line, err := readLine(br)
	buf.Write(line)
	if err != nil {
		return 0, err
	}
	if len(line) < 3 {
		return 0, fmt.Errorf("short RESP line %q", line)
	}
	typ := line[0]
	switch typ {
	case '+', '-', ':', '_', ',', '#', '(':
		return typ, nil
	case '$', '!', '=':
		n, err := strconv.Atoi(string(line[1 : len(line)-2]))
		if err != nil {
			return 0, fmt.Errorf("bad RESP length %q", line)
		}
		if n < 0 {
			return typ, nil // a RESP2 null
		}
		if _, err := io.CopyN(buf, br, int64(n)+2); err != nil {
			return 0, err
		}
		return typ, nil
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(string(line[1 : len(line)-2]))
		if err != nil {
			return 0, fmt.Errorf("bad RESP length %q", line)
		}
		if typ == '%' || typ == '|' {
			n *= 2
		}
		for range max(n, 0) {
			if _, err := readValue(br, buf); err != nil {
				return 0, err
			}
		}
		return typ, nil
	}
	return 0, fmt.Errorf("unknown RESP type %q", typ)
}

// summary sums up a reply: a status, an error, a number, or an array's first
// element (a script's reply code).
func summary(raw []byte) string {
	br := bufio.NewReader(bytes.NewReader(raw))
	for {
		line, err := readLine(br)
		if err != nil || len(line) < 3 {
			return ""
		}
		body := string(line[1 : len(line)-2])
		switch line[0] {
		case '*', '~', '>':
			if body == "0" || strings.HasPrefix(body, "-") {
				return "(empty)"
			}
			continue // the first element
		case '$', '=':
			n, _ := strconv.Atoi(body)
			if n < 0 {
				return "(nil)"
			}
			b := make([]byte, min(n, 64))
			_, _ = io.ReadFull(br, b)
			return string(b)
		case '_':
			return "(nil)"
		}
		if len(body) > 64 {
			body = body[:64]
		}
		return body
	}
}
