package mux

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/muxd/muxd/core"
)

// This file holds the series of the bound on client calls at the node and
// its fair shares (core's fairshare.go, DESIGN §5).

// newFairWait returns muxd_fair_queue_wait_seconds.
func newFairWait() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "muxd_fair_queue_wait_seconds",
		Help:    "Time a client call (or batch) waited in its client's queue for a slot under max_upstream_in_flight before going to the node; calls sent as they arrived are not counted.",
		Buckets: latencyBuckets,
	})
}

// FairQueued counts one call's wait for a slot (core.Observer).
func (o observer) FairQueued(wait time.Duration) { o.m.ops.fairWait.Observe(max(wait, 0).Seconds()) }

// fairGauges are the gauges of this file, read off the core when scraped.
func (s *Server) fairGauges() []prometheus.Collector {
	stat := s.coreStat
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "muxd_upstream_calls_in_flight", Help: "Client calls running at the node, counted against max_upstream_in_flight: calls sent and not yet answered or timed out, and calls of departed clients (0 with the bound off).",
		}, stat(func(st core.Stats) int { return st.UpstreamInFlight })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "muxd_fair_queued_calls", Help: "Client calls queued for a slot under max_upstream_in_flight (a batch counts its elements).",
		}, stat(func(st core.Stats) int { return st.FairQueued })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "muxd_fair_queued_clients", Help: "Clients with calls queued for a slot under max_upstream_in_flight.",
		}, stat(func(st core.Stats) int { return st.FairQueuedClients })),
	}
}

// namedCollector is muxd_client_sessions{client} and
// muxd_client_in_flight{client}: one series per name configured in
// [clients] (Config.Clients) and "default" for every other session, read
// off the core when scraped. Names come from the configuration only, never
// from what clients send, so the series stay bounded; a reload that drops
// a name drops its series.
type namedCollector struct {
	s                  *Server
	sessions, inFlight *prometheus.Desc
}

func newNamedCollector(s *Server) *namedCollector {
	return &namedCollector{
		s: s,
		sessions: prometheus.NewDesc("muxd_client_sessions",
			"Sessions by client name: the names configured in [clients], and default for the rest (unnamed, or a name not configured).", []string{"client"}, nil),
		inFlight: prometheus.NewDesc("muxd_client_in_flight",
			"Requests in flight by client name (as muxd_client_sessions): sent upstream, queued for a slot or waiting for an upstream.", []string{"client"}, nil),
	}
}

func (n *namedCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- n.sessions
	ch <- n.inFlight
}

func (n *namedCollector) Collect(ch chan<- prometheus.Metric) {
	n.s.mu.Lock()
	st := n.s.core.Stats()
	named := n.s.core.NamedStats(nil)
	n.s.mu.Unlock()
	sessions, inFlight := st.Clients, st.InFlight
	for _, ns := range named {
		sessions -= ns.Sessions
		inFlight -= ns.InFlight
		ch <- prometheus.MustNewConstMetric(n.sessions, prometheus.GaugeValue, float64(ns.Sessions), ns.Name)
		ch <- prometheus.MustNewConstMetric(n.inFlight, prometheus.GaugeValue, float64(ns.InFlight), ns.Name)
	}
	ch <- prometheus.MustNewConstMetric(n.sessions, prometheus.GaugeValue, float64(sessions), "default")
	ch <- prometheus.MustNewConstMetric(n.inFlight, prometheus.GaugeValue, float64(inFlight), "default")
}

// newThrottled returns muxd_upstream_throttled_total{upstream}.
func newThrottled() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "muxd_upstream_throttled_total",
		Help: "Answers of an upstream (by its number in the configuration) saying it limits the request rate: codes 429 and -32029, -32005 other than a result-size or range limit, or a message naming a rate limit; passed on to the client as the node wrote them.",
	}, []string{"upstream"})
}

// Throttled counts a throttling answer under its upstream's number
// (core.Observer).
func (o observer) Throttled(gen uint64) {
	for _, n := range o.s.set.nodes {
		if n.conn != nil && n.conn.gen() == gen {
			o.m.ops.throttled.WithLabelValues(n.label).Inc()
			return
		}
	}
}
