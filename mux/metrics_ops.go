package mux

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/muxd/muxd/core"
	"github.com/muxd/muxd/failover"
)

// This file holds the series for running muxd as a service among others:
// latency by method and outcome, each upstream's round trip
// and head lag, push delivery lag, queue depths and backfills running.
// They are kept apart from Metrics' first series (metrics.go).

// opsMetrics are the series of this file that are updated as things
// happen; the rest are read off the server when scraped (opsGauges).
type opsMetrics struct {
	// byMethod is muxd_request_duration_by_method_seconds{method,outcome};
	// methods holds each method's series per outcome, resolved on first
	// use. Only the core's observer touches methods, with Server.mu held.
	byMethod *prometheus.HistogramVec
	methods  map[string]*[core.NumOutcomes]prometheus.Observer
	// roundTrip is muxd_upstream_round_trip_seconds{upstream}; each
	// upstream holds its own series (upstreamNode.rtt).
	roundTrip *prometheus.HistogramVec
	pushLag   prometheus.Histogram // muxd_push_delivery_lag_seconds
}

// latencyBuckets are the buckets of the request latency histograms.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

func newOpsMetrics() *opsMetrics {
	return &opsMetrics{
		byMethod: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "muxd_request_duration_by_method_seconds",
			Help:    "Time from a request's arrival to its answer being queued, by method (the methods muxd knows, else \"other\") and outcome: result, error (the node's), cache, timeout, unavailable, refused (by muxd).",
			Buckets: latencyBuckets,
		}, []string{"method", "outcome"}),
		methods: map[string]*[core.NumOutcomes]prometheus.Observer{},
		roundTrip: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "muxd_upstream_round_trip_seconds",
			Help:    "Time an upstream (by its number in the configuration) took to answer a single request muxd sent it: a client's call or muxd's own.",
			Buckets: latencyBuckets,
		}, []string{"upstream"}),
		pushLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "muxd_push_delivery_lag_seconds",
			Help:    "Time from a subscription push read from the node to its copy queued for the last of its subscribers.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
	}
}

// answered observes one answer's latency by method and outcome.
func (o *opsMetrics) answered(method string, out core.Outcome, latency time.Duration) {
	if out >= core.NumOutcomes {
		return
	}
	series, ok := o.methods[method]
	if !ok {
		if _, known := core.KnownMethods[method]; !known {
			method = "other"
		}
		if series, ok = o.methods[method]; !ok {
			series = new([core.NumOutcomes]prometheus.Observer)
			o.methods[method] = series
		}
	}
	h := series[out]
	if h == nil {
		h = o.byMethod.WithLabelValues(method, out.String())
		series[out] = h
	}
	h.Observe(max(latency, 0).Seconds())
}

// RoundTrip counts how long connection gen took to answer a single
// request, under its upstream's number (core.Observer).
func (o observer) RoundTrip(gen uint64, d time.Duration) {
	for _, n := range o.s.set.nodes {
		if n.conn != nil && n.conn.gen() == gen {
			n.rtt.Observe(d.Seconds())
			return
		}
	}
}

// opsSeries registers the series of this file for srv's upstreams, and
// makes the label values dashboards and alerts look for exist from the
// start, at 0.
func (s *Server) opsSeries(reg prometheus.Registerer) {
	o := s.metrics.ops
	m := s.metrics
	for _, r := range failover.Reasons() {
		if r != failover.ReasonFirst {
			m.Failovers.WithLabelValues(r.String())
		}
	}
	for _, l := range limitNames {
		m.LimitHits.WithLabelValues(l)
	}
	for _, kind := range []string{"newHeads", "logs"} {
		for _, reason := range gapReasons {
			m.BackfillGaps.WithLabelValues(kind, reason)
		}
	}
	for _, method := range s.cfg.CoalesceMethods {
		m.Coalesced.WithLabelValues(method)
	}
	if s.cfg.CacheBytes > 0 {
		for _, method := range core.CacheMethods {
			m.CacheHits.WithLabelValues(method)
			m.CacheMisses.WithLabelValues(method)
			m.CacheEvictions.WithLabelValues(method)
		}
	}
	if reg == nil {
		return
	}
	reg.MustRegister(o.byMethod, o.roundTrip, o.pushLag)
	reg.MustRegister(s.opsGauges()...)
}

