package core

import (
	"time"

	"github.com/muxd/muxd/router"
)

// Effects is what the shell must do after one event, like the Ready of
// etcd-io/raft: the core has already changed its state as if they were
// done. The caller owns the Effects it passes to an event; the core resets
// it and fills it in, and the shell applies it, in this order:
//
//  1. Deliveries: queue each message for its client. Each carries the
//     client's sequence number, so that deliveries of different events,
//     applied by different goroutines, still reach a client in the order
//     the core produced them.
//  2. Slow: disconnect these clients as slow consumers.
//  3. Upstream: write these frames, in order, on connection Gen (when it
//     is still the current one).
//  4. Close: close these connections (drained, see UpstreamSwitch).
//  5. Notes: log them (drops at most once a second per reason).
//
// The slices are reused by the next event given the same Effects: a shell
// must be done with them by then.
type Effects struct {
	Deliveries []Delivery
	Slow       []router.ClientID
	Gen        uint64   // the connection Upstream is for
	Upstream   [][]byte // frames to write upstream, in order
	Notes      []Note
	// Head is the number of the newHeads push this event routed to
	// clients from the current connection (0: none), with
	// Config.ReportHeads.
	Head uint64
	// Close lists connections the shell should close: one muxd switched
	// away from that owes nothing more (UpstreamSwitch).
	Close []uint64
	// Idle is set when the core is shutting down and, after this event,
	// owes no client an answer.
	Idle bool
	// Released is how many bytes of large requests (1 MiB or more each)
	// this event let go of: the shell may hand that memory back to the
	// OS. A departing client's held bytes are not in it (see Core.Held).
	Released int
}

// Reset empties e for the next event, keeping its memory.
func (e *Effects) Reset() {
	clear(e.Deliveries)
	e.Deliveries = e.Deliveries[:0]
	e.Slow = e.Slow[:0]
	e.Gen = 0
	clear(e.Upstream)
	e.Upstream = e.Upstream[:0]
	clear(e.Notes)
	e.Notes = e.Notes[:0]
	e.Close = e.Close[:0]
	e.Head = 0
	e.Idle = false
	e.Released = 0
}

// Delivery is one message for a client.
//
// When ID is nil the message is Msg. Otherwise it is Msg with the bytes at
// At replaced by ID (the client's own id, or its subscription id for a
// push): the shell, or the client's writer, makes that splice, outside any
// lock. A push fanned out to many subscribers is one Msg shared by all of
// their deliveries, each with its own ID.
//
// Borrowed says Msg lies in the frame the event was given (the upstream
// reader's buffer), at offset Off: the shell must copy it, or take the
// buffer with it, before that buffer is used again. Shared says Msg is one
// push shared by several deliveries of the event, each with its own ID: a
// shell copies a borrowed one once for all of them. Lendable says this
// delivery is the only one that borrows from the frame, so the shell may
// hand the client the whole buffer instead of a copy.
type Delivery struct {
	Client   router.ClientID
	Seq      uint64 // the client's deliveries, counted from 1
	Msg      []byte
	At       router.Span
	ID       []byte
	Borrowed bool
	Shared   bool
	Lendable bool
	Off      int
	// Push says Msg is a subscription push, which the client did not ask
	// for one by one, rather than an answer to one of its requests: the
	// shell bounds what it queues of those more tightly.
	Push bool
	// Arena, when set, is the buffer Msg lies in, no longer the core's:
	// the shell may reuse it (Config.Arenas) once Msg is written, and
	// must not before.
	Arena []byte
}

// Note is a line for the log: Msg with slog-style key/value Args, at level
// Info when Info is set and Warn otherwise. Drop is set for a dropped
// message, of reason Reason (the shell limits how often those are logged).
// Limited names a warning a client can cause at will, such as the node
// refusing its subscription (NotLimited for every other line): the shell
// logs at most one line of each per second, so that no client can flood
// the log with it.
type Note struct {
	Info    bool
	Drop    bool
	Limited LimitedNote
	Reason  DropReason
	Msg     string
	Args    []any
}

// LimitedNote names a kind of warning a client can cause at will (Note).
type LimitedNote uint8

const (
	NotLimited                 LimitedNote = iota
	LimitedSubscriptionRefused             // the node refused a subscription whose params a client chose
	LimitedSubscriptionIDInUse             // the node gave a new subscription the id of another live one
	NumLimitedNotes
)

// Outcome is how a client's request was answered, for metrics.
type Outcome uint8

