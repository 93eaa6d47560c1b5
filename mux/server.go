package mux

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/muxd/muxd/core"
	"github.com/muxd/muxd/failover"
	"github.com/muxd/muxd/router"
)

// ErrTooManyClients is returned when MaxClients sessions are already open.
var ErrTooManyClients = core.ErrTooManyClients

// ErrClosed is returned for sessions opened after Shutdown began.
var ErrClosed = core.ErrClosed

// Server shares one upstream connection among many client sessions.
// Create it with New, run the upstream with Run, and hand it client
// connections through its ingress handlers (ServeHTTP for WebSocket).
//
// All routing state lives in core, a sans-I/O state machine (package
// core); the Server is its shell. Every goroutine that has an event for it
// (a session's reader, the upstream reader, the sweeper) takes mu, makes
// the one core call, and releases mu; it then carries out the call's
// effects: queueing deliveries, writing upstream, logging.
type Server struct {
	// answerFlush is AnswerFlush; a test may lengthen it before Shutdown.
	answerFlush time.Duration
	cfg         Config
	log         *slog.Logger
	metrics     *Metrics

	// reloadMu makes one Reconfigure at a time; nodesCfg is the Config the
	// current set of upstreams was built from, guarded by it.
	reloadMu sync.Mutex
	nodesCfg Config

	mu   sync.Mutex
	core *core.Core // guarded by mu
	// set is the upstreams of the configuration in force, most preferred
	// first, with the selector that picks the active one among them; old
	// are the sets a reload replaced that still run (reload.go). Guarded
	// by mu.
	set *nodeSet
	old []*nodeSet
	up  *upstreamConn // guarded by mu: the active connection; nil while none
	// ups is the upstream set's machine: which connection is active, their
	// health and heads, and the core's upstream events. Guarded by mu.
	ups *failover.Upstreams
	// runCtx is Run's context, nil before Run: the supervisors of a set a
	// reload adds run under it. supRunning counts the supervisors running,
	// each of which sends its result on supDone; supsDone is set once Run
	// saw them all end, after which none is started. Guarded by mu.
	runCtx     context.Context
	supRunning int
	supsDone   bool
	supDone    chan error
	// stopping is set once Run's context is done: the upstreams are then
	// closing one by one, and none is made active any more. Guarded by mu.
	stopping bool
	idle     chan struct{} // guarded by mu: closed when nothing is owed during shutdown
	// upChanged, when set, is called under mu whenever up changes: tests
	// wait on it (export_test.go); nil otherwise.
	upChanged func()

	// queued is what clients' outbound queues hold past their own bound,
	// all together (outbox); any goroutine.
	queued queueBudget

	// peers finds a session by id for the deliveries of the core.
	peersMu sync.RWMutex
	peers   map[router.ClientID]*Client

	fanout  fanouts                       // the upstream reader's hand-off of large fan-outs
	dropLog lineLimiter[core.DropReason]  // dropped upstream messages' log lines
	noteLog lineLimiter[core.LimitedNote] // warnings a client can cause (core.Note.Limited)
	frames  framePool                     // the upstream reader's large frame buffers
	arenas  arenaPool                     // client batches' upstream arrays (arenas.go)
	reclaim reclaimer                     // gives large releases back to the OS
	sweep   core.Effects
}

