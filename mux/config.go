package mux

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/muxd/muxd/core"
	"github.com/muxd/muxd/reconnect"
)

// Defaults for Config fields left zero.
const (
	DefaultRequestTimeout     = 30 * time.Second
	DefaultMaxBatch           = 1000
	DefaultMaxInFlight        = 5000
	DefaultMaxMessageBytes    = 32 << 20 // geth's WebSocket read limit
	DefaultOutboundQueueBytes = 32 << 20
	// DefaultOutboundQueueBytesTotal bounds what all clients' queues hold
	// past DefaultOutboundQueueBytes together.
	DefaultOutboundQueueBytesTotal = 256 << 20
	DefaultMaxSubscriptions        = 1000
	DefaultMaxWaiting              = 100000
	DefaultMaxClients              = 10000
	DefaultMaxHeldBytes            = 64 << 20
	DefaultMaxHeldBytesTotal       = 1 << 30
	DefaultUpstreamMaxBatch        = 1000
	DefaultUpstreamWait            = 10 * time.Second
	DefaultBackfillBlocks          = 128
	DefaultHistoryBlocks           = 10000
	DefaultCacheBytes              = 64 << 20
	DefaultMaxHeadLag              = 2
	DefaultHeadTimeout             = 60 * time.Second
	DefaultFailbackAfter           = 30 * time.Second
	DefaultClientPingInterval      = 30 * time.Second
	// DefaultSlowConsumerTimeout is geth's own write timeout (rpc,
	// defaultWriteTimeout): how long it lets a write to a client take.
	DefaultSlowConsumerTimeout = 10 * time.Second
	// DefaultMaxUpstreamInFlight bounds the client calls running at the
	// node (core's fair shares, DESIGN §5, which says why 1024).
	DefaultMaxUpstreamInFlight = 1024
)

// DefaultRetryMethods and DefaultDenyMethods are the routing core's (see
// package core).
var (
	DefaultRetryMethods    = core.DefaultRetryMethods
	DefaultDenyMethods     = core.DefaultDenyMethods
	DefaultCoalesceMethods = core.DefaultCoalesceMethods
)

