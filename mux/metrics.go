package mux

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/muxd/muxd/core"
)

// DropReason says why muxd dropped a message instead of delivering it
// (core.DropReason). Each reason has its own series of muxd_dropped_total.
type DropReason = core.DropReason

// The drop reasons, as package core names them.
const (
	DropUnknownID             = core.DropUnknownID
	DropNullID                = core.DropNullID
	DropUnknownSubscription   = core.DropUnknownSubscription
	DropMalformed             = core.DropMalformed
	DropUnexpected            = core.DropUnexpected
	DropNoUpstream            = core.DropNoUpstream
	DropSubscribeNotification = core.DropSubscribeNotification
	DropIgnoredNotification   = core.DropIgnoredNotification
	DropClientGone            = core.DropClientGone
	numDropReasons            = core.NumDropReasons
)

// Metrics are the Prometheus series of one Server, all prefixed muxd_.
type Metrics struct {
	Clients            *prometheus.GaugeVec   // muxd_clients{transport}
	Requests           *prometheus.CounterVec // muxd_requests_total{method}
	Responses          *prometheus.CounterVec // muxd_responses_total{code}
	Latency            prometheus.Histogram   // muxd_request_duration_seconds
	InFlight           prometheus.Gauge       // muxd_requests_in_flight
	UpstreamConnected  prometheus.Gauge       // muxd_upstream_connected
	UpstreamReconnects prometheus.Counter     // muxd_upstream_reconnects_total
	Failovers          *prometheus.CounterVec // muxd_upstream_failovers_total{reason}
	ChainMismatches    *prometheus.CounterVec // muxd_upstream_chain_mismatch_total{upstream}
	Retried            prometheus.Counter     // muxd_requests_retried_total
	MemoryReclaims     prometheus.Counter     // muxd_memory_reclaims_total
	UpstreamSubs       prometheus.Gauge       // muxd_upstream_subscriptions
	ClientSubs         prometheus.Gauge       // muxd_client_subscriptions
	Pushes             prometheus.Counter     // muxd_pushes_delivered_total
	SlowConsumers      prometheus.Counter     // muxd_slow_consumer_disconnects_total
	QueuedPastBound    prometheus.Gauge       // muxd_outbound_queued_past_bound_bytes
	PingTimeouts       prometheus.Counter     // muxd_client_ping_timeouts_total
	Dropped            *prometheus.CounterVec // muxd_dropped_total{reason}
	LimitHits          *prometheus.CounterVec // muxd_limit_exceeded_total{limit}
	UpstreamFramesOut  prometheus.Counter     // muxd_upstream_frames_sent_total
	UpstreamFramesIn   prometheus.Counter     // muxd_upstream_frames_received_total
	ListenConnections  prometheus.Gauge       // muxd_listen_connections
	BackfilledHeads    prometheus.Counter     // muxd_backfilled_total{kind="newHeads"}
	BackfilledLogs     prometheus.Counter     // muxd_backfilled_total{kind="logs"}
	BackfillGaps       *prometheus.CounterVec // muxd_backfill_gaps_total{kind,reason}
	BackfillDuration   prometheus.Histogram   // muxd_backfill_duration_seconds
	HistoryDelivered   *prometheus.CounterVec // muxd_history_delivered_total{kind}
	HistoryRequests    prometheus.Counter     // muxd_history_requests_total
	HistoryRefused     *prometheus.CounterVec // muxd_history_refused_total{reason}
	Coalesced          *prometheus.CounterVec // muxd_coalesced_total{method}
	CacheHits          *prometheus.CounterVec // muxd_cache_hits_total{method}
	CacheMisses        *prometheus.CounterVec // muxd_cache_misses_total{method}
	CacheEvictions     *prometheus.CounterVec // muxd_cache_evictions_total{method}
	CacheBytes         prometheus.Gauge       // muxd_cache_bytes
	OrphanedCalls      prometheus.Gauge       // muxd_orphaned_calls
	backfilled         *prometheus.CounterVec

	ops *opsMetrics // the series of metrics_ops.go

	dropped            [numDropReasons]prometheus.Counter
	responseOK         prometheus.Counter
	requestsByMethod   map[string]prometheus.Counter // known methods and "other", resolved once
	clientsByTransport map[string]prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Clients: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "muxd_clients", Help: "Connected client sessions by transport.",
		}, []string{"transport"}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "muxd_requests_total", Help: "Client requests (with an id) by method; unknown methods count as \"other\".",
		}, []string{"method"}),
		Responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "muxd_responses_total", Help: "Responses sent to clients by JSON-RPC error code (\"ok\" for results).",
		}, []string{"code"}),
		Latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "muxd_request_duration_seconds", Help: "Time from a request's arrival to its answer being queued for the client.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "muxd_requests_in_flight", Help: "Requests sent upstream or waiting for an upstream, not yet answered.",
		}),
		UpstreamConnected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "muxd_upstream_connected", Help: "1 while an upstream connection is active (carries client traffic).",
		}),
		UpstreamReconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "muxd_upstream_reconnects_total", Help: "Upstream connections made after each upstream's first.",
		}),
		Failovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "muxd_upstream_failovers_total", Help: "Changes of the active upstream by reason: lost, lagging, stalled, failback.",
		}, []string{"reason"}),
		ChainMismatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "muxd_upstream_chain_mismatch_total", Help: "Connections of an upstream (by index) that reported another chain id than the others, or none; such an upstream is not used.",
		}, []string{"upstream"}),
		MemoryReclaims: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "muxd_memory_reclaims_total", Help: "Times muxd handed a large release of memory back to the OS at once.",
		}),
		Retried: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "muxd_requests_retried_total", Help: "Requests sent again on a new upstream connection after the old one was lost.",
		}),
		UpstreamSubs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "muxd_upstream_subscriptions", Help: "Live subscriptions on the upstream (shared by identical client subscriptions).",
		}),
		ClientSubs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "muxd_client_subscriptions", Help: "Subscriptions held by clients.",
		}),
		Pushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "muxd_pushes_delivered_total", Help: "eth_subscription notifications queued for clients.",
		}),
		SlowConsumers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "muxd_slow_consumer_disconnects_total", Help: "Clients disconnected as slow consumers: a push past outbound_queue_bytes, an answer past outbound_queue_bytes_total, or nothing taken for slow_consumer_timeout while past outbound_queue_bytes.",
		}),
		QueuedPastBound: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "muxd_outbound_queued_past_bound_bytes", Help: "Bytes clients' outbound queues hold past outbound_queue_bytes, all together (bounded by outbound_queue_bytes_total).",
		}),
		PingTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "muxd_client_ping_timeouts_total", Help: "WebSocket clients closed for answering no ping (client_ping_interval).",
		}),
		Dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "muxd_dropped_total", Help: "Messages dropped instead of delivered, by reason.",
		}, []string{"reason"}),
		LimitHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "muxd_limit_exceeded_total", Help: "Requests refused with -32005 by limit.",
		}, []string{"limit"}),
		UpstreamFramesOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "muxd_upstream_frames_sent_total", Help: "Frames written to the upstream.",
		}),
		UpstreamFramesIn: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "muxd_upstream_frames_received_total", Help: "Frames read from the upstream.",
		}),
		ListenConnections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "muxd_listen_connections", Help: "Connections open on the --listen address: WebSocket sessions, HTTP exchanges, idle keep-alive connections and connections still sending a request.",
		}),
	}
	m.backfilled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "muxd_backfilled_total", Help: "Pushes delivered to a subscription key that the node did not push on its own (heads and logs backfilled after a reconnect or a head jump, logs replayed with removed:true), by kind.",
	}, []string{"kind"})
	m.BackfilledHeads = m.backfilled.WithLabelValues("newHeads")
	m.BackfilledLogs = m.backfilled.WithLabelValues("logs")
	m.BackfillGaps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "muxd_backfill_gaps_total", Help: "Subscription gaps that were not closed, by subscription kind and reason.",
	}, []string{"kind", "reason"})
	m.BackfillDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "muxd_backfill_duration_seconds", Help: "Time from a gap being found to its backfill being delivered.",
		Buckets: []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	})
	m.HistoryDelivered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "muxd_history_delivered_total", Help: "Logs and heads of history that muxd fetched and delivered to subscriptions with a fromBlock (logs sent again removed:true included), by kind.",
	}, []string{"kind"})
	m.HistoryRequests = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "muxd_history_requests_total", Help: "Requests muxd sent upstream for subscriptions with a fromBlock: the checks before the answer, and the history's own.",
	})
	m.HistoryRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "muxd_history_refused_total", Help: "Subscriptions with a fromBlock refused, by reason: too_long (past history_blocks), above_head, malformed, node_error, no_upstream.",
	}, []string{"reason"})
	m.Coalesced = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "muxd_coalesced_total", Help: "Requests that joined an identical call in flight on the upstream instead of being sent, by method.",
	}, []string{"method"})
	m.CacheHits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "muxd_cache_hits_total", Help: "Requests answered from the cache of answers that cannot change, by method.",
	}, []string{"method"})
	m.CacheMisses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "muxd_cache_misses_total", Help: "Cacheable requests the cache did not hold, by method.",
	}, []string{"method"})
	m.CacheEvictions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "muxd_cache_evictions_total", Help: "Cache entries evicted, by method: past the size bound, made suspect by a reorg, or with the upstream connection lost.",
	}, []string{"method"})
	m.CacheBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "muxd_cache_bytes", Help: "Bytes held by the cache of answers that cannot change.",
	})
	m.OrphanedCalls = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "muxd_orphaned_calls", Help: "Calls still running at the node whose client left before the answer (JSON-RPC cannot cancel a call); they go when answered, at their deadline, or when the connection is lost or switched away from.",
	})
	for r := DropReason(0); r < numDropReasons; r++ {
		m.dropped[r] = m.Dropped.WithLabelValues(r.String())
	}
	m.ops = newOpsMetrics()
	m.responseOK = m.Responses.WithLabelValues("ok")
	m.requestsByMethod = map[string]prometheus.Counter{"other": m.Requests.WithLabelValues("other")}
	for name := range core.KnownMethods {
		m.requestsByMethod[name] = m.Requests.WithLabelValues(name)
	}
	m.clientsByTransport = map[string]prometheus.Gauge{}
	for _, t := range []string{"ws", "http", "ipc"} {
		m.clientsByTransport[t] = m.Clients.WithLabelValues(t)
	}
	if reg != nil {
		reg.MustRegister(m.Clients, m.Requests, m.Responses, m.Latency, m.InFlight,
			m.UpstreamConnected, m.UpstreamReconnects, m.Failovers, m.ChainMismatches, m.Retried, m.MemoryReclaims, m.UpstreamSubs, m.ClientSubs,
			m.Pushes, m.SlowConsumers, m.QueuedPastBound, m.PingTimeouts, m.Dropped, m.LimitHits, m.UpstreamFramesOut, m.UpstreamFramesIn,
			m.ListenConnections, m.backfilled, m.BackfillGaps, m.BackfillDuration,
			m.HistoryDelivered, m.HistoryRequests, m.HistoryRefused,
			m.Coalesced, m.CacheHits, m.CacheMisses, m.CacheEvictions, m.CacheBytes, m.OrphanedCalls)
	}
	return m
}

