package mux

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/muxd/muxd/core"
	"github.com/muxd/muxd/failover"
	"github.com/muxd/muxd/reconnect"
)

// This file is the shell of failover: several upstreams, one active
// (Config.Upstreams). Every upstream has its own supervisor, connection,
// backoff and keepalive: this file dials them and shows their gauges.
// Everything else is failover.Upstreams, under s.mu: which connection is
// active, each connection's health requests and answers (ids of the
// failover package's part of the upstream id space, which the core never
// sees) and heads, and the core's upstream events, which it makes. The
// shell gives it each event, then carries out its effects (upstreamDone)
// after releasing s.mu, logging included.

// upstreamNode is one configured upstream.
type upstreamNode struct {
	set   *nodeSet // the list it is part of
	index int
	label string // its number, as metrics and logs name it: index+1
	host  string // its redacted URL, for logs
	sup   *reconnect.Supervisor
	// conn is its live connection, nil while it is down; guarded by
	// Server.mu. dials counts its connections so far; owned by its
	// supervisor's goroutine.
	conn  *upstreamConn
	dials int
	// reached says a dial of it is at the node (its handshake under way);
	// failedAt is when a dial of it last failed. Guarded by Server.mu.
	reached  bool
	failedAt time.Time
	// eff and fe are the effects of its failed dials (core.DialsFailed,
	// failover.Upstreams.Unreachable); owned by its supervisor's goroutine.
	eff *core.Effects
	fe  failover.Effects
	// stop ends its supervisor (nil until it runs); retiring says a
	// reload removed it: it is stopped once it carries no traffic.
	// Guarded by Server.mu.
	stop     context.CancelFunc
	retiring bool
	// rtt is its muxd_upstream_round_trip_seconds series.
	rtt prometheus.Observer
}

// nodeSet is the upstreams of one configuration (one per reload that
// changed them), with the selector that picks among them by index.
type nodeSet struct {
	nodes []*upstreamNode
	sel   *failover.List // guarded by Server.mu
	// multi: more than one upstream, and so health requests and failover.
	multi  bool
	gauges []prometheus.Collector // its per-upstream series, registered while it is in force
}

// newNodeSet builds the upstreams of cfg and their selector.
func (s *Server) newNodeSet(cfg Config) (*nodeSet, error) {
	set := &nodeSet{nodes: newNodes(cfg, s.dialFailed, s.dialReached)}
	set.multi = len(set.nodes) > 1
	for _, n := range set.nodes {
		n.set = set
	}
	failback := cfg.FailbackAfter
	if failback < 0 {
		failback = 0 // never
	}
	hosts := make([]string, len(set.nodes))
	for i, n := range set.nodes {
		hosts[i] = n.host
	}
	sel, err := failover.NewList(failover.ListConfig{
		Config: failover.Config{
			Upstreams:     len(set.nodes),
			MaxHeadLag:    uint64(cfg.MaxHeadLag),
			HeadTimeout:   cfg.HeadTimeout,
			FailbackAfter: failback,
			ChainID:       cfg.ChainID,
			StartWait:     startWait,
			LagGrace:      lagGrace,
		},
		// Always, but in tests that turn it off for one upstream.
		WatchHeads: !cfg.noHealthHeads,
		Hosts:      hosts,
	})
	if err != nil {
		return nil, fmt.Errorf("mux: %w", err)
	}
	set.sel = sel
	set.gauges = append(s.nodeGauges(set), s.opsNodeGauges(set)...)
	for _, n := range set.nodes {
		n.rtt = s.metrics.ops.roundTrip.WithLabelValues(n.label)
	}
	return set, nil
}