// limitNames are the label values of muxd_limit_exceeded_total.
var limitNames = []string{
	"batch_size", "in_flight", "held_bytes", "held_bytes_total", "message_size", "subscriptions",
	"upstream_read", "waiting", "clients", "http_body", "connections", "idle_connections", "http_read_timeout",
}

// gapReasons are the reasons of muxd_backfill_gaps_total (package
// gapfill's, and the core's for kinds that cannot be backfilled).
var gapReasons = []string{
	"too_long", "failed", "unavailable", "timeout", "too_many_held", "reorg_too_deep", "late", "not_backfillable", "disabled",
}

// opsGauges are the server-wide series of this file, read off the server
// when scraped.
func (s *Server) opsGauges() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "muxd_backfills_running", Help: "Backfills running: subscription keys whose missed heads or logs are being fetched.",
		}, func() float64 {
			s.mu.Lock()
			defer s.mu.Unlock()
			return float64(s.core.Stats().Backfills)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "muxd_outbound_queued_bytes", Help: "Bytes queued for clients or being written to them, all clients together.",
		}, func() float64 { total, _ := s.queuedBytes(); return float64(total) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "muxd_outbound_queue_max_bytes", Help: "Bytes queued for the one client with the most queued (a slow consumer shows here first).",
		}, func() float64 { _, most := s.queuedBytes(); return float64(most) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "muxd_fanout_queue_length", Help: "Large fan-outs of pushes the upstream reader handed on and that are not yet queued for their subscribers.",
		}, func() float64 { return float64(len(s.fanout.jobs)) }),
	}
}

// opsNodeGauges are the per-upstream series of this file for set, read off
// its selector and connections when scraped; registered while set is in
// force (registerSet).
func (s *Server) opsNodeGauges(set *nodeSet) []prometheus.Collector {
	var cs []prometheus.Collector
	series := []struct {
		name, help string
		value      func(st failover.Status, now time.Time) float64
	}{
		{"muxd_upstream_node_head_lag_blocks", "How many blocks this upstream's head is behind the best head of the upstreams on the chain (0 with one upstream).",
			func(st failover.Status, _ time.Time) float64 {
				if !st.HasHead || st.Best <= st.Head {
					return 0
				}
				return float64(st.Best - st.Head)
			}},
		{"muxd_upstream_node_head_lag_seconds", "How long this upstream has been behind the best head: since a head above its own was first seen (0 while it is level).",
			func(st failover.Status, now time.Time) float64 { return sinceOr0(st.BehindSince, now) }},
		{"muxd_upstream_node_head_age_seconds", "Time since this upstream's last new head (since its connection while it has none; 0 while disconnected).",
			func(st failover.Status, now time.Time) float64 {
				switch {
				case !st.Connected:
					return 0
				case st.HeadAt.After(st.ConnectedAt):
					return sinceOr0(st.HeadAt, now)
				}
				return sinceOr0(st.ConnectedAt, now)
			}},
	}
	for _, n := range set.nodes {
		for _, g := range series {
			cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: g.name, Help: g.help, ConstLabels: prometheus.Labels{"upstream": n.label},
			}, func() float64 {
				now := time.Now()
				s.mu.Lock()
				st := set.sel.Status(n.index, now)
				s.mu.Unlock()
				return g.value(st, now)
			}))
		}
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "muxd_upstream_send_queue_bytes", Help: "Bytes queued to be written to this upstream or being written (clients' requests and muxd's own).", ConstLabels: prometheus.Labels{"upstream": n.label},
		}, func() float64 {
			s.mu.Lock()
			u := n.conn
			s.mu.Unlock()
			if u == nil {
				return 0
			}
			return float64(u.sq.queued())
		}))
	}
	return cs
}

// sinceOr0 is the seconds from t to now, 0 for a zero t.
func sinceOr0(t, now time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return max(now.Sub(t), 0).Seconds()
}

// queuedBytes returns what all clients' queues hold, and the most one
// holds. It walks the sessions.
func (s *Server) queuedBytes() (total, most int) {
	s.peersMu.RLock()
	defer s.peersMu.RUnlock()
	for _, c := range s.peers {
		n := c.out.queued()
		total += n
		most = max(most, n)
	}
	return total, most
}

// queued is what q holds: queued or being written.
func (q *outbox) queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.bytes
}

// queued is what q holds: queued or being written.
func (q *sendQueue) queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.buf) + q.writingQueued
}
