package mux

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"strings"
)

// jsonSpace is what JSON counts as whitespace between values.
const jsonSpace = " \t\n\r"

// DefaultMaxHTTPBodyBytes bounds an HTTP request body, as geth's does.
const DefaultMaxHTTPBodyBytes = 5 << 20

// DefaultAllowedHosts are the Host header values accepted when
// Config.AllowedHosts is empty: loopback names only, so that a page on a
// rebinding DNS name cannot reach the node through muxd.
var DefaultAllowedHosts = []string{"localhost", "127.0.0.1", "::1"}

// ServeHTTP is the handler for the --listen address: a WebSocket upgrade
// starts a session, a POST (or another method with a body, as geth takes
// them) is one JSON-RPC exchange answered like geth's HTTP endpoint.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.hostAllowed(r.Host) {
		http.Error(w, "invalid host specified", http.StatusForbidden)
		return
	}
	if isUpgrade(r) {
		s.ServeWebSocket(w, r)
		return
	}
	// The methods as geth takes them: an empty GET is a health check;
	// PUT and DELETE are refused; any other method carries a JSON-RPC
	// body as POST does (a GET with a body is a call, not a health check
	// to answer with nothing), OPTIONS whatever its content type.
	emptyGet := r.Method == http.MethodGet && r.ContentLength == 0 && r.URL.RawQuery == ""
	switch {
	case emptyGet && r.URL.Path == "/":
		w.WriteHeader(http.StatusOK) // geth's answer, which health checks use
		return
	case emptyGet, r.Method == http.MethodPut, r.Method == http.MethodDelete:
		w.Header().Set("Allow", "POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	case r.Method == http.MethodOptions:
	default:
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || !jsonContentTypes[mt] {
			http.Error(w, "invalid content type, only application/json is supported", http.StatusUnsupportedMediaType)
			return
		}
	}
	if r.ContentLength > s.cfg.MaxHTTPBodyBytes {
		// Refused before reading, as geth does. No "Connection: close"
		// of our own: net/http then reads at most 256 KiB of the body
		// (within the body's deadline), closes the connection after the
		// answer, and waits for the client to read it before the close
		// resets anything it is still sending. A close at once with the
		// body unread resets the connection, and a client still writing
		// (Node's fetch) never sees its 413.
		s.metrics.limit("http_body")
		http.Error(w, "content length too large", http.StatusRequestEntityTooLarge)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxHTTPBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.metrics.limit("http_body")
			http.Error(w, "content length too large", http.StatusRequestEntityTooLarge)
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// HTTPServer's body deadline (HTTPReadTimeout, or shutdown).
			s.metrics.limit("http_read_timeout")
			w.Header().Set("Connection", "close")
			http.Error(w, "request body not received in time", http.StatusRequestTimeout)
			return
		}
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if len(bytes.TrimLeft(body, jsonSpace)) == 0 {
		// Nothing to read: geth reads no request and answers an empty
		// 200 (its decoder sees the end of the body), not a parse error.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		return
	}
	tr := &httpTransport{}
	// Not r.Context(): net/http cancels it when the client shuts down its
	// sending side after the body, and such a client still waits for its
	// answer. The session ends with the answer, or at request_timeout.
	c, err := s.newClient(context.WithoutCancel(r.Context()), tr, ClientName(r))
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer s.removeClient(c)
	if !s.dispatch(c, body) {
		// Notifications only: an empty 200, typed as geth types it.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		return
	}
	// A wake-up with nothing queued (a finish during shutdown) is not the
	// answer: keep waiting for it.
	for {
		select {
		case <-c.out.wake:
		case <-c.ctx.Done():
			return
		}
		if batch := c.out.take(nil); len(batch) > 0 {
			var mw messageWriter
			msgs, _, _ := mw.messages(batch)
			w.Header().Set("Content-Type", "application/json")
			w.Write(msgs[0])
			// A large answer lies in a frame buffer the upstream
			// reader lent, a batch's in its arena: written, they go
			// back to their pools.
			mw.written(batch, s)
			return
		}
	}
}

// httpTransport is the transport of a one-exchange HTTP session: the
// handler takes the answer from the queue itself, so nothing writes.
type httpTransport struct{}

func (*httpTransport) name() string                          { return "http" }
func (*httpTransport) write(context.Context, [][]byte) error { return nil }
func (*httpTransport) close(int, string)                     {}

// jsonContentTypes are the request types geth's HTTP endpoint accepts.
var jsonContentTypes = map[string]bool{"application/json": true, "application/json-rpc": true, "application/jsonrequest": true}

// isUpgrade reports whether r asks for a WebSocket: an Upgrade: websocket
// header and "upgrade" among the Connection header's tokens, as geth
// requires (a POST that carries only the first is an HTTP call).
func isUpgrade(r *http.Request) bool {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return false
	}
	for _, v := range r.Header.Values("Connection") {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return true
			}
		}
	}
	return false
}

// hostAllowed checks the Host header against AllowedHosts ("*" allows any).
// A request without one (HTTP/1.0) passes, as geth lets it: the check is
// against DNS rebinding, and a browser always sends one.
func (s *Server) hostAllowed(hostport string) bool {
	if hostport == "" {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	for _, a := range s.cfg.AllowedHosts {
		if a == "*" || strings.EqualFold(a, host) {
			return true
		}
	}
	return false
}
