package mux

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/muxd/muxd/gapfill"
	"github.com/muxd/muxd/reconnect"
	"github.com/muxd/muxd/router"
)

// ErrTooManyClients is returned when MaxClients sessions are already open.
var ErrTooManyClients = errors.New("too many clients")

// ErrClosed is returned for sessions opened after Shutdown began.
var ErrClosed = errors.New("server shutting down")

// Server shares one upstream connection among many client sessions.
// Create it with New, run the upstream with Run, and hand it client
// connections through its ingress handlers (ServeHTTP for WebSocket).
type Server struct {
	cfg     Config
	log     *slog.Logger
	policy  policy
	metrics *Metrics
	sup     *reconnect.Supervisor

	mu         sync.Mutex
	reqs       *router.Requests // pending table of the current connection
	subs       *router.Subscriptions
	waiting    []waitingRequest // requests held while no upstream is up
	clients    map[router.ClientID]*Client
	nextClient router.ClientID
	up         *upstreamConn // nil while disconnected
	gens       uint64        // connections made so far
	closing    bool
	idle       chan struct{} // closed when in-flight work reaches zero during shutdown

	upChanged chan struct{} // closed and replaced whenever up changes (for waiters)
	dropLog   dropLimiter
	frames    framePool // the upstream reader's large frame buffers
	reclaim   reclaimer // gives large releases back to the OS

	// gap makes subscriptions gap-free (backfill.go); gapReqs maps the
	// upstream id of each of its requests in flight to the machine's id.
	// Both are guarded by mu.
	gap        *gapfill.Machine
	gapReqs    map[uint64]uint64
	gapTimeout time.Duration
}

// waitingRequest is a request accepted while no upstream was connected, or
// carried over from a lost connection for a retry. id is its upstream id,
// kept so that a retry goes out under the id it had.
type waitingRequest struct {
	id uint64
	p  router.Pending
	// giveUp is when it stops waiting for an upstream and gets -32002
	// (Config.UpstreamWait after it began to wait).
	giveUp time.Time
}

// New checks cfg and returns a Server. Nothing runs until Run.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if cfg.Dial == nil {
		if cfg.Upstream == "" {
			return nil, errors.New("mux: no upstream URL")
		}
		cfg.Dial = reconnect.WebSocketDialer(cfg.Upstream, cfg.UpstreamHeader, cfg.UpstreamReadLimit)
	}
	pol, err := newPolicy(cfg.DenyMethods, cfg.RetryMethods)
	if err != nil {
		return nil, fmt.Errorf("mux: %w", err)
	}
	s := &Server{
		cfg:        cfg,
		log:        cfg.Logger,
		policy:     pol,
		metrics:    newMetrics(cfg.Registerer),
		reqs:       router.NewRequests(),
		subs:       router.NewSubscriptions(),
		clients:    make(map[router.ClientID]*Client),
		upChanged:  make(chan struct{}),
		gapReqs:    make(map[uint64]uint64),
		gapTimeout: min(cfg.RequestTimeout, gapfill.DefaultRequestTimeout),
	}
	s.gap = newGapMachine(cfg, s.gapTimeout)
	s.reclaim.runs = s.metrics.MemoryReclaims.Inc
	s.frames.onRelease = s.reclaim.released
	s.sup = reconnect.New(reconnect.Config{
		Dial:         cfg.Dial,
		NewBackOff:   reconnect.ExponentialBackOff(cfg.ReconnectInitial, cfg.ReconnectMax),
		PingInterval: cfg.PingInterval,
		PingTimeout:  cfg.PingTimeout,
		Logger:       cfg.Logger,
		OnDialError: func(err error, next time.Duration) {
			s.metrics.UpstreamConnected.Set(0)
		},
	})
	return s, nil
}

// Metrics returns the server's metrics.
func (s *Server) Metrics() *Metrics { return s.metrics }

// Run keeps the upstream connected and answers timeouts until ctx is done.
// It returns ctx.Err().
func (s *Server) Run(ctx context.Context) error {
	sweepCtx, stopSweep := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.sweepLoop(sweepCtx)
	}()
	err := s.sup.Run(ctx, s.serveUpstream)
	stopSweep()
	wg.Wait()
	s.failAll(router.ErrorUnavailable.Because("shutdown"))
	return err
}

// Connected reports whether the upstream is up, and returns a channel that
// is closed at the next change.
func (s *Server) Connected() (bool, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.up != nil, s.upChanged
}

// Ready reports whether the upstream is connected.
func (s *Server) Ready() bool {
	up, _ := s.Connected()
	return up
}

// setUp changes the current upstream connection. Caller holds s.mu.
func (s *Server) setUp(u *upstreamConn) {
	s.up = u
	close(s.upChanged)
	s.upChanged = make(chan struct{})
	if u != nil {
		s.metrics.UpstreamConnected.Set(1)
	} else {
		s.metrics.UpstreamConnected.Set(0)
	}
}

