package mux

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// clientKeepalive pings a WebSocket client that has gone quiet and closes
// one that stays so (Config.ClientPingInterval). A live client answers a
// ping from its library's reader; a hung one, or one stalled in the middle
// of a frame, cannot, and would otherwise keep its session for good.
//
// heard is set by the session's reader for every frame it reads; the
// timer's function, on its own goroutine, runs one check at a time (it is
// re-armed only at the end of a check), so check and ping never overlap.
type clientKeepalive struct {
	c     *Client
	conn  *websocket.Conn
	every time.Duration
	heard atomic.Bool
	timer *time.Timer
}

// startKeepalive watches c's connection; nil when ClientPingInterval is
// negative (off). stop must be called when the session ends.
func (s *Server) startKeepalive(c *Client, conn *websocket.Conn) *clientKeepalive {
	every := s.cfg.ClientPingInterval
	if every < 0 {
		return nil
	}
	k := &clientKeepalive{c: c, conn: conn, every: every}
	k.timer = time.AfterFunc(every, k.check)
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

// check runs every interval: a client heard from meanwhile is left alone;
// a silent one is pinged and has another interval to answer.
func (k *clientKeepalive) check() {
	if k.c.ctx.Err() != nil {
		return
	}
	if k.heard.Swap(false) {
		k.timer.Reset(k.every)
		return
	}
	ctx, cancel := context.WithTimeout(k.c.ctx, k.every)
	err := k.conn.Ping(ctx)
	cancel()
	if err != nil {
		if k.c.ctx.Err() == nil && !k.heard.Load() {
			k.c.srv.metrics.PingTimeouts.Inc()
			k.c.srv.log.Info("client answered no ping, closing", "client", k.c.id, "after", 2*k.every)
			k.c.shut(closeGoingAway, "ping timeout")
			return
		}
		if k.c.ctx.Err() != nil {
			return
		}
	}
	k.timer.Reset(k.every)
}
