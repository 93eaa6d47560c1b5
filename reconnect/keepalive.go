package reconnect

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrPingTimeout is wrapped by the error Run reports (in the "upstream lost" log)
// when keepalive found the node silent and the connection was dropped.
var ErrPingTimeout = errors.New("upstream keepalive timed out")

// pinger is what keepalive needs of a connection; *websocket.Conn has it.
type pinger interface {
	Ping(ctx context.Context) error
	CloseNow() error
}

// keepalive watches c until ctx is done and drops it once the node has
// shown no sign of life for too long. It judges by progress, not by pongs
// alone: a pong can wait behind muxd's own queue of writes for much longer
// than the node takes to read them, and a node that reads is alive.
//
// The rule, with proof of life as [liveness] defines it (any byte read from
// the node, a write of ours that waited for the socket to make room, a
// pong):
//
//   - While proof of life keeps coming at least every interval, nothing is
//     sent: a busy connection is not pinged.
//   - Once the connection has been quiet for interval, keepalive sends a
//     ping, unless our own writes are queued (the ping would only wait
//     behind them; whether they move is the question, and it is being
//     watched anyway).
//   - If nothing has progressed timeout after that, the node is declared
//     dead: keepalive closes c with CloseNow, so that serve's Read fails,
//     and returns an error wrapping ErrPingTimeout. So a node that neither
//     sends nor reads anything is dropped interval+timeout after its last
//     sign of life, as a silent one was with plain pings.
//
// coder/websocket only sees pongs while someone reads c, so keepalive relies
// on serve reading concurrently. It returns nil when ctx is done. A ping it
// started may still be waiting for its pong (bounded by timeout) after it
// returns; it ends when c is closed.
func keepalive(ctx context.Context, c pinger, live *liveness, interval, timeout time.Duration) error {
	t := time.NewTimer(interval)
	defer t.Stop()
	var pinging chan struct{} // closed when the last ping started has ended
	for {
		t.Reset(interval - live.quietFor())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if live.quietFor() < interval {
			continue
		}
		// Quiet for interval: ask, and give the node timeout to show life.
		mark := live.progress()
		if !live.backlogged() && !running(pinging) {
			pinging = make(chan struct{})
			go ping(c, live, timeout, pinging)
		}
		t.Reset(timeout)
		for waiting := true; waiting; {
			pong := pinging
			if !running(pong) {
				pong = nil // an ended ping has nothing more to say
			}
			select {
			case <-ctx.Done():
				return nil
			case <-pong: // a pong ends the wait early
				waiting = live.progress() == mark
			case <-t.C:
				waiting = false
			}
		}
		if live.progress() == mark {
			c.CloseNow()
			return fmt.Errorf("%w: nothing from the node and none of our writes taken for %s", ErrPingTimeout, live.quietFor().Round(time.Millisecond))
		}
	}
}

// ping sends one ping and records its pong as proof of life. Its context is
// not keepalive's: cancelling a ping while coder/websocket writes it closes
// the connection, so it ends on its own, by pong, timeout or close.
func ping(c pinger, live *liveness, timeout time.Duration, done chan struct{}) {
	defer close(done)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if c.Ping(ctx) == nil {
		live.progressed()
	}
}

// running reports whether the ping that will close done has not ended.
func running(done chan struct{}) bool {
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}