// newClient registers a session over tr. The returned client's context ends
// when the session does; the caller runs its reader and must call
// removeClient when it returns.
func (s *Server) newClient(parent context.Context, tr transport) (*Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, ErrClosed
	}
	if len(s.clients) >= s.cfg.MaxClients {
		s.metrics.limit("clients")
		return nil, ErrTooManyClients
	}
	s.nextClient++
	ctx, cancel := context.WithCancel(parent)
	c := &Client{
		id:        s.nextClient,
		srv:       s,
		tr:        tr,
		out:       newOutbox(s.cfg.OutboundQueueBytes),
		ctx:       ctx,
		cancel:    cancel,
		autoWrite: tr.name() != "http",
	}
	s.clients[c.id] = c
	s.metrics.clientsByTransport[tr.name()].Inc()
	return c, nil
}

// removeClient forgets a session that has ended: its pending requests are
// dropped (answers that still come for them match nothing and are dropped)
// and its subscriptions are released.
func (s *Server) removeClient(c *Client) {
	c.shut(closeNormal, "")
	var frames [][]byte
	s.mu.Lock()
	if _, ok := s.clients[c.id]; !ok {
		s.mu.Unlock()
		return
	}
	delete(s.clients, c.id)
	s.reqs.DropClient(c.id, nil)
	kept := s.waiting[:0]
	for _, w := range s.waiting {
		if w.p.Client != c.id {
			kept = append(kept, w)
		}
	}
	clear(s.waiting[len(kept):])
	s.waiting = kept
	s.metrics.InFlight.Sub(float64(c.inflight))
	s.reclaim.released(c.held)
	c.inflight, c.held = 0, 0
	frames = s.releaseSubscriptionsLocked(c)
	up := s.up
	s.checkIdleLocked()
	s.mu.Unlock()
	s.metrics.clientsByTransport[c.tr.name()].Dec()
	up.send(frames...)
}

// failAll answers every request still pending, waiting for an upstream, or
// waiting on a subscription with e, and returns how many; used when the
// server stops.
func (s *Server) failAll(e router.RPCError) int {
	var done []router.Pending
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs.Discard(func(_ uint64, p router.Pending) {
		s.settledLocked(p)
		done = append(done, p)
	})
	for _, w := range s.waiting {
		s.settledLocked(w.p)
		done = append(done, w.p)
	}
	s.waiting = nil
	done = s.expireWaitersLocked(time.Unix(1<<40, 0), done) // every waiter
	s.updateSubGaugesLocked()
	n := 0
	for _, p := range done {
		if c := s.clients[p.Client]; c != nil && p.Client != router.Internal {
			s.deliverLocked(c, p, router.ErrorResponse(p.ID, e), e.Code)
			n++
		}
	}
	return n
}

// Shutdown stops taking new sessions, waits until every request in flight
// has been answered or ctx is done (then answers the rest with -32002
// "upstream unavailable", reason "shutdown"), and closes every client with
// 1001 (going away) once its answers are written. Run's context should be cancelled after it, which closes the
// upstream with 1000.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	if s.idle == nil {
		s.idle = make(chan struct{})
	}
	idle := s.idle
	s.checkIdleLocked()
	s.mu.Unlock()

	select {
	case <-idle:
	case <-ctx.Done():
		// Grace is over: every request still owed an answer gets one, an
		// explicit -32002, before its client is closed.
		n := s.failAll(router.ErrorUnavailable.Because("shutdown"))
		s.log.Warn("shutdown grace over, answered requests still in flight with -32002", "requests", n)
	}
	s.mu.Lock()
	clients := make([]*Client, 0, len(s.clients))
	for _, c := range s.clients {
		clients = append(clients, c)
	}
	s.mu.Unlock()
	// Each client is closed with 1001 once what is queued for it has been
	// written; a client that does not take it within a second is cut.
	for _, c := range clients {
		c.finish(closeGoingAway, "shutdown")
	}
	flush := time.NewTimer(time.Second)
	defer flush.Stop()
	for _, c := range clients {
		select {
		case <-c.ctx.Done():
		case <-flush.C:
			flush.Reset(0)
			c.shut(closeGoingAway, "shutdown")
		}
	}
	return nil
}

// checkIdleLocked closes s.idle once shutting down and nothing is in
// flight. Caller holds s.mu.
func (s *Server) checkIdleLocked() {
	if s.idle == nil || !s.closing {
		return
	}
	select {
	case <-s.idle:
		return
	default:
	}
	busy := len(s.waiting) > 0
	if !busy {
		for _, c := range s.clients {
			if c.inflight > 0 {
				busy = true
				break
			}
		}
	}
	if !busy {
		close(s.idle)
	}
}