// registerSet makes set's series the ones shown: every failover and
// per-upstream series from the start, so that rates and alerts see 0.
// Not under s.mu: a scrape holds the registry while it reads the series
// under s.mu.
func (s *Server) registerSet(set *nodeSet) {
	for _, r := range failover.Reasons() {
		if r != failover.ReasonFirst {
			s.metrics.Failovers.WithLabelValues(r.String())
		}
	}
	for _, n := range set.nodes {
		s.metrics.ChainMismatches.WithLabelValues(n.label)
	}
	if s.cfg.Registerer != nil {
		for _, g := range set.gauges {
			s.cfg.Registerer.MustRegister(g)
		}
	}
}

// unregisterSet takes set's per-upstream series away.
func (s *Server) unregisterSet(set *nodeSet) {
	if s.cfg.Registerer != nil {
		for _, g := range set.gauges {
			s.cfg.Registerer.Unregister(g)
		}
	}
}

// The ids of the health requests (failover's part of the upstream id
// space), as tests look for them.
const (
	healthChainID   = failover.HealthChainID
	healthSubscribe = failover.HealthHeadsID
)

// startWait is how long muxd, at start, holds a less preferred upstream
// back while a more preferred one has not been tried (failover.Config's
// StartWait): a node that answers its dial at all is judged well within it.
const startWait = 2 * time.Second

// lagGrace is how long an upstream must stay more than max_head_lag behind
// before it counts as lagging (failover.Config's LagGrace): a head pushed
// on a busy connection can reach muxd a moment late.
const lagGrace = time.Second

// healthTick is how often the selector is given the time, so that a
// stalled upstream or a due failback is noticed without other events.
const healthTick = time.Second

// newNodes builds the upstreams of cfg, most preferred first. Their
// supervisors report each failed dial to unreachable, and each dial that
// reached its node to reached.
func newNodes(cfg Config, unreachable, reached func(*upstreamNode)) []*upstreamNode {
	ups := cfg.Upstreams
	if len(ups) == 0 {
		ups = []Upstream{{URL: cfg.Upstream, Header: cfg.UpstreamHeader, Dial: cfg.Dial}}
	}
	nodes := make([]*upstreamNode, len(ups))
	for i, up := range ups {
		n := &upstreamNode{index: i, label: strconv.Itoa(i + 1), host: reconnect.Redact(up.URL), eff: new(core.Effects)}
		dial := up.Dial
		if dial == nil {
			// No limit in coder/websocket, whose limit ends the connection:
			// the reader keeps at most cfg.UpstreamReadLimit of a message and
			// answers the rest with an error (framePool.readFrame, tooLarge).
			dial = reconnect.WebSocketDialer(up.URL, up.Header, -1)
		}
		n.sup = reconnect.New(reconnect.Config{
			Dial:         dial,
			NewBackOff:   reconnect.ExponentialBackOff(cfg.ReconnectInitial, cfg.ReconnectMax),
			PingInterval: cfg.PingInterval,
			PingTimeout:  cfg.PingTimeout,
			// A node running calls in order may be silent while it runs
			// a call that began up to an interval after its last answer.
			AnswerWait:    cfg.RequestTimeout + cfg.PingInterval,
			Logger:        cfg.Logger.With("upstream", n.label),
			OnDialError:   func(error, time.Duration) { unreachable(n) },
			OnDialReached: func() { reached(n) },
			// keepalive's probe id: in failover's part of the upstream id
			// space, where failover.Upstreams takes its answer.
			ProbeID: failover.ProbeID,
		})
		nodes[i] = n
	}
	return nodes
}

// multi reports whether the configuration in force has more than one
// upstream, and so health requests and failover. Caller holds s.mu.
func (s *Server) multi() bool { return s.set.multi }

// startSetLocked starts the supervisor of every upstream of set, under
// s.runCtx. Caller holds s.mu, and Run has begun.
func (s *Server) startSetLocked(set *nodeSet) {
	for _, n := range set.nodes {
		ctx, stop := context.WithCancel(s.runCtx)
		n.stop = stop
		s.supRunning++
		go func() {
			err := n.sup.Run(ctx, func(ctx context.Context, rc *reconnect.Conn) error {
				return s.serveUpstream(ctx, n, rc)
			})
			if ctx.Err() != nil {
				err = nil // stopped: by Run's context, or by a reload
			}
			s.supDone <- err
		}()
	}
}