func (m *Metrics) drop(r DropReason) { m.dropped[r].Inc() }

// request counts one request under its method's series.
func (m *Metrics) request(method string) {
	c, ok := m.requestsByMethod[method]
	if !ok {
		c = m.requestsByMethod["other"]
	}
	c.Inc()
}

func (m *Metrics) response(code int) {
	if code == 0 {
		m.responseOK.Inc()
		return
	}
	// The node chooses error codes: only JSON-RPC's reserved range and
	// geth's execution-reverted code 3 get series of their own.
	if (code < -32768 || code > -32000) && code != 3 {
		m.Responses.WithLabelValues("other").Inc()
		return
	}
	m.Responses.WithLabelValues(strconv.Itoa(code)).Inc()
}

func (m *Metrics) limit(name string) { m.LimitHits.WithLabelValues(name).Inc() }

// observer counts what the routing core does (core.Observer) in the
// Metrics. The core calls it with the server's lock held: every method is
// an atomic update of a series resolved in advance, or one label lookup.
// s is the server, for what names an upstream (RoundTrip).
type observer struct {
	m *Metrics
	s *Server
}

func (o observer) Request(method string) { o.m.request(method) }
func (o observer) Answered(method string, code int, out core.Outcome, latency time.Duration) {
	o.m.response(code)
	if latency >= 0 {
		o.m.Latency.Observe(latency.Seconds())
	}
	o.m.ops.answered(method, out, latency)
}
func (o observer) Limit(name string)                { o.m.limit(name) }
func (o observer) Dropped(r core.DropReason)        { o.m.drop(r) }
func (o observer) InFlight(delta int)               { o.m.InFlight.Add(float64(delta)) }
func (o observer) Retried(n int)                    { o.m.Retried.Add(float64(n)) }
func (o observer) Pushed(n int)                     { o.m.Pushes.Add(float64(n)) }
func (o observer) BackfillDuration(d time.Duration) { o.m.BackfillDuration.Observe(d.Seconds()) }
func (o observer) Coalesced(method string)          { o.m.Coalesced.WithLabelValues(method).Inc() }
func (o observer) CacheHit(method string)           { o.m.CacheHits.WithLabelValues(method).Inc() }
func (o observer) CacheMiss(method string)          { o.m.CacheMisses.WithLabelValues(method).Inc() }
func (o observer) CacheEvicted(method string)       { o.m.CacheEvictions.WithLabelValues(method).Inc() }
func (o observer) CacheBytes(n int)                 { o.m.CacheBytes.Set(float64(n)) }
func (o observer) Orphaned(n int)                   { o.m.OrphanedCalls.Set(float64(n)) }
func (o observer) HistoryDelivered(kind string, n int) {
	o.m.HistoryDelivered.WithLabelValues(kind).Add(float64(n))
}
func (o observer) HistoryRequests(n int)        { o.m.HistoryRequests.Add(float64(n)) }
func (o observer) HistoryRefused(reason string) { o.m.HistoryRefused.WithLabelValues(reason).Inc() }
func (o observer) BackfillGap(kind, reason string) {
	o.m.BackfillGaps.WithLabelValues(kind, reason).Inc()
}
func (o observer) Subscriptions(upstream, clients int) {
	o.m.UpstreamSubs.Set(float64(upstream))
	o.m.ClientSubs.Set(float64(clients))
}
func (o observer) Backfilled(kind string, n int) {
	switch kind {
	case "newHeads":
		o.m.BackfilledHeads.Add(float64(n))
	case "logs":
		o.m.BackfilledLogs.Add(float64(n))
	default:
		o.m.backfilled.WithLabelValues(kind).Add(float64(n))
	}
}

// NewBuildInfo returns muxd_build_info, a gauge that is always 1 and whose
// labels identify the running binary: version (a release tag such as
// v1.2.3, a module pseudo-version, or "(devel)"), revision (the commit
// hash, "-dirty" for a modified tree; "unknown" when the binary does not
// know it) and go_version. It belongs to the process, not to a Server:
// the caller registers it next to the Go and process collectors.
func NewBuildInfo(version, revision, goVersion string) prometheus.Collector {
	if revision == "" {
		revision = "unknown"
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "muxd_build_info",
		Help:        "Always 1; the labels say which build of muxd is running.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "go_version": goVersion},
	})
	g.Set(1)
	return g
}
