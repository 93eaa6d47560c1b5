package mux

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/muxd/muxd/failover"
)

// This file is a reload (SIGHUP): Reconfigure applies a new Config to a
// running Server without dropping a session.
//
// The core's limits and policy change in one core event (core.Reconfigure).
// A change of the upstream list, or of how upstreams are dialled and
// judged, builds a whole new set of upstreams (nodeSet) with its own
// selector, and starts it beside the old one, which goes on carrying the
// traffic: once the new selector has picked an upstream (connected; with
// several, on the chain and healthy) the traffic moves to it as in a
// failover (core.UpstreamSwitch: requests in flight drain on the old
// connection, subscriptions are made again on the new one and gap-filled,
// clients keep their subscription ids), and the old set's upstreams are
// stopped, the one that was active once it has drained. An upstream kept
// in the new list is dialled again like the others: simple, and the cost
// is one connection more for a moment.

// Reconfigure applies cfg, as a reload does. What it applies, and when:
//
//   - The core's limits and policy (MaxBatch, MaxInFlight, MaxHeldBytes,
//     MaxHeldBytesTotal, MaxSubscriptions, MaxClients, MaxWaiting,
//     UpstreamMaxBatch, RequestTimeout, UpstreamWait, DenyMethods,
//     RetryMethods, CoalesceMethods, CacheBytes): to the next request,
//     subscription or session (see core.Reconfigure).
//   - Upstreams (and Upstream, UpstreamHeader, Dial), MaxHeadLag,
//     HeadTimeout, FailbackAfter, ChainID, PingInterval, PingTimeout,
//     ReconnectInitial, ReconnectMax: a new set of upstreams, switched to
//     as in a failover (see above).
//
// Every other field is read once, by New or by the listeners, and cannot
// change: Reconfigure returns an error naming each that differs, and an
// invalid value, and then changes nothing. Logger and Registerer are
// kept. It fails once Run's context is done.
func (s *Server) Reconfigure(cfg Config) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if cfg.MaxConnections <= 0 {
		// The bound on the listener's connections is read once; left to
		// follow MaxClients, it keeps the value it started with.
		cfg.MaxConnections = s.cfg.MaxConnections
	}
	cfg = cfg.withDefaults()
	cfg.Logger, cfg.Registerer = s.cfg.Logger, s.cfg.Registerer
	var errs []error
	if len(cfg.Upstreams) == 0 && cfg.Dial == nil && cfg.Upstream == "" {
		errs = append(errs, errors.New("mux: no upstream URL"))
	}
	for i, up := range cfg.Upstreams {
		if up.Dial == nil && up.URL == "" {
			errs = append(errs, fmt.Errorf("mux: upstream %d: no URL", i))
		}
	}
	if fixed := restartOnly(s.cfg, cfg); len(fixed) > 0 {
		errs = append(errs, fmt.Errorf("mux: cannot change without a restart: %s", strings.Join(fixed, ", ")))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var set *nodeSet
	if upstreamsChanged(s.nodesCfg, cfg) {
		var err error
		if set, err = s.newNodeSet(cfg); err != nil {
			return err
		}
	}
	now := time.Now()
	s.mu.Lock()
	if s.stopping || s.supsDone {
		s.mu.Unlock()
		return ErrClosed
	}
	if err := s.core.Reconfigure(s.coreConfig(cfg)); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("mux: %w", err)
	}
	if set == nil {
		s.mu.Unlock()
		return nil
	}
	old := s.set
	s.old = append(s.old, old)
	s.set = set
	if s.runCtx != nil {
		s.startSetLocked(set)
	}
	var e failover.Effects
	s.ups.Use(&e, set.sel, now)
	to := s.upstreamDoneLocked(&e) // with no upstream active, the old list stops at once
	s.mu.Unlock()
	s.upstreamDone(&e, nil, to)
	s.nodesCfg = cfg
	// The per-upstream series now name the new list's upstreams. Outside
	// s.mu: a scrape holds the registry while it reads them under s.mu.
	s.unregisterSet(old)
	s.registerSet(set)
	s.log.Info("upstream list reloaded: connecting to the new list; the old one serves until one is ready", "upstreams", len(set.nodes))
	return nil
}

