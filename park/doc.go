// Package park keeps a waiting long-poll's HTTP/1.x connection without
// net/http's goroutine and buffers.
//
// net/http spends about 28 KB on each connection whose request is being
// served: the goroutine's stack, a second goroutine that watches for the
// client going away, 4 KiB read and write buffers, the request and response.
// A long-poll keeps all of it for its whole wait. Once a handler knows its
// request waits (its store call did not answer at once), Park takes the
// connection over (http.Hijacker), registers the socket with one epoll
// instance for the whole process, and lets the handler return: net/http's
// goroutine and buffers are gone. A hang-up (EPOLLRDHUP, HUP, ERR) is reported
// to the request as net/http's cancelled context was. The answer is written
// through the Spot's ResponseWriter and sent by Finish with the bytes net/http
// would have sent (status line, header order, Date, Content-Length or
// chunking, Connection) — wire_test.go checks them against net/http itself.
// The connection then waits in the poller, still without a goroutine, for its
// next request, and goes back to the server through the Listener the moment
// it begins (or is closed at the server's idle timeout, or when the server
// shuts down, as net/http would).
//
// What cannot park is served as before: HTTP/2, a ResponseWriter that is not
// net/http's, a request whose body was not read to its end, a connection not
// on a socket, any platform without epoll, and everything once the server's
// listener is closed. Bytes the client sent behind the parked request
// (pipelining) go back to the server with the connection.
//
// Wiring, in the server:
//
//	lot, err := park.New(park.Config{IdleTimeout: srv.IdleTimeout, WriteTimeout: srv.WriteTimeout})
//	srv.ConnContext = lot.ConnContext
//	srv.Handler = lot.Handler(h)
//	go srv.Serve(lot.Listen(ln)) // with TLS: lot.Listen(tls.NewListener(ln, cfg))
//	...
//	srv.Shutdown(ctx) // closes the listener: answers from now on close their connection
//	lot.Shutdown(ctx) // waits for the parked answers, closes the rest
package park
