package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
)

// httpConns follows the client connections of the WebSocket/HTTP listener,
// so that a shutdown can tell a connection muxd owes an answer from one that
// owes nothing and close the latter at once. A connection owes an answer
// from the moment a whole request has arrived on it (headers and the body
// up to its end) until the answer has been written and the connection has
// gone idle or closed. One that is idle, or still sending a request's
// headers or body, has nothing in flight: waiting for it would only let a
// stalled client hold the shutdown for the whole shutdown_grace.
//
// A WebSocket connection leaves the set when it is hijacked; the mux.Server
// shuts its session down.
//
// Concurrency: mu guards owed and closing. net/http calls connState from
// its accept loop and each connection's goroutine, and the wrapped handler
// runs on the connection's goroutine; closeIdle runs on serve's goroutine.
type httpConns struct {
	mu      sync.Mutex
	owed    map[net.Conn]bool // every open, not hijacked connection: true while it owes an answer
	closing bool              // set by closeIdle: connections that owe nothing are closed on sight
}

// connKey is the request context key under which the connection is found.
type connKey struct{}

// trackHTTP makes t follow srv's connections: it wraps srv's ConnContext,
// ConnState (both still called when set) and Handler. Call it before srv
// serves.
func trackHTTP(srv *http.Server) *httpConns {
	t := &httpConns{owed: map[net.Conn]bool{}}
	prevContext, prevState := srv.ConnContext, srv.ConnState
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prevContext != nil {
			ctx = prevContext(ctx, c)
		}
		return context.WithValue(ctx, connKey{}, c)
	}
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		t.connState(c, s)
		if prevState != nil {
			prevState(c, s)
		}
	}
	next := srv.Handler
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(connKey{}).(net.Conn)
		if r.Body == nil || r.Body == http.NoBody {
			t.delivered(c)
		} else {
			r.Body = &bodyEnd{ReadCloser: r.Body, atEnd: func() { t.delivered(c) }}
		}
		// A handler that returns without reading the whole body (an
		// error answer) has an answer to write too.
		defer t.delivered(c)
		next.ServeHTTP(w, r)
	})
	return t
}

func (t *httpConns) connState(c net.Conn, s http.ConnState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch s {
	case http.StateNew, http.StateIdle:
		if t.closing {
			c.Close()
		}
		t.owed[c] = false
	case http.StateHijacked, http.StateClosed:
		delete(t.owed, c)
	}
}

// delivered marks c as owing an answer, unless it has left the set.
func (t *httpConns) delivered(c net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.owed[c]; ok {
		t.owed[c] = true
	}
}

// closeIdle closes every connection that owes no answer, now and from now
// on when one comes to owe none; it returns how many it closed now.
func (t *httpConns) closeIdle() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closing = true
	n := 0
	for c, owed := range t.owed {
		if !owed {
			c.Close()
			n++
		}
	}
	return n
}

// bodyEnd calls atEnd once the body has been read to its end.
type bodyEnd struct {
	io.ReadCloser
	atEnd func()
	done  bool
}

func (b *bodyEnd) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		b.atEnd()
	}
	return n, err
}
