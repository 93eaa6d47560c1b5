package reconnect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/coder/websocket"
)

// ErrRetired is what serve returns (wrapped) when its caller closed a
// healthy connection on purpose: Run logs it as routine, not as a loss, and
// dials again after the initial backoff.
var ErrRetired = errors.New("connection retired")

// Conn is one live upstream connection, valid until the serve call it was passed to
// returns. The embedded *websocket.Conn follows coder/websocket's rules: at most one
// reader at a time, writes are safe for concurrent use.
type Conn struct {
	*websocket.Conn
	// Gen is the connection's generation: 1 for a Supervisor's first connection, +1
	// for each new one, never reused.
	Gen uint64
	// live is the connection's liveness (see keepalive); nil on a Conn made
	// outside a Supervisor.
	live *liveness
	// sock is the socket under the WebSocket when [WebSocketDialer] opened
	// it, else nil (Cork and Flush then do nothing).
	sock *coalescingConn
}

// Cork makes the socket hold the frames written from now on, in chunks of
// up to 64 KiB, until Flush writes them out in as few system calls as they
// fit: the connection's one writer corks before it writes what it has and
// flushes once it has no more (as derp's sendLoop flushes its buffer when
// its queue is empty). Frames stay whole WebSocket messages; only their
// bytes share writes. A frame written by anyone else meanwhile (a ping, a
// pong, the close frame) joins the held bytes in order. Cork and Flush are
// for one writer at a time; they do nothing on a connection not opened by
// [WebSocketDialer].
func (c *Conn) Cork() {
	if c != nil && c.sock != nil {
		c.sock.Cork()
	}
}

// Flush writes out what the socket holds since Cork and uncorks it. It
// returns the socket's error, if a write failed (the connection is broken,
// and should be closed) or the socket was closed.
func (c *Conn) Flush() error {
	if c == nil || c.sock == nil {
		return nil
	}
	return c.sock.Flush()
}

// Answered tells keepalive that the node answered one of our requests: it
// hears us (see [Config.PingTimeout]). serve calls it for each answer it
// reads, from its reading goroutine; it is an atomic store, cheap enough
// for every message.
func (c *Conn) Answered() {
	if c != nil && c.live != nil {
		c.live.hears()
	}
}

// Reading tells keepalive that serve began reading one message (on) or
// finished it (off). A pong comes after whatever message the node was
// writing when it read our ping, so a connection is judged deaf only once a
// message begun after an unanswered ping has ended, never while a long one
// begun before it is still arriving; a serve that does not report messages
// is never judged deaf. Called by serve's reading goroutine, after Reader
// returns and once the message is read and any answer in it reported
// (Answered): a message must not end, for keepalive, before its answer.
func (c *Conn) Reading(on bool) {
	if c != nil && c.live != nil {
		if on {
			c.live.msgStarts.Add(1)
		} else {
			c.live.msgEnds.Add(1)
		}
	}
}

// Supervisor keeps one upstream connection up. Create it with [New]. Run must not be
// called concurrently with itself; it may be called again after it returns, and
// generations keep increasing across calls.
type Supervisor struct {
	cfg Config
	log *slog.Logger
	gen atomic.Uint64
	// hurry holds one request of Hurry's, for the pause between attempts.
	hurry chan struct{}
}

// New returns a Supervisor for cfg, with defaults applied to zero-valued fields.
// It panics if cfg.Dial is nil.
func New(cfg Config) *Supervisor {
	if cfg.Dial == nil {
		panic("reconnect: Config.Dial is nil")
	}
	cfg = cfg.withDefaults()
	return &Supervisor{cfg: cfg, log: cfg.Logger, hurry: make(chan struct{}, 1)}
}

// Hurry asks for the next dial attempt soon: HurryInterval after the last
// attempt began or the last connection ended, at once if that has passed,
// however long the backoff's pause. It is for a caller with something
// waiting for a connection (muxd: requests held for an upstream), who asks
// again for as long as that lasts: a request made during an attempt applies
// to the pause after it, one made while connected is forgotten when the
// connection ends. It never blocks and is safe for concurrent use.
func (s *Supervisor) Hurry() {
	select {
	case s.hurry <- struct{}{}:
	default:
	}
}

