package mux

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Defaults for the --listen server's timeouts (Config fields left zero).
const (
	DefaultHTTPReadHeaderTimeout = 10 * time.Second
	DefaultHTTPReadTimeout       = 30 * time.Second
	DefaultHTTPIdleTimeout       = 60 * time.Second
)

// HTTPServer serves the --listen address (WebSocket and HTTP) with every
// connection bounded: in number (Config.MaxConnections, connLimiter), and
// in time while it is not a WebSocket session: its headers must arrive
// within HTTPReadHeaderTimeout, an HTTP body within HTTPReadTimeout, and a
// keep-alive connection idle for HTTPIdleTimeout is closed. Listeners
// inherited from systemd are served the same way as bound ones.
type HTTPServer struct {
	hs    *http.Server
	conns *connLimiter
}

// NewHTTPServer returns the server for the --listen address, built from s's
// Config. Serve it on any number of listeners; the connection bound is
// shared between them.
func (s *Server) NewHTTPServer() *HTTPServer {
	h := &HTTPServer{conns: newConnLimiter(s.cfg.MaxConnections, s.metrics, s.log)}
	h.hs = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: s.cfg.HTTPReadHeaderTimeout,
		IdleTimeout:       s.cfg.HTTPIdleTimeout,
		// No ReadTimeout or WriteTimeout: they would stay on connections
		// hijacked for WebSocket sessions. ServeHTTP sets the body's
		// deadline itself.
		ConnState: h.conns.connState,
		ErrorLog:  slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	return h
}

// Serve accepts connections on ln until it is closed or the server shut
// down; it returns http.ErrServerClosed then, as http.Server.Serve does.
func (h *HTTPServer) Serve(ln net.Listener) error {
	return h.hs.Serve(h.conns.listener(ln))
}

// Shutdown stops accepting, closes idle connections and waits until every
// HTTP exchange has ended or ctx is done, as http.Server.Shutdown. WebSocket
// sessions are not waited for: Server.Shutdown ends them.
func (h *HTTPServer) Shutdown(ctx context.Context) error {
	return h.hs.Shutdown(ctx)
}

// Close closes the listeners and every connection not yet hijacked.
func (h *HTTPServer) Close() error {
	return h.hs.Close()
}

// OpenConnections is the number of connections open on the server's
// listeners.
func (h *HTTPServer) OpenConnections() int {
	return h.conns.open()
}

// setBodyDeadline bounds reading the request body from now, on a
// connection served by an HTTPServer (elsewhere, as under httptest's
// recorder, it does nothing). done clears the deadline once the body has
// been read, so that net/http's wait for the connection's next request is
// bounded by its own timeouts only.
func (s *Server) setBodyDeadline(w http.ResponseWriter) (done func()) {
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(s.cfg.HTTPReadTimeout)) != nil {
		return func() {}
	}
	return func() { rc.SetReadDeadline(time.Time{}) }
}
