package mux

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// connLimiter bounds the connections open on the --listen address: every
// accepted connection counts, whatever it carries (a WebSocket session, an
// HTTP exchange, an idle keep-alive connection, one still sending its
// request), from Accept until it is closed.
//
// When a connection arrives at the bound, or the process is out of file
// descriptors, the keep-alive connection idle the longest is closed to make
// room: it costs its client only a reconnect. With none idle, a connection
// at the bound is refused: it gets a 503 and is closed.
//
// The limiter learns which connections are idle from the http.Server's
// ConnState hook, and that one has closed from the connection's own Close,
// which covers connections hijacked for WebSocket sessions too. Its fields
// are guarded by mu; Accept runs on the serving goroutine, the hook on each
// connection's goroutine, Close on whichever closes.
type connLimiter struct {
	max     int
	metrics *Metrics
	log     *slog.Logger

	mu    sync.Mutex
	conns map[net.Conn]*connEntry // every open connection, by its wrapper
	// closing is set, under mu, once shutdown has begun; setBodyDeadline
	// reads it on every HTTP request without taking mu.
	closing atomic.Bool
}

// connEntry is the limiter's record of one open connection.
type connEntry struct {
	idle      bool      // a keep-alive connection between requests
	idleSince time.Time // when it became idle
	hijacked  bool      // a WebSocket session's now
}

func newConnLimiter(max int, m *Metrics, log *slog.Logger) *connLimiter {
	return &connLimiter{max: max, metrics: m, log: log, conns: make(map[net.Conn]*connEntry)}
}

// open is the number of connections open.
func (l *connLimiter) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// listener wraps ln so that what it accepts is counted and bounded.
func (l *connLimiter) listener(ln net.Listener) net.Listener {
	return &limitedListener{Listener: ln, lim: l}
}

// admit counts c in if there is room, making room by closing the longest
// idle keep-alive connection if need be, and returns the wrapper to serve.
// It reports false when c must be refused.
func (l *connLimiter) admit(c net.Conn) (net.Conn, bool) {
	var victim net.Conn
	l.mu.Lock()
	if l.closing.Load() {
		l.mu.Unlock()
		return nil, false
	}
	if len(l.conns) >= l.max {
		victim = l.takeIdleLocked()
		if victim == nil {
			l.mu.Unlock()
			l.metrics.limit("connections")
			return nil, false
		}
	}
	w := wrapLimited(c, l)
	l.conns[w] = &connEntry{}
	l.metrics.ListenConnections.Set(float64(len(l.conns)))
	l.mu.Unlock()
	if victim != nil {
		l.metrics.limit("idle_connections")
		victim.Close()
	}
	return w, true
}

// reclaimIdle closes the longest idle keep-alive connection, if any, and
// reports whether it did.
func (l *connLimiter) reclaimIdle() bool {
	l.mu.Lock()
	victim := l.takeIdleLocked()
	l.mu.Unlock()
	if victim == nil {
		return false
	}
	l.metrics.limit("idle_connections")
	victim.Close()
	return true
}

// takeIdleLocked forgets the keep-alive connection idle the longest and
// returns it, for the caller to close; nil if none is idle. Caller holds
// l.mu. The scan is linear: it runs only at the bound, and a map of ten
// thousand entries is scanned in microseconds.
func (l *connLimiter) takeIdleLocked() net.Conn {
	var victim net.Conn
	var since time.Time
	for c, e := range l.conns {
		if e.idle && (victim == nil || e.idleSince.Before(since)) {
			victim, since = c, e.idleSince
		}
	}
	if victim != nil {
		delete(l.conns, victim)
		l.metrics.ListenConnections.Set(float64(len(l.conns)))
	}
	return victim
}

// closed forgets c (a wrapper from admit); it may be called more than once.
func (l *connLimiter) closed(c net.Conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.metrics.ListenConnections.Set(float64(len(l.conns)))
	l.mu.Unlock()
}