// Config configures a Server. The zero value of every field but Upstream (or
// Dial) means its default.
type Config struct {
	// Upstreams are the nodes, most preferred first. Exactly one is active
	// at a time and carries client traffic; the others are standbys kept
	// connected for failover (see failover.go). Empty: the one upstream
	// given by Upstream, UpstreamHeader and Dial.
	Upstreams []Upstream
	// MaxHeadLag is how many blocks an upstream's head may be behind the
	// best head seen and still be healthy (0: DefaultMaxHeadLag).
	MaxHeadLag int
	// HeadTimeout is how long an upstream may go without a new head and
	// still be healthy (0: DefaultHeadTimeout).
	HeadTimeout time.Duration
	// FailbackAfter is how long the preferred upstream must have been
	// healthy before muxd moves back to it (0: DefaultFailbackAfter;
	// negative: never).
	FailbackAfter time.Duration
	// ChainID, when set, is the chain id (hex quantity, e.g. "0x1") every
	// upstream must report to be used; "": the first one any upstream
	// reports. Only with several upstreams.
	ChainID string

	// Upstream is the node's WebSocket URL (ws:// or wss://), when
	// Upstreams is empty.
	Upstream string
	// UpstreamHeader is sent with the upstream handshake (Authorization…).
	// It is never logged.
	UpstreamHeader http.Header
	// Dial replaces the dialer built from Upstream; tests inject one.
	Dial reconnect.DialFunc
	// UpstreamReadLimit is the largest message accepted from the node
	// (0: reconnect.DefaultReadLimit). A larger one is read and thrown
	// away, and the requests it answered get -32005 (response too large);
	// the connection goes on.
	UpstreamReadLimit int64
	// PingInterval and PingTimeout drive upstream keepalive.
	PingInterval, PingTimeout time.Duration
	// ClientPingInterval is how long a WebSocket client may stay silent
	// before muxd pings it; one that answers neither the ping nor with any
	// frame within another ClientPingInterval is closed (1001 "ping
	// timeout"), as geth does every 30 s: a hung client otherwise keeps
	// its session, its subscriptions and a connection slot for good.
	// 0: DefaultClientPingInterval; negative: never.
	ClientPingInterval time.Duration
	// ReconnectInitial and ReconnectMax bound the jittered exponential
	// backoff between upstream dial attempts (0: 100ms and 2s).
	ReconnectInitial, ReconnectMax time.Duration

	// RequestTimeout bounds each request from arrival to answer.
	RequestTimeout time.Duration
	// UpstreamWait bounds how long a request waits for an upstream to be
	// connected before it gets -32002 "upstream unavailable" (reason: no
	// upstream connected), so that clients fail fast while the node is
	// down. At most RequestTimeout (0: DefaultUpstreamWait).
	UpstreamWait time.Duration
	// RetryMethods are sent again after a reconnect; nil means
	// DefaultRetryMethods, an empty non-nil slice means none.
	RetryMethods []string
	// DenyMethods are patterns of refused methods, matched without regard
	// to ASCII case, '*' standing for any run of characters and '?' for
	// one (see core.CheckDenyPattern); nil means DefaultDenyMethods, an empty
	// non-nil slice means none.
	DenyMethods []string

	// UpstreamMaxBatch is the most elements muxd puts in one array to the
	// node (geth's --rpc.batch-request-limit, 1000 by default): a longer
	// client batch goes as consecutive arrays, each once the previous one
	// is answered.
	UpstreamMaxBatch int

	// Per-client limits.
	MaxBatch        int   // elements in one batch
	MaxInFlight     int   // requests in flight
	MaxMessageBytes int64 // one client message
	// OutboundQueueBytes bounds a client's outbound queue: a push past it
	// makes the client a slow consumer; answers to its own requests may
	// pass it, within OutboundQueueBytesTotal and SlowConsumerTimeout (see
	// outbox).
	OutboundQueueBytes int
	// OutboundQueueBytesTotal bounds what all clients' queues hold past
	// OutboundQueueBytes together: a client whose answer would take them
	// past it is a slow consumer.
	OutboundQueueBytesTotal int
	// SlowConsumerTimeout is how long a client whose queue is past
	// OutboundQueueBytes may take no write before it is a slow consumer
	// (0: DefaultSlowConsumerTimeout).
	SlowConsumerTimeout time.Duration
	MaxSubscriptions    int // live subscriptions
	// MaxHeldBytes bounds the bytes of one client's requests that muxd
	// holds, in flight upstream or waiting for an upstream; past it a
	// request gets -32005. A client holding nothing may always send one.
	MaxHeldBytes int
	// MaxHeldBytesTotal bounds the same for all clients together: many
	// clients may not make muxd hold what one may not.
	MaxHeldBytesTotal int

	// MaxClients bounds concurrent client sessions.
	MaxClients int
	// MaxWaiting bounds requests queued while no upstream is connected.
	MaxWaiting int
	// Clients are the named clients' shares and limits (core.ClientClass),
	// by the name a WebSocket or HTTP client gives in its URL's path or
	// the X-Muxd-Client header (ClientName). Other clients are unnamed.
	Clients map[string]core.ClientClass
	// MaxUpstreamInFlight bounds the client calls running at the node,
	// departed clients' included, each for at most 2 s; past it calls queue per client and go in fair
	// order as slots free (DESIGN §5). 0: DefaultMaxUpstreamInFlight;
	// negative: no bound.
	MaxUpstreamInFlight int

	// AllowedHosts are the Host header values accepted on the --listen
	// address; empty means DefaultAllowedHosts, "*" allows any.
	AllowedHosts []string
	// MaxHTTPBodyBytes bounds an HTTP request body (413 past it).
	MaxHTTPBodyBytes int64

	// AllowedOrigins are host patterns a browser page may come from
	// (WebSocket Origin check); empty allows only same-host pages and
	// clients that send no Origin.
	AllowedOrigins []string

	Logger     *slog.Logger
	Registerer prometheus.Registerer // nil: metrics are kept but not registered

	// Connections on the --listen address (served by NewHTTPServer).

	// HTTPReadHeaderTimeout bounds the wait for a request's headers: on a
	// new connection from its opening, on a keep-alive one from the
	// request's first byte.
	HTTPReadHeaderTimeout time.Duration
	// HTTPReadTimeout bounds reading an HTTP request's body, from the end
	// of its headers (408 and the connection closed past it). WebSocket
	// sessions are not affected.
	HTTPReadTimeout time.Duration
	// HTTPIdleTimeout closes a keep-alive connection idle this long
	// between requests.
	HTTPIdleTimeout time.Duration
	// MaxConnections bounds the connections open on the --listen address,
	// whatever they carry; 0 means MaxClients. At the bound the longest
	// idle keep-alive connection is closed to make room; with none idle, a
	// new connection gets a 503 and is closed.
	MaxConnections int

	// BackfillBlocks is backfill_blocks: after a reconnect or a jump of
	// the node's head, newHeads and logs subscribers get what they missed,
	// at most this many blocks back (see package gapfill). 0 means
	// DefaultBackfillBlocks; negative turns backfill off.
	BackfillBlocks int

	// HistoryBlocks is history_blocks: the most blocks of history a
	// subscription with a fromBlock is served (its range up to the node's
	// head, or its toBlock); a longer one is refused. 0 means
	// DefaultHistoryBlocks; negative refuses every fromBlock subscription.
	HistoryBlocks int

	// SubscriptionGapNotices sends a subscription's clients a
	// muxd_subscriptionGap notification for every gap in it muxd could not
	// close (subscription_gap_notices; off: the wire is the node's).
	SubscriptionGapNotices bool

	// CoalesceMethods are the methods whose identical requests in flight
	// share one upstream call (coalesce_methods); nil means
	// DefaultCoalesceMethods, an empty non-nil slice turns coalescing off
	// (coalesce = false).
	CoalesceMethods []string
	// CacheBytes bounds the cache of answers that cannot change
	// (cache_bytes). 0 means DefaultCacheBytes; negative turns the cache
	// off.
	CacheBytes int

	// noHealthHeads leaves a single upstream without muxd's newHeads
	// health subscription, for tests that count exactly what the node
	// receives; readiness then cannot see heads.
	noHealthHeads bool
}

