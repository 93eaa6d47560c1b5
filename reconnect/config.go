package reconnect

import (
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Defaults applied by [New] to zero-valued [Config] fields.
const (
	DefaultHealthyAfter = 30 * time.Second
	DefaultPingInterval = 15 * time.Second
	DefaultPingTimeout  = 10 * time.Second
	DefaultDialTimeout  = 10 * time.Second
)

// closeGrace bounds how long Run waits for the close handshake on shutdown before it
// cancels serve's context (which makes coder/websocket drop the connection).
const closeGrace = 2 * time.Second

// Config configures a [Supervisor]. Only Dial is required.
type Config struct {
	// Dial opens one upstream connection, e.g. [WebSocketDialer]. Required.
	Dial DialFunc

	// NewBackOff returns the backoff policy used between dial attempts and before
	// redialling a lost connection; it is called once per Run. nil: exponential with
	// jitter, initial 100ms, max interval 2s, never gives up. If the policy returns
	// backoff.Stop, Run gives up and returns an error.
	NewBackOff func() backoff.BackOff

	// HealthyAfter: a connection that lived at least this long resets the backoff
	// before redialling. <= 0 means DefaultHealthyAfter (30s).
	HealthyAfter time.Duration

	// PingInterval is how long the connection may be quiet (no proof of life,
	// see PingTimeout), or go unheard (no pong and no answer, see
	// PingTimeout), before keepalive sends a ping. A busy connection whose
	// requests are answered is not pinged. 0 means DefaultPingInterval
	// (15s); < 0 disables keepalive.
	PingInterval time.Duration

	// PingTimeout is how long after that ping the connection may still show no
	// progress before it is considered dead and dropped; a silent node is thus
	// dropped PingInterval+PingTimeout after its last sign of life. Progress
	// (proof of life) is any byte read from the node (answers, pushes, pongs,
	// part of a large answer), or a socket write of ours that had to wait for
	// the socket to make room and then completed: a node that reads our
	// backlog, however slowly, is alive even while a ping would wait behind
	// that backlog. With a Dial other than [WebSocketDialer] only pongs count.
	// A connection that shows progress but is not heard (no pong, no answer
	// reported by [Conn.Answered]) for PingTimeout after a ping, while serve is not in the middle of a message
	// ([Conn.Reading]), is dropped too: the node sends (pushes, say) but takes
	// nothing of ours.
	// <= 0 means DefaultPingTimeout (10s).
	PingTimeout time.Duration

	// AnswerWait is how long a node that answers pings (its WebSocket layer
	// does so on its own) may answer no request at all, keepalive's own
	// included, before it is found deaf and dropped: its request handling
	// hangs. A node that runs one connection's requests in order is silent
	// while it runs a long call, begun up to PingInterval after its last
	// answer, so this should be no shorter than the longest a client's call
	// may take plus PingInterval (muxd sets request_timeout +
	// ping_interval). It is judged at the end of a ping round, so up to
	// PingTimeout later. <= 0, or less than PingInterval+PingTimeout, means
	// PingInterval+PingTimeout.
	AnswerWait time.Duration

	// ProbeID is the id (raw JSON, a string) of keepalive's own request,
	// one its caller keeps for it in its upstream id space and routes
	// nowhere (muxd: failover.ProbeID). "" means ProbeID.
	ProbeID string

	// DialTimeout bounds each dial attempt. <= 0 means DefaultDialTimeout (10s).
	DialTimeout time.Duration

	// Logger receives lifecycle logs. nil means slog.Default().
	Logger *slog.Logger

	// OnDialError, if set, is called synchronously from Run's goroutine after each
	// failed dial attempt with the error and the delay before the next attempt
	// (backoff.Stop if Run is about to give up; a [Supervisor.Hurry] may cut the
	// delay short). It must not block for long.
	OnDialError func(err error, next time.Duration)

	// OnDialReached, if set, is called when a dial attempt has reached the node:
	// its connection is open and the WebSocket handshake under way. Only a
	// [WebSocketDialer] tells; it is called at most once per attempt, from the
	// goroutine that opened the connection, and always before that attempt's
	// outcome is reported (OnDialError, or serve called), never after. It must
	// not block for long.
	OnDialReached func()

	// HurryInterval is the longest pause between dial attempts once
	// [Supervisor.Hurry] asks for one: the backoff's longer pauses after a
	// failed dial are cut short while something waits for a connection.
	// The pause after a lost connection is never cut short.
	// <= 0 means DefaultHurryInterval (250ms).
	HurryInterval time.Duration
}

// DefaultHurryInterval is [Config.HurryInterval]'s default: a dial every
// 250 ms while requests wait for the node. A node that is back is found
// within it; one that is still away refuses the connection, which costs it
// nothing.
const DefaultHurryInterval = 250 * time.Millisecond

// Default reconnect backoff: the first retry after about DefaultBackOffInitial,
// doubling (with jitter) up to about DefaultBackOffMax between attempts. The
// max bounds how long muxd may stay away once the node is back (up to 1.5 ×
// it, with jitter), while requests wait upstream_wait (10 s by default) for a
// connection: at 10 s, a node back after a 7 s outage was redialled ~6 s
// later, and requests made meanwhile failed. A refused dial every 2 s costs
// a node nothing.
const (
	DefaultBackOffInitial = 100 * time.Millisecond
	DefaultBackOffMax     = 2 * time.Second
)

// ExponentialBackOff returns a NewBackOff for Config: exponential with
// jitter from initial to max between attempts, never giving up. Zero
// values mean the defaults.
func ExponentialBackOff(initial, max time.Duration) func() backoff.BackOff {
	if initial <= 0 {
		initial = DefaultBackOffInitial
	}
	if max <= 0 {
		max = DefaultBackOffMax
	}
	return func() backoff.BackOff {
		return backoff.NewExponentialBackOff(
			backoff.WithInitialInterval(initial),
			backoff.WithMaxInterval(max),
			backoff.WithMaxElapsedTime(0),
		)
	}
}

func defaultBackOff() backoff.BackOff { return ExponentialBackOff(0, 0)() }

func (cfg Config) withDefaults() Config {
	if cfg.NewBackOff == nil {
		cfg.NewBackOff = defaultBackOff
	}
	if cfg.HealthyAfter <= 0 {
		cfg.HealthyAfter = DefaultHealthyAfter
	}
	if cfg.PingInterval == 0 {
		cfg.PingInterval = DefaultPingInterval
	}
	if cfg.PingTimeout <= 0 {
		cfg.PingTimeout = DefaultPingTimeout
	}
	cfg.AnswerWait = max(cfg.AnswerWait, cfg.PingInterval+cfg.PingTimeout)
	if cfg.ProbeID == "" {
		cfg.ProbeID = ProbeID
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.HurryInterval <= 0 {
		cfg.HurryInterval = DefaultHurryInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}