// runNodes runs every upstream's supervisor, those a reload adds too,
// until ctx is done, and returns the first error of one, else ctx.Err().
func (s *Server) runNodes(ctx context.Context) error {
	s.mu.Lock()
	s.runCtx = ctx
	s.startSetLocked(s.set)
	s.mu.Unlock()
	var first error
	for {
		s.mu.Lock()
		if s.supRunning == 0 {
			s.supsDone = true
			s.mu.Unlock()
			break
		}
		s.mu.Unlock()
		err := <-s.supDone
		s.mu.Lock()
		s.supRunning--
		s.mu.Unlock()
		if err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return first
	}
	return ctx.Err()
}

// upstreamDoneLocked does, under s.mu, what the failover event whose
// effects are e needs done there: on a switch, the new active connection
// (one of the current list's, returned) becomes s.up; and the upstreams of
// old lists that carry no traffic are stopped. Caller holds s.mu and calls
// upstreamDone after releasing it.
func (s *Server) upstreamDoneLocked(e *failover.Effects) (to *upstreamConn) {
	if e.Switch != nil {
		to = s.set.nodes[e.Switch.To.Index()].conn
		s.setUp(to)
	}
	s.retireLocked()
	return to
}

// upstreamDone carries out the failover effects e of an event on
// connection u (nil: none) after s.mu is released: the health requests
// for u, then the switch's core effects on to (upstreamDoneLocked's), the
// chain mismatch count and the log. The event's own core effects are the caller's to apply first, with
// the connection that was active (apply).
func (s *Server) upstreamDone(e *failover.Effects, u, to *upstreamConn) {
	if len(e.Send) > 0 && u != nil {
		u.sendNoWait(e.Send...)
	}
	if sw := e.Switch; sw != nil {
		if sw.Counted {
			s.metrics.Failovers.WithLabelValues(sw.Reason.String()).Inc()
		}
		s.apply(sw.Core, to, nil)
	}
	if e.ChainMismatch && u != nil {
		s.metrics.ChainMismatches.WithLabelValues(u.node.label).Inc()
	}
	for _, n := range e.Notes {
		switch n.Level {
		case failover.LevelInfo:
			s.log.Info(n.Msg, n.Args...)
		case failover.LevelWarn:
			s.log.Warn(n.Msg, n.Args...)
		default:
			s.log.Error(n.Msg, n.Args...)
		}
	}
}

// closeGens closes the connections the core has drained.
func (s *Server) closeGens(gens []uint64) {
	var conns []*upstreamConn
	s.mu.Lock()
	for _, g := range gens {
		s.eachNodeLocked(func(n *upstreamNode) {
			if n.conn != nil && n.conn.gen() == g {
				conns = append(conns, n.conn)
				if n.retiring {
					// Drained: its supervisor is not to dial it again.
					n.conn.retired.Store(true)
					n.stop()
				}
			}
		})
	}
	s.mu.Unlock()
	for _, u := range conns {
		u.retired.Store(true)
		u.CloseNow()
	}
}

// dialFailed tells the selector that a dial of n failed, which ends the
// wait at start for it (startWait), and the core when every upstream not
// connected has now failed one: requests whose upstream_wait has passed
// give up (core.DialsFailed). Called by n's supervisor goroutine.
func (s *Server) dialFailed(n *upstreamNode) {
	now := time.Now()
	s.mu.Lock()
	n.reached, n.failedAt = false, now
	s.core.Dialing(s.dialReachedLocked())
	away := now
	for _, m := range s.set.nodes {
		if m.conn == nil && m.failedAt.Before(away) {
			away = m.failedAt
		}
	}
	s.core.DialsFailed(n.eff, away, now)
	s.ups.Unreachable(&n.fe, n.set.sel, n.index, now)
	to := s.upstreamDoneLocked(&n.fe)
	s.mu.Unlock()
	s.apply(n.eff, nil, nil) // answers only
	s.upstreamDone(&n.fe, nil, to)
}

