package reconnect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coder/websocket"
)

// ErrPingTimeout is wrapped by the error Run reports (in the "upstream lost" log)
// when a keepalive ping got no pong in time and the connection was dropped.
var ErrPingTimeout = errors.New("upstream keepalive timed out")

// keepalive pings c every interval until ctx is done. coder/websocket only sees pongs
// while someone reads c, so it relies on serve reading concurrently.
//
// If a ping gets no pong within timeout, keepalive closes c with CloseNow, so that
// serve's pending Read fails, and returns an error wrapping ErrPingTimeout. Any other
// ping failure means c is already broken (or ctx is done): serve's Read will report
// it, and keepalive returns nil.
func keepalive(ctx context.Context, c *websocket.Conn, interval, timeout time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err := c.Ping(pctx)
		expired := errors.Is(pctx.Err(), context.DeadlineExceeded)
		cancel()
		switch {
		case err == nil:
		case expired && ctx.Err() == nil:
			c.CloseNow()
			return fmt.Errorf("%w: no pong within %s: %w", ErrPingTimeout, timeout, err)
		default:
			return nil
		}
	}
}