// The outcomes of Observer.Answered.
const (
	OutcomeResult      Outcome = iota // a result: the node's, or muxd's own (eth_unsubscribe, a subscription id)
	OutcomeError                      // the node's error answer
	OutcomeCache                      // answered from the cache
	OutcomeTimeout                    // muxd's -32002 request timed out
	OutcomeUnavailable                // muxd's -32002 upstream unavailable: none connected, connection lost, shutdown, too many waiting
	OutcomeRefused                    // refused by muxd itself: parse error, invalid, denied, a limit
	NumOutcomes
)

var outcomeNames = [NumOutcomes]string{"result", "error", "cache", "timeout", "unavailable", "refused"}

// String is the outcome's metric label value.
func (o Outcome) String() string {
	if o < NumOutcomes {
		return outcomeNames[o]
	}
	return "unknown"
}

// ownOutcome is the outcome of muxd's own error err.
func ownOutcome(err router.RPCError) Outcome {
	switch {
	case err.Code == router.ErrorTimeout.Code && err.Message == router.ErrorTimeout.Message:
		return OutcomeTimeout
	case err.Code == router.CodeUnavailable:
		return OutcomeUnavailable
	}
	return OutcomeRefused
}

// Observer counts what the core does: the shell's metrics. The core calls
// it synchronously during an event; it must not block or call the core.
type Observer interface {
	Request(method string) // a client request with an id, by method
	// Answered is an answer queued for a client: the request's method
	// ("" when muxd could not read one), the answer's JSON-RPC error code
	// (0: a result), how it was answered, and the time from the request's
	// arrival (latency < 0: muxd's own answer at arrival).
	Answered(method string, code int, o Outcome, latency time.Duration)
	// RoundTrip is the time connection gen took to answer one single
	// request (not a batch's array), from its being sent upstream: a
	// client's call (the one sent, not the calls that joined it) or one
	// of muxd's own.
	RoundTrip(gen uint64, d time.Duration)
	Limit(name string)                   // a request refused by a limit
	Dropped(r DropReason)                // an upstream (or client notification) message dropped
	InFlight(delta int)                  // requests in flight or waiting, muxd's own included
	Retried(n int)                       // requests carried to the next connection
	Subscriptions(upstream, clients int) // live upstream subscriptions and client subscriptions
	Pushed(n int)                        // pushes queued for clients
	Backfilled(kind string, n int)       // pushes delivered by a backfill, by subscription kind
	BackfillGap(kind, reason string)     // a gap not closed
	BackfillDuration(d time.Duration)    // one backfill job, from gap found to delivered
	HistoryDelivered(kind string, n int) // history (fetched by muxd) delivered to fromBlock subscriptions, by kind
	HistoryRequests(n int)               // requests muxd sent for fromBlock subscriptions
	HistoryRefused(reason string)        // a fromBlock subscription refused, by reason
	Coalesced(method string)             // a request that joined an identical call in flight
	CacheHit(method string)              // a request answered from the cache
	CacheMiss(method string)             // a cacheable request the cache did not hold
	CacheEvicted(method string)          // an entry evicted (bound, reorg, connection lost), by method
	CacheBytes(n int)                    // bytes the cache holds now
	Orphaned(n int)                      // calls of departed clients still running at the node, now
	// FairQueued is a client call (or batch) leaving its fair-share queue
	// for the node after waiting wait for a slot (fairshare.go).
	FairQueued(wait time.Duration)
	// Throttled is a node's answer on connection gen saying it limits the
	// request rate (router.Throttle): 429, -32029, -32005 "limit
	// exceeded", "rate limit"…
	Throttled(gen uint64)
}

// nopObserver counts nothing.
type nopObserver struct{}

func (nopObserver) Request(string)                               {}
func (nopObserver) Answered(string, int, Outcome, time.Duration) {}
func (nopObserver) RoundTrip(uint64, time.Duration)              {}
func (nopObserver) Limit(string)                                 {}
func (nopObserver) Dropped(DropReason)                           {}
func (nopObserver) InFlight(int)                                 {}
func (nopObserver) Retried(int)                                  {}
func (nopObserver) Subscriptions(int, int)                       {}
func (nopObserver) Pushed(int)                                   {}
func (nopObserver) Backfilled(string, int)                       {}
func (nopObserver) BackfillGap(string, string)                   {}
func (nopObserver) BackfillDuration(time.Duration)               {}
func (nopObserver) HistoryDelivered(string, int)                 {}
func (nopObserver) HistoryRequests(int)                          {}
func (nopObserver) HistoryRefused(string)                        {}
func (nopObserver) Coalesced(string)                             {}
func (nopObserver) CacheHit(string)                              {}
func (nopObserver) CacheMiss(string)                             {}
func (nopObserver) CacheEvicted(string)                          {}
func (nopObserver) CacheBytes(int)                               {}
func (nopObserver) Orphaned(int)                                 {}
func (nopObserver) FairQueued(time.Duration)                     {}
func (nopObserver) Throttled(uint64)                             {}