// connState is the http.Server's ConnState hook: it tracks which
// connections are idle, and clears the deadlines of a connection hijacked
// for a WebSocket session, which must not inherit the request's.
func (l *connLimiter) connState(c net.Conn, state http.ConnState) {
	if state == http.StateHijacked {
		c.SetDeadline(time.Time{})
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.conns[c]
	if e == nil {
		return // closed already (reclaimed, or never admitted)
	}
	e.idle = state == http.StateIdle
	if e.idle {
		e.idleSince = time.Now()
	}
	e.hijacked = state == http.StateHijacked
}

// setBodyDeadline sets the read deadline of a request body starting now:
// d from now, or now once shutdown has begun. The flag is read again after
// setting: a shutdown that began meanwhile may have cut the connection
// (deadline now) before the later deadline overwrote it, so it is cut
// again. Either shutdown's cut or this check comes last, and both say now.
func (l *connLimiter) setBodyDeadline(rc *http.ResponseController, d time.Duration) {
	if !l.closing.Load() {
		rc.SetReadDeadline(time.Now().Add(d))
		if !l.closing.Load() {
			return
		}
	}
	rc.SetReadDeadline(time.Now())
}

// shutdown refuses new connections from now on and cuts the reads of those
// still receiving a request: their read deadline becomes now. A connection
// whose request has been read only waits for its answer, which this does
// not touch; idle and hijacked ones are left to http.Server.Shutdown and
// Server.Shutdown.
func (l *connLimiter) shutdown() {
	l.mu.Lock()
	l.closing.Store(true)
	var busy []net.Conn
	for c, e := range l.conns {
		if !e.idle && !e.hijacked {
			busy = append(busy, c)
		}
	}
	l.mu.Unlock()
	now := time.Now()
	for _, c := range busy {
		c.SetReadDeadline(now)
	}
}

// limitedListener is a listener whose connections a connLimiter counts.
type limitedListener struct {
	net.Listener
	lim *connLimiter
}

// refusal is what a connection past the bound gets before it is closed.
const refusal = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: 20\r\n\r\ntoo many connections"

// refusalWriteWait bounds writing the refusal (a fresh socket takes it at
// once; this only guards against a peer that is not there).
const refusalWriteWait = 100 * time.Millisecond

// Accept returns the next connection there is room for. Connections past
// the bound are answered 503 and closed here. When the process is out of
// file descriptors, an idle keep-alive connection is closed and the error
// returned: http.Server retries after a short backoff, by which time the
// descriptor is free.
func (ln *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			if outOfDescriptors(err) && ln.lim.reclaimIdle() {
				ln.lim.log.Warn("out of file descriptors: closed an idle keep-alive connection", "open", ln.lim.open())
			}
			return nil, err
		}
		if w, ok := ln.lim.admit(c); ok {
			return w, nil
		}
		c.SetWriteDeadline(time.Now().Add(refusalWriteWait))
		c.Write([]byte(refusal))
		c.Close()
	}
}

// outOfDescriptors reports whether an accept failed for want of file
// descriptors, for the process (EMFILE) or the system (ENFILE).
func outOfDescriptors(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// wrapLimited wraps c so that closing it tells l. A TCP connection keeps its
// *net.TCPConn embedded, so that net.Buffers still writes to it with one
// writev (cork.go relies on that for WebSocket sessions).
func wrapLimited(c net.Conn, l *connLimiter) net.Conn {
	if tc, ok := c.(*net.TCPConn); ok {
		return &limitedTCPConn{TCPConn: tc, lim: l}
	}
	return &limitedConn{Conn: c, lim: l}
}

// limitedTCPConn is a TCP connection counted by a connLimiter.
type limitedTCPConn struct {
	*net.TCPConn
	lim *connLimiter
}

func (c *limitedTCPConn) Close() error {
	err := c.TCPConn.Close()
	c.lim.closed(c)
	return err
}

// limitedConn is any other connection counted by a connLimiter (a Unix
// socket passed by systemd, say).
type limitedConn struct {
	net.Conn
	lim *connLimiter
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.lim.closed(c)
	return err
}
