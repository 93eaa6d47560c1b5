package reconnect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coder/websocket"
)

// ErrPingTimeout is wrapped by the error Run reports (in the "upstream lost" log)
// when keepalive found the node silent and the connection was dropped.
var ErrPingTimeout = errors.New("upstream keepalive timed out")

// pinger is what keepalive needs of a connection; *websocket.Conn has it.
type pinger interface {
	Ping(ctx context.Context) error
	CloseNow() error
}

// prober is a pinger that can also send the node a request of keepalive's
// own (*websocket.Conn can). keepalive then asks its probe request (probeRequest) beside each
// ping, and only an answer proves that the node hears: a node's WebSocket
// layer answers pings on its own (geth's does, in its connection reader),
// so a node whose request handling hangs goes on answering them while every
// request waits out its deadline.
type prober interface {
	pinger
	Write(ctx context.Context, typ websocket.MessageType, p []byte) error
}

// ProbeID is the default id of keepalive's own request (Config.ProbeID): a
// string, so that it never collides with the numbers muxd rewrites clients'
// ids to. The answer to it is hearing like any answer (serve reports it,
// [Conn.Answered]); the caller routes it nowhere.
const ProbeID = `"muxd-keepalive"`

// probeRequest is keepalive's own request under id: probeMethod, which
// every node answers at once from its configuration. An error answer
// proves hearing as well as a result.
func probeRequest(id string) []byte {
	return []byte(`{"jsonrpc":"2.0","id":` + id + `,"method":"` + probeMethod + `"}`)
}

// probeMethod is the probe request's method, named in errors.
const probeMethod = "eth_chainId"

// keepalive watches c until ctx is done and drops it once the node has
// shown no sign of life for too long, or has stopped hearing us. It judges
// by progress and hearing ([liveness]), not by pongs alone: a pong can wait
// behind muxd's own queue of writes for much longer than the node takes to
// read them, and a node that reads is alive.
//
// The rule:
//
//   - While proof of life and hearing keep coming at least every interval,
//     nothing is sent: a busy connection whose requests are answered is not
//     pinged.
//   - Once the connection has been quiet, or unheard, for interval,
//     keepalive sends a ping. While our own writes are queued the ping
//     waits for them to go out (it would only wait behind them), looking
//     again every askRetry.
//   - If nothing has progressed timeout after that, the node is declared
//     dead: keepalive closes c with CloseNow, so that serve's Read fails,
//     and returns an error wrapping ErrPingTimeout. So a node that neither
//     sends nor reads anything is dropped interval+timeout after its last
//     sign of life, as a silent one was with plain pings.
//   - If bytes came but nothing was heard by the end of the ping's timeout
//     (see pingCall.deaf: no answer to a request, keepalive's own
//     probe request sent before the ping included; where c cannot send one,
//     no pong either), the node is declared deaf and dropped the same way:
//     it sends (pushes heads and logs, say, or only pongs) but acts on
//     nothing of ours, so every request on the connection would wait out
//     its deadline.
//     Otherwise the next round pings again. When the ping could not be
//     sent all round, our writes waiting for the socket throughout, none
//     taken for interval+timeout (the pause a silent node is allowed),
//     nothing heard, and a message begun this round read whole (a node
//     writing us one long answer may read nothing meanwhile), the node is
//     deaf as well: it reads nothing of ours.
//
// coder/websocket only sees pongs while someone reads c, so keepalive relies
// on serve reading concurrently. It returns nil when ctx is done. A ping it
// started may still be waiting for its pong (bounded by timeout) after it
// returns; it ends when c is closed.
//
// probe is the request a prober sends beside each ping (probeRequest).
func keepalive(ctx context.Context, c pinger, live *liveness, interval, timeout, answerWait time.Duration, probe []byte) error {
	t := time.NewTimer(interval)
	defer t.Stop()
	var p *pingCall // the last ping started
	for {
		t.Reset(interval - max(live.quietFor(), live.unheardFor()))
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if live.quietFor() < interval && live.unheardFor() < interval {
			continue
		}
		// Quiet or unheard for interval: ask, and give the node timeout to
		// show life and to be heard.
		mark, heardMark, msgsMark := live.progress(), live.hearing(), live.msgStarts.Load()
		quiet := live.quietFor() >= interval // else only unheard
		asked := p.running()                 // a ping sent earlier is still out
		ask := func() {
			if !asked && !live.backlogged() {
				p = startPing(c, live, timeout, probe)
				asked = true
			}
		}
		ask()
		t.Reset(timeout)
		for waiting := true; waiting; {
			var pong <-chan struct{}
			if p.running() {
				pong = p.done // a pong ends the wait early
			}
			var retry <-chan time.Time
			if !asked || !p.running() && live.hearing() == heardMark {
				// Our writes were queued: ask as soon as they are out.
				// Or the pong came and the probe's answer has not: look
				// for it again shortly (hearing has no signal of its own).
				retry = time.After(askRetry)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-pong:
				waiting = live.progress() == mark || live.hearing() == heardMark
			case <-retry:
				ask()
				waiting = live.progress() == mark || live.hearing() == heardMark
			case <-t.C:
				waiting = false
			}
		}
		if live.progress() == mark {
			if !quiet {
				// It went quiet during this round, which began for
				// want of hearing alone: it is judged interval+timeout
				// after its last sign of life, the round's ping
				// unanswered. Not a whole round later: a round begun a
				// moment before the node went quiet would otherwise
				// drop it only after interval+2×timeout (with real geth
				// behind a frozen path: 35 s instead of 25).
				if rest := interval + timeout - live.quietFor(); rest > 0 {
					t.Reset(rest)
					select {
					case <-ctx.Done():
						return nil
					case <-t.C:
					}
				}
				if live.progress() != mark {
					continue
				}
			}
			c.CloseNow()
			return fmt.Errorf("%w: nothing from the node and none of our writes taken within %s of a ping", ErrPingTimeout, timeout)
		}
		if !asked && live.hearing() == heardMark && live.backlogged() && live.untakenFor() >= interval+timeout &&
			live.msgEnds.Load() > msgsMark {
			// Our writes waited for the socket all round, none taken
			// for as long as a silent node is given, nothing heard, and
			// the node is not busy writing us one long message (one
			// begun this round has ended): it reads nothing of ours (the
			// ping could not even be sent), whatever it pushes.
			c.CloseNow()
			return fmt.Errorf("%w: the node sends but has taken nothing of ours (our writes have waited for the socket for %s, nothing heard)", ErrPingTimeout, live.untakenFor().Round(time.Millisecond))
		}
		if !asked || live.hearing() != heardMark {
			continue
		}
		// Bytes came, nothing was heard this round: let the ping run its
		// course. It is judged by what was heard since it was sent, which
		// may be before this round (a ping sent late, once our writes were
		// out, can outlast its round): an answer that came after it is
		// hearing for it.
		select {
		case <-ctx.Done():
			return nil
		case <-p.done:
		}
		if p.deaf(live, answerWait) {
			c.CloseNow()
			if p.ponged {
				return fmt.Errorf("%w: the node answers pings but no request (its own, %s, unanswered) for %s", ErrPingTimeout, probeMethod, live.unheardFor().Round(time.Millisecond))
			}
			return fmt.Errorf("%w: the node sends but has taken nothing of ours (no pong, no answer) for %s", ErrPingTimeout, live.unheardFor().Round(time.Millisecond))
		}
	}
}

