package park

import (
	"bytes"
	"net/http"
	"strconv"
	"time"
)

// request is what the framing of an answer depends on, taken from a request
// when it parks: net/http decides the same from the same fields.
type request struct {
	head             bool // a HEAD: headers only
	proto11          bool // HTTP/1.1 (or later): chunking, and keep-alive by default
	wantsClose       bool // Connection: close (or an HTTP/1.0 request without keep-alive)
	wants10KeepAlive bool // HTTP/1.0 with Connection: keep-alive
}

func requestOf(r *http.Request) request {
	conn := first(r.Header, "Connection")
	return request{
		head:             r.Method == http.MethodHead,
		proto11:          r.ProtoAtLeast(1, 1),
		wantsClose:       r.Close || hasToken(conn, "close"),
		wants10KeepAlive: r.ProtoMajor == 1 && r.ProtoMinor == 0 && hasToken(conn, "keep-alive"),
	}
}

// bufferBeforeChunking is net/http's buffer in front of a response: an answer
// the handler writes in one piece of at most this many bytes goes out with a
// Content-Length, a longer one as it comes (chunked on HTTP/1.1).
const bufferBeforeChunking = 2048

// wire returns the bytes net/http writes for an answer to q whose handler set
// header, called WriteHeader(status) and wrote body in one Write, on a server
// whose keep-alives are on or off (off while it shuts down), and whether
// net/http closes the connection after them. It follows net/http's
// chunkWriter.writeHeader (Go 1.26) step by step for that case; wire_test.go
// compares its output with a real server's for every case the API meets.
func wire(q request, status int, header http.Header, body []byte, keepAlives bool, now time.Time) ([]byte, bool) {
	h := header.Clone() // net/http writes the header as it was at WriteHeader
	if h == nil {
		h = http.Header{}
	}
	allowed := bodyAllowed(status)
	contentLength := -1
	if cl := first(h, "Content-Length"); cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil && v >= 0 {
			contentLength = int(v)
		} else {
			delete(h, "Content-Length") // net/http logs an invalid one and drops it
		}
	}
	// Within the buffer, the whole body is there when the header goes out.
	done := len(body) <= bufferBeforeChunking
	closeAfter := false
	var set extra
	if done && allowed && !has(h, "Content-Length") && (!q.head || len(body) > 0) {
		contentLength = len(body)
		set.contentLength = strconv.Itoa(len(body))
	}
	hasCL := contentLength != -1
	if q.wants10KeepAlive && (q.head || hasCL || !allowed) {
		if !has(h, "Connection") {
			set.connection = "keep-alive"
		}
	} else if !q.proto11 || q.wantsClose {
		closeAfter = true
	}
	if first(h, "Connection") == "close" || !keepAlives {
		closeAfter = true
	}
	if allowed {
		if !has(h, "Content-Type") && h.Get("Content-Encoding") == "" && len(body) > 0 {
			set.contentType = http.DetectContentType(body)
		}
	} else {
		for _, k := range suppressed(status) {
			delete(h, k)
		}
	}
	if !has(h, "Date") {
		set.date = now.UTC().Format(http.TimeFormat)
	}
	chunking := false
	switch {
	case q.head || !allowed || status == http.StatusNoContent:
	case hasCL:
	case q.proto11:
		chunking = true
		set.transferEncoding = "chunked"
	default:
		closeAfter = true // HTTP/1.0 without a length: the close ends the body
	}
	if chunking {
		delete(h, "Content-Length")
	}
	if closeAfter && (!keepAlives || !hasToken(first(h, "Connection"), "close")) {
		delete(h, "Connection")
		if q.proto11 {
			set.connection = "close"
		}
	}

	var b bytes.Buffer
	b.Grow(256 + len(body))
	writeStatusLine(&b, q.proto11, status)
	_ = h.Write(&b)
	set.write(&b)
	b.WriteString("\r\n")
	switch {
	case q.head || !allowed:
	case chunking:
		b.WriteString(strconv.FormatInt(int64(len(body)), 16))
		b.WriteString("\r\n")
		b.Write(body)
		b.WriteString("\r\n0\r\n\r\n")
	default:
		b.Write(body)
	}
	return b.Bytes(), closeAfter
}

// extra are the headers net/http adds, written after the handler's in this order.
type extra struct {
	date, contentLength, contentType, connection, transferEncoding string
}

func (e extra) write(b *bytes.Buffer) {
	for _, kv := range [...][2]string{
		{"Date", e.date}, {"Content-Length", e.contentLength}, {"Content-Type", e.contentType},
		{"Connection", e.connection}, {"Transfer-Encoding", e.transferEncoding},
	} {
		if kv[1] != "" {
			b.WriteString(kv[0])
			b.WriteString(": ")
			b.WriteString(kv[1])
			b.WriteString("\r\n")
		}
	}
}

func writeStatusLine(b *bytes.Buffer, proto11 bool, code int) {
	if proto11 {
		b.WriteString("HTTP/1.1 ")
	} else {
		b.WriteString("HTTP/1.0 ")
	}
	b.WriteString(strconv.Itoa(code))
	if text := http.StatusText(code); text != "" {
		b.WriteString(" " + text + "\r\n")
		return
	}
	b.WriteString(" status code " + strconv.Itoa(code) + "\r\n")
}

// bodyAllowed is net/http's bodyAllowedForStatus.
func bodyAllowed(status int) bool {
	switch {
	case status >= 100 && status <= 199, status == http.StatusNoContent, status == http.StatusNotModified:
		return false
	}
	return true
}

// suppressed is net/http's suppressedHeaders.
func suppressed(status int) []string {
	switch {
	case status == http.StatusNotModified:
		return []string{"Content-Type", "Content-Length", "Transfer-Encoding"}
	case !bodyAllowed(status):
		return []string{"Content-Length", "Transfer-Encoding"}
	}
	return nil
}

// first and has look a key up as net/http's unexported Header.get and has do:
// as written, not canonicalised.
func first(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func has(h http.Header, key string) bool {
	_, ok := h[key]
	return ok
}

// hasToken is net/http's: whether token (lower case) is in v, ignoring ASCII
// case, between spaces, commas or tabs.
func hasToken(v, token string) bool {
	if len(token) > len(v) || token == "" {
		return false
	}
	if v == token {
		return true
	}
	boundary := func(b byte) bool { return b == ' ' || b == ',' || b == '\t' }
	for sp := 0; sp <= len(v)-len(token); sp++ {
		if b := v[sp]; b != token[0] && b|0x20 != token[0] {
			continue
		}
		if sp > 0 && !boundary(v[sp-1]) {
			continue
		}
		if end := sp + len(token); end != len(v) && !boundary(v[end]) {
			continue
		}
		if asciiEqualFold(v[sp:sp+len(token)], token) {
			return true
		}
	}
	return false
}

func asciiEqualFold(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		a, b := s[i], t[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}
