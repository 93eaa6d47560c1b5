package mux

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// DropReason says why muxd dropped a message from the upstream instead of
// delivering it. Each reason has its own series of muxd_dropped_total.
type DropReason uint8

const (
	DropUnknownID             DropReason = iota // response id matches no pending request (late, duplicate, foreign)
	DropNullID                                  // response with id null: a protocol error from the node
	DropUnknownSubscription                     // push for a subscription nobody holds
	DropMalformed                               // upstream frame that is not valid JSON
	DropUnexpected                              // upstream message that is neither a response nor a push
	DropNoUpstream                              // client notification while no upstream is connected
	DropSubscribeNotification                   // client eth_subscribe/eth_unsubscribe sent without an id
	numDropReasons
)

func (r DropReason) String() string {
	switch r {
	case DropUnknownID:
		return "unknown_id"
	case DropNullID:
		return "null_id"
	case DropUnknownSubscription:
		return "unknown_subscription"
	case DropMalformed:
		return "malformed"
	case DropUnexpected:
		return "unexpected"
	case DropNoUpstream:
		return "no_upstream"
	case DropSubscribeNotification:
		return "subscribe_notification"
	}
	return "reason_" + strconv.Itoa(int(r))
}

// knownMethods bounds the method label: anything else counts as "other", so
// a client sending random method names cannot grow the series without end.
// It maps each name to itself, so that dispatch can look a method up by its
// raw bytes and share one string instead of allocating one per request.
var knownMethods = func() map[string]string {
	m := map[string]string{}
	for _, s := range []string{
		"eth_accounts", "eth_blobBaseFee", "eth_blockNumber", "eth_call", "eth_chainId",
		"eth_createAccessList", "eth_estimateGas", "eth_feeHistory", "eth_gasPrice",
		"eth_getBalance", "eth_getBlockByHash", "eth_getBlockByNumber", "eth_getBlockReceipts",
		"eth_getBlockTransactionCountByHash", "eth_getBlockTransactionCountByNumber",
		"eth_getCode", "eth_getFilterChanges", "eth_getFilterLogs", "eth_getLogs", "eth_getProof",
		"eth_getStorageAt", "eth_getTransactionByBlockHashAndIndex",
		"eth_getTransactionByBlockNumberAndIndex", "eth_getTransactionByHash",
		"eth_getTransactionCount", "eth_getTransactionReceipt", "eth_getUncleByBlockHashAndIndex",
		"eth_getUncleByBlockNumberAndIndex", "eth_getUncleCountByBlockHash",
		"eth_getUncleCountByBlockNumber", "eth_maxPriorityFeePerGas", "eth_newBlockFilter",
		"eth_newFilter", "eth_newPendingTransactionFilter", "eth_sendRawTransaction",
		"eth_sendTransaction", "eth_sign", "eth_signTransaction", "eth_simulateV1",
		"eth_subscribe", "eth_syncing", "eth_uninstallFilter", "eth_unsubscribe",
		"net_listening", "net_peerCount", "net_version", "web3_clientVersion", "web3_sha3",
		"txpool_content", "txpool_inspect", "txpool_status",
		"debug_traceBlockByHash", "debug_traceBlockByNumber", "debug_traceCall",
		"debug_traceTransaction", "trace_block", "trace_call", "trace_filter",
		"trace_replayTransaction", "trace_transaction",
	} {
		m[s] = s
	}
	return m
}()

// Metrics are the Prometheus series of one Server, all prefixed muxd_.
type Metrics struct {
	Clients            *prometheus.GaugeVec   // muxd_clients{transport}
	Requests           *prometheus.CounterVec // muxd_requests_total{method}
	Responses          *prometheus.CounterVec // muxd_responses_total{code}
	Latency            prometheus.Histogram   // muxd_request_duration_seconds
	InFlight           prometheus.Gauge       // muxd_requests_in_flight
	UpstreamConnected  prometheus.Gauge       // muxd_upstream_connected
	UpstreamReconnects prometheus.Counter     // muxd_upstream_reconnects_total
	Retried            prometheus.Counter     // muxd_requests_retried_total
	MemoryReclaims     prometheus.Counter     // muxd_memory_reclaims_total
	UpstreamSubs       prometheus.Gauge       // muxd_upstream_subscriptions
	ClientSubs         prometheus.Gauge       // muxd_client_subscriptions
	Pushes             prometheus.Counter     // muxd_pushes_delivered_total
	SlowConsumers      prometheus.Counter     // muxd_slow_consumer_disconnects_total
	Dropped            *prometheus.CounterVec // muxd_dropped_total{reason}
	LimitHits          *prometheus.CounterVec // muxd_limit_exceeded_total{limit}
	UpstreamFramesOut  prometheus.Counter     // muxd_upstream_frames_sent_total
	UpstreamFramesIn   prometheus.Counter     // muxd_upstream_frames_received_total
	ListenConnections  prometheus.Gauge       // muxd_listen_connections
	BackfilledHeads    prometheus.Counter     // muxd_backfilled_total{kind="newHeads"}
	BackfilledLogs     prometheus.Counter     // muxd_backfilled_total{kind="logs"}
	BackfillGaps       *prometheus.CounterVec // muxd_backfill_gaps_total{kind,reason}
	BackfillDuration   prometheus.Histogram   // muxd_backfill_duration_seconds
	backfilled         *prometheus.CounterVec

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
			Name: "muxd_upstream_connected", Help: "1 while the upstream WebSocket is connected.",
		}),
		UpstreamReconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "muxd_upstream_reconnects_total", Help: "Upstream connections made after the first.",
		}),
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
			Name: "muxd_slow_consumer_disconnects_total", Help: "Clients disconnected because their outbound queue overflowed.",
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
	for r := DropReason(0); r < numDropReasons; r++ {
		m.dropped[r] = m.Dropped.WithLabelValues(r.String())
	}
	m.responseOK = m.Responses.WithLabelValues("ok")
	m.requestsByMethod = map[string]prometheus.Counter{"other": m.Requests.WithLabelValues("other")}
	for name := range knownMethods {
		m.requestsByMethod[name] = m.Requests.WithLabelValues(name)
	}
	m.clientsByTransport = map[string]prometheus.Gauge{}
	for _, t := range []string{"ws", "http", "ipc"} {
		m.clientsByTransport[t] = m.Clients.WithLabelValues(t)
	}
	if reg != nil {
		reg.MustRegister(m.Clients, m.Requests, m.Responses, m.Latency, m.InFlight,
			m.UpstreamConnected, m.UpstreamReconnects, m.Retried, m.MemoryReclaims, m.UpstreamSubs, m.ClientSubs,
			m.Pushes, m.SlowConsumers, m.Dropped, m.LimitHits, m.UpstreamFramesOut, m.UpstreamFramesIn,
			m.ListenConnections, m.backfilled, m.BackfillGaps, m.BackfillDuration)
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

// DroppedCount returns how many messages were dropped for reason r.
func (m *Metrics) DroppedCount(r DropReason) float64 {
	return counterValue(m.dropped[r])
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

// counterValue reads a counter or gauge, for tests and status output.
func counterValue(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	return 0
}