// New checks cfg and returns a Server. Nothing runs until Run.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if len(cfg.Upstreams) == 0 && cfg.Dial == nil && cfg.Upstream == "" {
		return nil, errors.New("mux: no upstream URL")
	}
	for i, up := range cfg.Upstreams {
		if up.Dial == nil && up.URL == "" {
			return nil, fmt.Errorf("mux: upstream %d: no URL", i)
		}
	}
	s := &Server{
		cfg:         cfg,
		answerFlush: AnswerFlush,
		log:         cfg.Logger,
		metrics:     newMetrics(cfg.Registerer),
		peers:       make(map[router.ClientID]*Client),
		queued:      queueBudget{max: int64(cfg.OutboundQueueBytesTotal)},
		supDone:     make(chan error),
	}
	s.queued.gauge = s.metrics.QueuedPastBound
	rc, err := core.New(s.coreConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("mux: %w", err)
	}
	s.core = rc
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(s.tableGauges()...)
	}
	s.reclaim.runs = s.metrics.MemoryReclaims.Inc
	s.frames.onRelease = s.reclaim.released
	set, err := s.newNodeSet(cfg)
	if err != nil {
		return nil, err
	}
	s.set = set
	s.ups = failover.NewUpstreams(s.core, set.sel)
	s.nodesCfg = cfg
	s.registerSet(set)
	s.opsSeries(cfg.Registerer)
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
	// The selector is given the time even with one upstream: a reload
	// may make several.
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.healthLoop(sweepCtx)
	}()
	stopFanout := s.startFanout()
	stopStopping := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.stopping = true
		s.ups.Stop()
		s.mu.Unlock()
	})
	defer stopStopping()
	err := s.runNodes(ctx)
	stopFanout() // the upstream readers, its senders, have returned
	stopSweep()
	wg.Wait()
	s.failAll(router.ErrorUnavailable.Because("shutdown"))
	return err
}

// setUp changes the current upstream connection. Caller holds s.mu.
func (s *Server) setUp(u *upstreamConn) {
	s.up = u
	s.core.Dialing(s.dialReachedLocked())
	if s.upChanged != nil {
		s.upChanged()
	}
	if u != nil {
		s.metrics.UpstreamConnected.Set(1)
	} else {
		s.metrics.UpstreamConnected.Set(0)
	}
}

// coreConfig is the routing core's configuration for cfg (with its
// defaults).
func (s *Server) coreConfig(cfg Config) core.Config {
	backfill := cfg.BackfillBlocks
	if backfill < 0 {
		backfill = 0
	}
	return core.Config{
		RequestTimeout:     cfg.RequestTimeout,
		UpstreamWait:       cfg.UpstreamWait,
		DialGrace:          dialGrace,
		UpstreamMaxBatch:   cfg.UpstreamMaxBatch,
		MaxUpstreamMessage: int(cfg.MaxMessageBytes),
		MaxBatch:           cfg.MaxBatch,
		MaxInFlight:        cfg.MaxInFlight,
		MaxHeldBytes:       cfg.MaxHeldBytes,
		MaxHeldBytesTotal:  cfg.MaxHeldBytesTotal,
		MaxSubscriptions:   cfg.MaxSubscriptions,
		MaxClients:         cfg.MaxClients,
		MaxWaiting:         cfg.MaxWaiting,
		HeldPushBytes:      cfg.OutboundQueueBytes,
		DenyMethods:        cfg.DenyMethods,
		RetryMethods:       cfg.RetryMethods,
		BackfillBlocks:     backfill,
		HistoryBlocks:      max(cfg.HistoryBlocks, 0),
		GapNotices:         cfg.SubscriptionGapNotices,
		CoalesceMethods:    cfg.CoalesceMethods,
		CacheBytes:         max(cfg.CacheBytes, 0),
		ReportHeads:        len(cfg.Upstreams) > 1,
		NewSubscriptionID:  newSubscriptionID,
		Observer:           observer{s.metrics, s},
		Arenas:             s.arenas.get,

		// The fair shares of calls at the node (DESIGN §5).
		MaxUpstreamInFlight: max(cfg.MaxUpstreamInFlight, 0),
		Clients:             cfg.Clients,
	}
}

// newClient registers a session over tr. The returned client's context ends
// when the session does; the caller runs its reader and must call
// removeClient when it returns.
func (s *Server) newClient(parent context.Context, tr transport, name string) (*Client, error) {
	s.mu.Lock()
	id, _, err := s.core.JoinAs(tr.name() == "http", name)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(parent)
	c := &Client{
		id:        id,
		srv:       s,
		tr:        tr,
		out:       newOutbox(s.cfg.OutboundQueueBytes, &s.queued),
		ctx:       ctx,
		cancel:    cancel,
		autoWrite: tr.name() != "http",
	}
	s.peersMu.Lock()
	s.peers[id] = c
	s.peersMu.Unlock()
	s.metrics.clientsByTransport[tr.name()].Inc()
	return c, nil
}

