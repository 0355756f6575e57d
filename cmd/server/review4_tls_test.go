package main

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Review 4: parked long-polls over TLS, on a live server.
func TestReview4TLSParked(t *testing.T) {
	cfg := testConfig()
	cfg.TLSCertFile, cfg.TLSKeyFile = selfSigned(t)
	base, _ := startServe(t, cfg)
	host := strings.TrimPrefix(base, "http://")
	base = "https://" + host
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	t.Cleanup(cl.CloseIdleConnections)
	hold := func(name string) string {
		t.Helper()
		res, err := cl.Post(base+"/v1/locks/"+name, "application/json", strings.NewReader(`{"ttl_ms":30000}`))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var l struct{ URL string }
		_ = json.NewDecoder(res.Body).Decode(&l)
		if res.StatusCode != 201 {
			t.Fatalf("hold %s: %d", name, res.StatusCode)
		}
		return l.URL
	}
	release := func(url string) {
		t.Helper()
		req, _ := http.NewRequest("DELETE", base+url, nil)
		res, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	waiters := func() float64 {
		res, err := cl.Get(base + "/metrics")
		if err != nil {
			return -1
		}
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "baton_waiters "); ok {
				var f float64
				fmt.Sscan(v, &f)
				return f
			}
		}
		return -1
	}
	await := func(n float64) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%v waiters", n), func() bool { return waiters() == n })
	}
	dial := func() *tls.Conn {
		t.Helper()
		c, err := tls.Dial("tcp", host, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(15 * time.Second))
		return c
	}
	post := func(name string) string {
		body := `{"wait_ms":10000}`
		return fmt.Sprintf("POST /v1/locks/%s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", name, len(body), body)
	}

	t.Run("close_notify hang-up", func(t *testing.T) {
		url := hold("t1")
		c := dial()
		io.WriteString(c, post("t1"))
		await(1)
		c.Close() // close_notify, then FIN
		await(0)
		release(url)
		res, err := cl.Get(base + "/v1/locks/t1")
		if err != nil {
			t.Fatal(err)
		}
		var st struct{ Held bool }
		json.NewDecoder(res.Body).Decode(&st)
		res.Body.Close()
		if st.Held {
			t.Errorf("a TLS waiter that hung up was granted the lock")
		}
	})
	t.Run("pipelined record behind parked", func(t *testing.T) {
		url := hold("t2")
		c := dial()
		io.WriteString(c, post("t2"))
		await(1)
		time.Sleep(50 * time.Millisecond)
		io.WriteString(c, "GET /livez HTTP/1.1\r\nHost: localhost\r\n\r\n")
		time.Sleep(50 * time.Millisecond)
		release(url)
		br := bufio.NewReader(c)
		for i, want := range []int{201, 200} {
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("answer %d: %v", i, err)
			}
			io.Copy(io.Discard, res.Body)
			if res.StatusCode != want {
				t.Errorf("answer %d: %d, want %d", i, res.StatusCode, want)
			}
		}
	})
	t.Run("next request after parked answer", func(t *testing.T) {
		url := hold("t3")
		c := dial()
		io.WriteString(c, post("t3"))
		await(1)
		release(url)
		br := bufio.NewReader(c)
		res, err := http.ReadResponse(br, nil)
		if err != nil || res.StatusCode != 201 {
			t.Fatalf("parked answer: %v %v", res, err)
		}
		io.Copy(io.Discard, res.Body)
		time.Sleep(100 * time.Millisecond) // idle in the lot
		io.WriteString(c, "GET /livez HTTP/1.1\r\nHost: localhost\r\n\r\n")
		res, err = http.ReadResponse(br, nil)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("next request: %v %v", res, err)
		}
	})
}