// upstreamsChanged reports whether b needs another set of upstreams than
// a: another list (URL or headers, order included; an upstream given by a
// Dial function, as tests do, always counts as changed), or other rules to
// dial or judge them.
func upstreamsChanged(a, b Config) bool {
	if a.MaxHeadLag != b.MaxHeadLag || a.HeadTimeout != b.HeadTimeout || a.FailbackAfter != b.FailbackAfter ||
		a.ChainID != b.ChainID || a.PingInterval != b.PingInterval || a.PingTimeout != b.PingTimeout ||
		a.ReconnectInitial != b.ReconnectInitial || a.ReconnectMax != b.ReconnectMax {
		return true
	}
	ups := func(c Config) []Upstream {
		if len(c.Upstreams) == 0 {
			return []Upstream{{URL: c.Upstream, Header: c.UpstreamHeader, Dial: c.Dial}}
		}
		return c.Upstreams
	}
	ua, ub := ups(a), ups(b)
	return !slices.EqualFunc(ua, ub, func(x, y Upstream) bool {
		return x.Dial == nil && y.Dial == nil && x.URL == y.URL && headersEqual(x.Header, y.Header)
	})
}

func headersEqual(a, b http.Header) bool {
	return maps.EqualFunc(a, b, func(x, y []string) bool { return slices.Equal(x, y) })
}

// restartOnly names the fields that differ between a and b and that a
// running Server cannot change: they are read once, by New, a client's
// session or the listeners.
func restartOnly(a, b Config) []string {
	var names []string
	for _, f := range []struct {
		name string
		same bool
	}{
		{"MaxMessageBytes", a.MaxMessageBytes == b.MaxMessageBytes},
		{"OutboundQueueBytes", a.OutboundQueueBytes == b.OutboundQueueBytes},
		{"OutboundQueueBytesTotal", a.OutboundQueueBytesTotal == b.OutboundQueueBytesTotal},
		{"SlowConsumerTimeout", a.SlowConsumerTimeout == b.SlowConsumerTimeout},
		{"ClientPingInterval", a.ClientPingInterval == b.ClientPingInterval},
		{"UpstreamReadLimit", a.UpstreamReadLimit == b.UpstreamReadLimit},
		{"AllowedHosts", slices.Equal(a.AllowedHosts, b.AllowedHosts)},
		{"AllowedOrigins", slices.Equal(a.AllowedOrigins, b.AllowedOrigins)},
		{"MaxHTTPBodyBytes", a.MaxHTTPBodyBytes == b.MaxHTTPBodyBytes},
		{"HTTPReadHeaderTimeout", a.HTTPReadHeaderTimeout == b.HTTPReadHeaderTimeout},
		{"HTTPReadTimeout", a.HTTPReadTimeout == b.HTTPReadTimeout},
		{"HTTPIdleTimeout", a.HTTPIdleTimeout == b.HTTPIdleTimeout},
		{"MaxConnections", a.MaxConnections == b.MaxConnections},
		{"BackfillBlocks", a.BackfillBlocks == b.BackfillBlocks},
		{"HistoryBlocks", a.HistoryBlocks == b.HistoryBlocks},
	} {
		if !f.same {
			names = append(names, f.name)
		}
	}
	return names
}

// eachNodeLocked calls f for every upstream still running: the current
// set's and the old sets'. Caller holds s.mu.
func (s *Server) eachNodeLocked(f func(*upstreamNode)) {
	for _, n := range s.set.nodes {
		f(n)
	}
	for _, set := range s.old {
		for _, n := range set.nodes {
			f(n)
		}
	}
}

// retireLocked stops the upstreams of old sets (a reload replaced them)
// that carry no traffic: every one, once the active connection is not one
// of theirs; the one whose connection drains after the switch, once that
// connection is closed (closeGens, or its loss). Caller holds s.mu.
func (s *Server) retireLocked() {
	kept := s.old[:0]
	for _, set := range s.old {
		if s.up != nil && s.up.node.set == set {
			kept = append(kept, set) // still active: the new list has none ready yet
			continue
		}
		draining := false
		for _, n := range set.nodes {
			n.retiring = true
			if n.conn != nil && n.conn.fc.Demoted() && n.conn.gen() != 0 {
				draining = true
				continue
			}
			if n.stop != nil {
				n.stop()
			}
		}
		if draining {
			kept = append(kept, set)
		}
	}
	clear(s.old[len(kept):])
	s.old = kept
}