// Upstream is one node muxd may use.
type Upstream struct {
	// URL is the node's WebSocket URL (ws:// or wss://). It is logged only
	// redacted (reconnect.Redact), and the upstream is otherwise named by
	// its index in Config.Upstreams.
	URL string
	// Header is sent with this upstream's handshake (Authorization…).
	// It is never logged.
	Header http.Header
	// Dial replaces the dialer built from URL; tests inject one.
	Dial reconnect.DialFunc
}

func (c Config) withDefaults() Config {
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.UpstreamWait <= 0 {
		c.UpstreamWait = DefaultUpstreamWait
	}
	c.UpstreamWait = min(c.UpstreamWait, c.RequestTimeout)
	if c.RetryMethods == nil {
		c.RetryMethods = DefaultRetryMethods
	}
	if c.DenyMethods == nil {
		c.DenyMethods = DefaultDenyMethods
	}
	if c.UpstreamReadLimit <= 0 {
		c.UpstreamReadLimit = reconnect.DefaultReadLimit
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.ClientPingInterval == 0 {
		c.ClientPingInterval = DefaultClientPingInterval
	}
	if c.SlowConsumerTimeout <= 0 {
		c.SlowConsumerTimeout = DefaultSlowConsumerTimeout
	}
	if c.OutboundQueueBytes <= 0 {
		c.OutboundQueueBytes = DefaultOutboundQueueBytes
	}
	if c.OutboundQueueBytesTotal <= 0 {
		c.OutboundQueueBytesTotal = DefaultOutboundQueueBytesTotal
	}
	if c.UpstreamMaxBatch <= 0 {
		c.UpstreamMaxBatch = DefaultUpstreamMaxBatch
	}
	if c.MaxHeldBytes <= 0 {
		c.MaxHeldBytes = DefaultMaxHeldBytes
	}
	if c.MaxHeldBytesTotal <= 0 {
		c.MaxHeldBytesTotal = DefaultMaxHeldBytesTotal
	}
	if c.MaxSubscriptions <= 0 {
		c.MaxSubscriptions = DefaultMaxSubscriptions
	}
	if c.MaxClients <= 0 {
		c.MaxClients = DefaultMaxClients
	}
	if c.MaxWaiting <= 0 {
		c.MaxWaiting = DefaultMaxWaiting
	}
	if c.MaxUpstreamInFlight == 0 {
		c.MaxUpstreamInFlight = DefaultMaxUpstreamInFlight
	}
	if len(c.AllowedHosts) == 0 {
		c.AllowedHosts = DefaultAllowedHosts
	}
	if c.MaxHTTPBodyBytes <= 0 {
		c.MaxHTTPBodyBytes = DefaultMaxHTTPBodyBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxHeadLag <= 0 {
		c.MaxHeadLag = DefaultMaxHeadLag
	}
	if c.HeadTimeout <= 0 {
		c.HeadTimeout = DefaultHeadTimeout
	}
	if c.FailbackAfter == 0 {
		c.FailbackAfter = DefaultFailbackAfter
	}
	if c.HTTPReadHeaderTimeout <= 0 {
		c.HTTPReadHeaderTimeout = DefaultHTTPReadHeaderTimeout
	}
	if c.HTTPReadTimeout <= 0 {
		c.HTTPReadTimeout = DefaultHTTPReadTimeout
	}
	if c.HTTPIdleTimeout <= 0 {
		c.HTTPIdleTimeout = DefaultHTTPIdleTimeout
	}
	if c.MaxConnections <= 0 {
		c.MaxConnections = c.MaxClients
	}
	if c.BackfillBlocks == 0 {
		c.BackfillBlocks = DefaultBackfillBlocks
	}
	if c.HistoryBlocks == 0 {
		c.HistoryBlocks = DefaultHistoryBlocks
	}
	if c.CoalesceMethods == nil {
		c.CoalesceMethods = DefaultCoalesceMethods
	}
	if c.CacheBytes == 0 {
		c.CacheBytes = DefaultCacheBytes
	}
	return c
}