// Run dials until it succeeds (with backoff between attempts, forever, until ctx is
// done), then calls serve(ctx, conn) for that connection on Run's goroutine. While
// serve runs, a keepalive goroutine watches the connection's progress: once nothing
// has come from the node for PingInterval it sends a ping, and if nothing has
// progressed PingTimeout later it closes the connection with CloseNow, so serve's Read
// fails and serve returns (see [Config.PingTimeout] for what counts as progress). When serve returns, Run closes the connection (CloseNow),
// waits for the keepalive goroutine, and, after a backoff delay (the backoff is reset
// first if the connection lived at least HealthyAfter), dials again.
//
// serve must read from the connection until it fails (coder/websocket needs a
// concurrent reader for pings to see their pongs) and must return once it fails or its
// ctx is done. serve's ctx carries ctx's values but is not cancelled the moment ctx is:
// on shutdown Run first attempts a close handshake (StatusNormalClosure, "shutdown"),
// bounded by a short grace period, and only then cancels serve's ctx; a serve blocked
// in Read sees the handshake's reply or the closed connection and returns.
//
// Run returns ctx.Err() once ctx is done and serve (if running) has returned. If the
// backoff policy returns backoff.Stop, Run returns an error wrapping the last failure.
//
// [Supervisor.Hurry] cuts the pauses short (see [Config.HurryInterval]). A failed
// attempt it made early is logged at Warn only when none was for the backoff's
// pause, else at Debug: the log keeps the backoff's pace.
func (s *Supervisor) Run(ctx context.Context, serve func(ctx context.Context, c *Conn) error) error {
	b := s.cfg.NewBackOff()
	var (
		hurried  bool      // this attempt came early, at a Hurry
		lastWarn time.Time // when a failed attempt was last logged at Warn
	)
	for {
		tried := time.Now()
		ws, live, err := s.dial(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			next := b.NextBackOff()
			if hurried && time.Since(lastWarn) < next {
				s.log.Debug("upstream dial failed", "err", err, "retry_in", next, "hurried", true)
			} else {
				lastWarn = time.Now()
				s.log.Warn("upstream dial failed", "err", err, "retry_in", next)
			}
			if s.cfg.OnDialError != nil {
				s.cfg.OnDialError(err, next)
			}
			if next == backoff.Stop {
				return fmt.Errorf("reconnect: giving up dialling upstream: %w", err)
			}
			if hurried, err = s.pause(ctx, next, tried); err != nil {
				return err
			}
			continue
		}

		c := &Conn{Conn: ws, Gen: s.gen.Add(1), live: live, sock: live.conn.Load()}
		s.log.Info("upstream connected", "gen", c.Gen)
		start := time.Now()
		err = s.session(ctx, c, live, serve)
		lived := time.Since(start)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		retired := errors.Is(err, ErrRetired)
		if lived >= s.cfg.HealthyAfter || retired {
			b.Reset()
		}
		next := b.NextBackOff()
		if retired {
			s.log.Info("upstream connection retired", "gen", c.Gen, "lived", lived, "redial_in", next)
		} else {
			s.log.Warn("upstream lost", "gen", c.Gen, "err", err, "lived", lived, "retry_in", next)
		}
		if next == backoff.Stop {
			return fmt.Errorf("reconnect: giving up after losing upstream: %w", err)
		}
		// The pause after a lost connection keeps the backoff's pace,
		// Hurry or not: a node that takes the WebSocket and drops it at
		// once (a provider's rate limit, a proxy closing upgraded
		// connections) costs it a handshake, resubscriptions and every
		// waiting request each time. Only a failed dial, which cost the
		// node nothing, is followed by a hurried one.
		select {
		case <-s.hurry: // asked for while connected
		default:
		}
		hurried = false
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// pause waits d, or until ctx is done. A Hurry meanwhile ends it
// HurryInterval after last (the last attempt's start, or the connection's
// end) if that is sooner, at once if it has passed; hurried reports
// whether one did.
func (s *Supervisor) pause(ctx context.Context, d time.Duration, last time.Time) (hurried bool, err error) {
	end := time.Now().Add(d)
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return hurried, ctx.Err()
		case <-t.C:
			return hurried, nil
		case <-s.hurry:
			if soon := last.Add(s.cfg.HurryInterval); soon.Before(end) {
				end, hurried = soon, true
				t.Reset(time.Until(soon))
			}
		}
	}
}