// deaf reports, once p has ended, whether the node has been heard since p
// was sent, with no message in the way of what would show it:
//
//   - No pong and no answer, while a message the node began after the
//     ping has ended (so the pong does not wait behind a long message
//     begun before): deaf, with or without a probe.
//   - A pong is hearing where there was no probe (startPing recorded it).
//   - With a probe, only an answer is. A node that ponged but has answered
//     nothing for answerWait, none since the probe, is deaf if a message
//     begun after the ping has ended, or no message is being read (the
//     node read our probe before the ping, and writes us nothing its
//     answer could wait behind). A node answering pings promptly may still
//     be running a connection's calls in order, one long call ahead of the
//     probe: answerWait gives it as long as a client's call may take.
func (p *pingCall) deaf(live *liveness, answerWait time.Duration) bool {
	if live.hearing() != p.heardBefore {
		return false
	}
	after := live.msgEnds.Load() > p.msgsBefore
	if !p.ponged {
		return after
	}
	return p.probed && live.unheardFor() >= answerWait && (after || live.msgStarts.Load() == live.msgEnds.Load())
}

// askRetry is how often keepalive looks again, while our own writes are
// queued, for the moment it can send its ping.
const askRetry = 10 * time.Millisecond

// pingCall is one ping under way.
type pingCall struct {
	done   chan struct{} // closed when the ping has ended
	ponged bool          // whether it ended with a pong; read after done
	probed bool          // the probe request was sent before the ping; read after done
	// msgsBefore is how many messages serve had begun reading when the
	// ping was sent: a message numbered above it began after the ping.
	msgsBefore uint64
	// heardBefore is the hearing count when the ping was sent: any
	// hearing since then answers for the node.
	heardBefore uint64
}

// startPing sends one ping, after probe when c is a prober, and
// records its pong as proof of life, and of hearing when no probe went
// out before it (with one, the probe's answer is the hearing). Its context
// is not keepalive's: cancelling a ping while coder/websocket writes it
// closes the connection, so it ends on its own, by pong, timeout or close.
// The probe is written without a deadline for the same reason (keepalive
// asks only when none of our writes are queued, so it nearly always goes at
// once); the ping waits for it at most timeout.
func startPing(c pinger, live *liveness, timeout time.Duration, probe []byte) *pingCall {
	p := &pingCall{done: make(chan struct{}), msgsBefore: live.msgStarts.Load(), heardBefore: live.hearing()}
	go func() {
		defer close(p.done)
		if pr, ok := c.(prober); ok {
			// Written on its own goroutine, which ends with the write or
			// the connection: a write stuck behind another (a node that
			// reads nothing, our writes queued meanwhile) must not hold
			// up the ping and this round's verdict. Not written within
			// timeout, the round is judged by the ping alone.
			written := make(chan bool, 1)
			go func() { written <- pr.Write(context.Background(), websocket.MessageText, probe) == nil }()
			select {
			case p.probed = <-written:
			case <-time.After(timeout):
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if c.Ping(ctx) == nil {
			p.ponged = true
			if !p.probed {
				live.hears()
			}
		}
	}()
	return p
}

// running reports whether p (nil: none) has not ended.
func (p *pingCall) running() bool {
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}
