package mux

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// clientKeepalive pings a WebSocket client that has gone quiet and closes
// one that stays so (Config.ClientPingInterval). A live client answers a
// ping from its library's reader; a hung one, or one stalled in the middle
// of a frame, cannot, and would otherwise keep its session for good.
//
// A client shows it is alive by sending a frame (heard, set by the
// session's reader), or by taking what muxd writes to it: a write done
// since the last check, or one under way that began less than two
// intervals ago (a large answer to a slow link; the ping could not be sent
// before it ends, since coder/websocket writes one frame at a time). geth,
// too, pings only a connection it has not written to.
//
// The timer's function runs one check at a time (it re-arms the timer only
// at its end), so check, ping and the fields it owns never overlap.
type clientKeepalive struct {
	c     *Client
	conn  *websocket.Conn
	every time.Duration
	heard atomic.Bool
	timer *time.Timer
	// writes is c.writes at the last check; owned by check.
	writes uint64
}

// startKeepalive watches c's connection; nil when ClientPingInterval is
// negative (off). stop must be called when the session ends.
func (s *Server) startKeepalive(c *Client, conn *websocket.Conn) *clientKeepalive {
	every := s.cfg.ClientPingInterval
	if every < 0 {
		return nil
	}
	k := &clientKeepalive{c: c, conn: conn, every: every}
	// Armed once k.timer is set: check resets it.
	k.timer = time.AfterFunc(math.MaxInt64, k.check)
	k.timer.Reset(every)
	return k
}

// read notes that the client sent a frame. Safe on a nil keepalive.
func (k *clientKeepalive) read() {
	if k != nil {
		k.heard.Store(true)
	}
}

// stop stops the timer. Safe on a nil keepalive.
func (k *clientKeepalive) stop() {
	if k != nil {
		k.timer.Stop()
	}
}

// alive reports whether the client has shown life since the last check
// (see clientKeepalive), and starts the next period.
func (k *clientKeepalive) alive() bool {
	heard := k.heard.Swap(false)
	w := k.c.writes.Load()
	wrote := w != k.writes
	k.writes = w
	if heard || wrote {
		return true
	}
	st := k.c.writeStarted.Load()
	return st != 0 && time.Since(time.Unix(0, st)) < 2*k.every
}

// check runs every interval: a client alive meanwhile is left alone; a
// silent one is pinged and has another interval to answer.
func (k *clientKeepalive) check() {
	if k.c.ctx.Err() != nil {
		return
	}
	if k.alive() {
		k.timer.Reset(k.every)
		return
	}
	ctx, cancel := context.WithTimeout(k.c.ctx, k.every)
	err := k.conn.Ping(ctx)
	cancel()
	if k.c.ctx.Err() != nil {
		return
	}
	if err != nil && !k.alive() {
		k.c.srv.metrics.PingTimeouts.Inc()
		k.c.srv.log.Info("client answered no ping, closing", "client", k.c.id, "ping_wait", k.every)
		k.c.shut(closeGoingAway, "ping timeout")
		return
	}
	k.timer.Reset(k.every)
}