// dial makes one attempt bounded by DialTimeout. The liveness it returns
// watches the new connection's socket if the DialFunc is a WebSocketDialer
// (see withLiveness); with another DialFunc only pongs count as progress.
func (s *Supervisor) dial(ctx context.Context) (*websocket.Conn, *liveness, error) {
	dctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
	defer cancel()
	if s.cfg.OnDialReached != nil {
		a := &attempt{report: s.cfg.OnDialReached}
		defer a.end() // before Run reports the outcome
		dctx = withReach(dctx, a.reach)
	}
	live := newLiveness()
	c, err := s.cfg.Dial(withLiveness(dctx, live))
	if err != nil {
		return nil, nil, err
	}
	if c == nil {
		return nil, nil, errors.New("reconnect: DialFunc returned neither a connection nor an error")
	}
	if ctx.Err() != nil {
		c.CloseNow()
		return nil, nil, ctx.Err()
	}
	return c, live, nil
}

// attempt reports that one dial attempt reached the node
// ([Config.OnDialReached]): at most once, and never once the attempt has
// ended, although net/http may open the connection on a goroutine of its
// own that outlives the attempt.
type attempt struct {
	report         func()
	mu             sync.Mutex
	reached, ended bool
}

func (a *attempt) reach() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.reached && !a.ended {
		a.reached = true
		a.report()
	}
}

func (a *attempt) end() {
	a.mu.Lock()
	a.ended = true
	a.mu.Unlock()
}

// session runs serve for c with keepalive and shutdown handling and returns why the
// connection ended: the keepalive error if a ping timed out, else serve's error.
// c is closed and all helpers have finished when session returns.
func (s *Supervisor) session(ctx context.Context, c *Conn, live *liveness, serve func(context.Context, *Conn) error) (err error) {
	serveCtx, cancelServe := context.WithCancel(context.WithoutCancel(ctx))

	pingCtx, stopPing := context.WithCancel(context.Background())
	pingDone := make(chan struct{})
	var pingErr error // written by the keepalive goroutine before pingDone is closed
	if s.cfg.PingInterval > 0 {
		go func() {
			defer close(pingDone)
			pingErr = keepalive(pingCtx, c.Conn, live, s.cfg.PingInterval, s.cfg.PingTimeout, s.cfg.AnswerWait, probeRequest(s.cfg.ProbeID))
		}()
	} else {
		close(pingDone)
	}

	shutdownDone := make(chan struct{})
	stopShutdown := context.AfterFunc(ctx, func() {
		defer close(shutdownDone)
		stopPing()
		<-pingDone
		closeGracefully(c.Conn, closeGrace)
		cancelServe()
	})

	defer func() {
		if !stopShutdown() {
			<-shutdownDone
		}
		stopPing()
		<-pingDone
		c.CloseNow()
		cancelServe()
		if pingErr != nil {
			err = pingErr
		}
	}()
	return serve(serveCtx, c)
}

// closeGracefully starts a close handshake and waits for it at most grace. If it takes
// longer it keeps running in the background; coder/websocket bounds it by its own
// timeouts, and it ends as soon as serve's Read drops the connection.
func closeGracefully(c *websocket.Conn, grace time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Close(websocket.StatusNormalClosure, "shutdown")
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
