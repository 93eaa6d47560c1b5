package mux

import (
	"context"
	"errors"
	"io"
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
	srv   *Server
	hs    *http.Server
	conns *connLimiter
}

// NewHTTPServer returns the server for the --listen address, built from s's
// Config. Serve it on any number of listeners; the connection bound is
// shared between them.
func (s *Server) NewHTTPServer() *HTTPServer {
	h := &HTTPServer{srv: s, conns: newConnLimiter(s.cfg.MaxConnections, s.metrics, s.log)}
	h.hs = &http.Server{
		Handler:           http.HandlerFunc(h.serveHTTP),
		ReadHeaderTimeout: s.cfg.HTTPReadHeaderTimeout,
		IdleTimeout:       s.cfg.HTTPIdleTimeout,
		// No ReadTimeout or WriteTimeout: they would stay on connections
		// hijacked for WebSocket sessions. serveHTTP sets the body's
		// deadline itself.
		ConnState: h.conns.connState,
		ErrorLog:  slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	return h
}

// serveHTTP bounds the reading of a request's body, then hands the request
// to Server.ServeHTTP. The deadline also bounds net/http's draining of a
// body the handler leaves unread (a refused request). It is cleared once
// the body has been read, so that the wait for the connection's next
// request is bounded by net/http's own timeouts. A WebSocket upgrade has no
// body and gets no deadline: the session's socket must not inherit one.
func (h *HTTPServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if !isUpgrade(r) {
		rc := http.NewResponseController(w)
		h.conns.setBodyDeadline(rc, h.srv.cfg.HTTPReadTimeout)
		// A body announced past the limit is refused unread, and its
		// connection closed: left as net/http's own body, net/http sees
		// that much left unread, answers at once and waits for the client
		// to read the 413 before closing (a close at once would reset a
		// client still sending, which would never see the 413).
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength <= h.srv.cfg.MaxHTTPBodyBytes {
			r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc, lim: h.conns}
		}
	}
	h.srv.ServeHTTP(w, r)
}

// deadlineBody clears the connection's read deadline once the body has
// been read to its end, unless the server is shutting down.
type deadlineBody struct {
	io.ReadCloser
	rc  *http.ResponseController
	lim *connLimiter
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.lim.closing.Load() {
		b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// Serve accepts connections on ln until it is closed or the server shut
// down; it returns http.ErrServerClosed then, as http.Server.Serve does.
func (h *HTTPServer) Serve(ln net.Listener) error {
	return h.hs.Serve(h.conns.listener(ln))
}

// Shutdown stops accepting, closes idle connections and waits until every
// HTTP exchange has ended or ctx is done, as http.Server.Shutdown does. A
// request still being received is cut at once (408) rather than waited
// for: a client trickling its body would otherwise hold the shutdown for
// the whole grace period. Requests received and waiting for their answer
// are waited for. WebSocket sessions are not: Server.Shutdown ends them.
func (h *HTTPServer) Shutdown(ctx context.Context) error {
	h.conns.shutdown()
	return h.hs.Shutdown(ctx)
}

// Close closes the listeners and every connection not yet hijacked.
func (h *HTTPServer) Close() error {
	return h.hs.Close()
}