// removeClient forgets a session that has ended: its pending requests are
// dropped (those already sent upstream become the core's orphans, whose
// answers are dropped and counted as client_gone) and its subscriptions
// are released.
func (s *Server) removeClient(c *Client) {
	c.shut(closeNormal, "")
	s.peersMu.Lock()
	_, ok := s.peers[c.id]
	delete(s.peers, c.id)
	s.peersMu.Unlock()
	if !ok {
		return
	}
	s.mu.Lock()
	held := s.core.Held(c.id)
	s.core.ClientGone(&c.eff, c.id, time.Now())
	up := s.up
	s.mu.Unlock()
	s.reclaim.released(held)
	s.metrics.clientsByTransport[c.tr.name()].Dec()
	s.apply(&c.eff, up, nil)
}

// failAll answers every request still owed an answer with e, and returns
// how many; used when the server stops.
func (s *Server) failAll(e router.RPCError) int {
	var eff core.Effects
	s.mu.Lock()
	n := s.core.Shutdown(&eff, e, time.Now())
	up := s.up
	s.mu.Unlock()
	s.apply(&eff, up, nil)
	return n
}

// AnswerFlush is how long Shutdown gives a client to take its last
// answers before its connection is cut.
const AnswerFlush = time.Second

// Shutdown stops taking new sessions, waits until every request in flight
// has been answered or ctx is done (then answers the rest with -32002
// "upstream unavailable", reason "shutdown"), and closes every client with
// 1001 (going away) once its answers are written. From the end of that
// wait, every request a session reads is answered with the same -32002 at
// once and none goes upstream. Run's context should be cancelled after
// it, which closes the upstream with 1000.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.idle == nil {
		s.idle = make(chan struct{})
	}
	idle := s.idle
	if s.core.BeginShutdown() {
		s.idleNowLocked()
	}
	s.mu.Unlock()

	graceOver := false
	select {
	case <-idle:
	case <-ctx.Done():
		graceOver = true
	}
	// The sweep: every request still owed an answer gets one, an explicit
	// -32002, and from now on the core answers every request a session
	// reads the same way at once, forwarding none. A client that goes on
	// sending is then owed nothing beyond what its writer has queued, and
	// its session can close with every answer written.
	n := s.failAll(router.ErrorUnavailable.Because("shutdown"))
	if graceOver {
		s.log.Warn("shutdown grace over, answered requests still in flight with -32002", "requests", n)
	}
	s.peersMu.RLock()
	clients := make([]*Client, 0, len(s.peers))
	for _, c := range s.peers {
		clients = append(clients, c)
	}
	s.peersMu.RUnlock()
	// Each client is closed with 1001 once what is queued for it has been
	// written; a client that does not take it within AnswerFlush is cut.
	for _, c := range clients {
		c.finish(closeGoingAway, "shutdown")
	}
	flush := time.NewTimer(s.answerFlush)
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

// idleNowLocked tells a waiting Shutdown that nothing is owed any more.
// Caller holds s.mu.
func (s *Server) idleNowLocked() {
	if s.idle == nil {
		return
	}
	select {
	case <-s.idle:
	default:
		close(s.idle)
	}
}

// coreStat is a gauge function reading one figure of the core's Stats,
// taken under s.mu when scraped.
func (s *Server) coreStat(f func(core.Stats) int) func() float64 {
	return func() float64 {
		s.mu.Lock()
		st := s.core.Stats()
		s.mu.Unlock()
		return float64(f(st))
	}
}

// tableGauges are the series read off the core's tables when scraped.
func (s *Server) tableGauges() []prometheus.Collector {
	stat := s.coreStat
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "muxd_requests_waiting", Help: "Requests waiting for an upstream connection (none is up, or they are retried on the next).",
		}, stat(func(st core.Stats) int { return st.Waiting })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "muxd_request_bytes_held", Help: "Bytes of clients' requests muxd holds, in flight upstream or waiting, and of their subscriptions' params (bounded per client by max_held_bytes).",
		}, stat(func(st core.Stats) int { return st.HeldBytes })),
	}
}