// dialReached tells the core that a dial of n is at the node, its
// handshake under way: no request gives up for want of an upstream until
// its outcome (core.Dialing).
func (s *Server) dialReached(n *upstreamNode) {
	s.mu.Lock()
	n.reached = true
	s.core.Dialing(true)
	s.mu.Unlock()
}

// dialReachedLocked reports whether a dial of any upstream is at its node,
// or one is connected but not active (its chain id not judged yet, or
// not the selector's choice): either may yet serve what waits, so that a
// refused dial of another does not fail it. Caller holds s.mu.
func (s *Server) dialReachedLocked() bool {
	for _, n := range s.set.nodes {
		if n.reached || (n.conn != nil && n.conn != s.up) {
			return true
		}
	}
	return false
}

// hurryDialsLocked asks the supervisor of every upstream not connected to dial
// soon (reconnect.Supervisor.Hurry) while requests wait for an upstream, so
// that a node that is back gets them at once instead of at the backoff's
// next attempt. Caller holds s.mu; called at each sweep.
func (s *Server) hurryDialsLocked() {
	if s.core.Waiting() == 0 {
		return
	}
	for _, n := range s.set.nodes {
		if n.conn == nil {
			n.sup.Hurry()
		}
	}
}

// healthLoop gives the selector the time until ctx is done.
func (s *Server) healthLoop(ctx context.Context) {
	var e failover.Effects
	every(ctx, healthTick, func(now time.Time) {
		s.mu.Lock()
		s.ups.Tick(&e, now)
		to := s.upstreamDoneLocked(&e)
		s.mu.Unlock()
		s.upstreamDone(&e, nil, to)
	})
}

// Ready reports whether muxd can serve: an upstream is active and at
// least one is healthy (with one upstream: it has pushed a head within
// head_timeout).
func (s *Server) Ready() bool {
	ok, _ := s.Readiness()
	return ok
}

// Readiness is Ready with the reason when not ready.
func (s *Server) Readiness() (bool, string) { return s.readyAt(time.Now()) }

// readyAt is Readiness at now.
func (s *Server) readyAt(now time.Time) (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.up == nil:
		return false, "no upstream connected"
	case !s.set.sel.AnyHealthy(now):
		if s.multi() {
			return false, "no upstream healthy"
		}
		return false, fmt.Sprintf("no new head for head_timeout (%v)", s.cfg.HeadTimeout)
	}
	return true, ""
}

// nodeGauges are the per-upstream series of set, read off its selector
// when scraped: labelled by the upstream's number, never by URL.
func (s *Server) nodeGauges(set *nodeSet) []prometheus.Collector {
	series := []struct {
		name, help string
		value      func(failover.Status) float64
	}{
		{"muxd_upstream_node_connected", "1 while this upstream (by its number in the configuration, from 1) is connected.",
			func(st failover.Status) float64 { return b2f(st.Connected) }},
		{"muxd_upstream_node_healthy", "1 while this upstream is healthy: connected, on the chain, at most max_head_lag behind, a head within head_timeout.",
			func(st failover.Status) float64 { return b2f(st.Healthy) }},
		{"muxd_upstream_node_active", "1 for the upstream that carries client traffic.",
			func(st failover.Status) float64 { return b2f(st.Active) }},
		{"muxd_upstream_node_head", "The latest head this upstream pushed (0: none yet).",
			func(st failover.Status) float64 { return float64(st.Head) }},
	}
	var cs []prometheus.Collector
	for _, n := range set.nodes {
		for _, g := range series {
			cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: g.name, Help: g.help, ConstLabels: prometheus.Labels{"upstream": n.label},
			}, func() float64 {
				s.mu.Lock()
				st := set.sel.Status(n.index, time.Now())
				s.mu.Unlock()
				return g.value(st)
			}))
		}
	}
	return cs
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
