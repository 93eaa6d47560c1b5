package core

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/muxd/muxd/gapfill"
	"github.com/muxd/muxd/router"
)

// ErrTooManyClients is returned by Join when MaxClients sessions are open.
var ErrTooManyClients = errors.New("too many clients")

// ErrClosed is returned by Join once Shutdown began.
var ErrClosed = errors.New("server shutting down")

// Config holds the rules' parameters. Every field must be set (package mux
// fills in its defaults) except Observer, and those whose zero value turns
// a feature off (BackfillBlocks, CoalesceMethods, CacheBytes).
type Config struct {
	RequestTimeout   time.Duration // a request's deadline, from its arrival
	UpstreamWait     time.Duration // how long a request waits for an upstream
	UpstreamMaxBatch int           // elements in one upstream array

	// DialGrace is how long past UpstreamWait a waiting request may go on
	// waiting while no dial has given a verdict (waiting.go): a dial that
	// hangs. 0: none, it gives up at UpstreamWait unless a dial is at a
	// node (Dialing).
	DialGrace time.Duration

	// MaxUpstreamMessage is the largest message the node reads (geth: 32
	// MiB on WebSocket); a longer one makes it close the shared
	// connection. A request that would pass it once its id is rewritten
	// is refused (-32005), and a client batch goes as arrays that do not
	// pass it. 0: no limit.
	MaxUpstreamMessage int
	MaxBatch           int // elements in one client batch
	MaxInFlight        int // one client's requests in flight
	MaxHeldBytes       int // one client's request bytes held
	// MaxHeldBytesTotal bounds the request bytes held for all clients
	// together; <= 0: no bound.
	MaxHeldBytesTotal int
	MaxSubscriptions  int // one client's subscriptions
	MaxClients        int // sessions
	MaxWaiting        int // requests waiting for an upstream
	// MaxUpstreamInFlight bounds the client calls running at the node
	// (fairshare.go); past it calls queue per client and are sent in
	// fair order as slots free. <= 0: no bound.
	MaxUpstreamInFlight int
	// HeldPushBytes bounds the pushes held for one subscription whose
	// answer has not gone out yet (the client's outbound queue bound).
	HeldPushBytes int
	DenyMethods   []string // patterns (see CheckDenyPattern)
	RetryMethods  []string
	// BackfillBlocks is package gapfill's Blocks; <= 0: off.
	BackfillBlocks int
	// HistoryBlocks bounds the history of a subscription with a fromBlock
	// (history.go), in blocks; <= 0: such subscriptions are refused.
	HistoryBlocks int
	// GapNotices makes every gap the gap machine could not close reach
	// the affected subscription's clients in band, as a
	// muxd_subscriptionGap notification (backfill.go), not only the
	// counters and the log.
	GapNotices bool
	// CoalesceMethods are the methods whose identical requests in flight
	// share one upstream call (coalesce.go); none: off.
	CoalesceMethods []string
	// CacheBytes bounds the cache of answers that cannot change
	// (cache.go); <= 0: off.
	CacheBytes int
	// ReportHeads makes every newHeads push routed on the current
	// connection report its block number in Effects.Head (the shell's
	// failover compares it with other nodes' heads).
	ReportHeads bool
	// NewSubscriptionID returns a fresh client subscription id, a JSON
	// string (quotes included). Subscription ids are the one input the
	// core cannot derive from its events: the shell draws them at random.
	NewSubscriptionID func() string
	Observer          Observer // nil: nothing is counted
	// Clients are the named clients' shares and limits, by name
	// (names.go); none: every session is unnamed.
	Clients map[string]ClientClass
	// Arenas, when set, returns a buffer of capacity at least n for the
	// memory a client batch's upstream array is laid out in: the shell
	// reuses the buffers that whole-batch answers come back in
	// (Delivery.Arena) once it has written them. nil: each is made.
	Arenas func(n int) []byte
}

// Core is muxd's routing state and rules (see the package doc). It is not
// safe for concurrent use: the shell makes one call at a time.
type Core struct {
	cfg    Config
	obs    Observer
	policy policy

	// reqs is the pending table of the current upstream connection;
	// upstream ids come from its counter, which survives Discard.
	reqs    *router.Requests
	gen     uint64     // the current upstream connection; 0: none
	since   time.Time  // when gen became current: what waited for it went upstream then
	drain   drainState // the connection switched away from, while it owes answers
	waiting waitQueue
	subs    *subTable
	clients map[router.ClientID]*client
	lastID  router.ClientID
	owing   int // requests in flight or waiting for clients (not muxd's own)
	held    int // request bytes held for all clients (the sum of client.held)
	// released adds up the large releases of held bytes since the last
	// event's finish, which reports them (Effects.Released).
	released int
	closing  bool
	// shut is set by Shutdown: from then on every request a client sends
	// is answered shutErr by the core itself and nothing of a client's
	// goes upstream.
	shut    bool
	shutErr router.RPCError

	// dialReached says a dial attempt is at a node (Dialing); awayAt is
	// when every upstream not connected was last found away (DialsFailed).
	dialReached bool
	awayAt      time.Time

	// gap makes subscriptions gap-free; gapReqs maps the upstream id of
	// each of its requests in flight to the machine's id.
	gap        *gapfill.Machine
	gapReqs    map[uint64]uint64
	gapTimeout time.Duration
	// hist are the history subscriptions whose machine keys run, by
	// that key; histBounded those of them with a toBlock; histChecks the
	// history eth_subscribes waiting for the node, by upstream id
	// (history.go).
	hist        map[string]*member
	histBounded map[*member]struct{}
	histChecks  map[uint64]*histCheck
	// pace holds history requests back as bulk traffic (histpace.go).
	pace histPace

	// coalesce is Config.CoalesceMethods as a set; coal the calls
	// requests may join; cache the answers that cannot change; heads
	// the chain as the node's pushes show it; fin its finalized block.
	coalesce map[string]bool
	coal     coalesceTable
	// orphans are the calls departed clients left running at the node;
	// reportedOrphans the count last given to the observer.
	orphans         orphanTable
	reportedOrphans int
	cache           answerCache
	fair            fairShare
	names           map[string]*named // Config.Clients' state (names.go)
	heads           headView
	fin             finalizedView

	// Scratch reused from one event to the next: upstream ids, and the
	// elements of an array answer in their batch's request order.
	uids  []uint64
	order []slotElem
	// batches is the free list of client batches' upstream bookkeeping,
	// given back when an array answer completes a batch (wholeBatch).
	batches router.UpstreamBatches
}

// client is the core's part of a session.
type client struct {
	id       router.ClientID
	http     bool // HTTP: one answer per exchange, no subscriptions
	inflight int  // requests in flight, waiting, or subscribe waiters
	held     int  // bytes of the upstream frames of its requests held
	waiting  int  // of those, entries in the waiting queue
	seq      uint64
	subs     map[string]*member // its subscriptions by client subscription id
	named    *named             // the configured name it joined under (names.go); nil: unnamed
}

// New returns a core with no clients and no upstream connection.
func New(cfg Config) (*Core, error) {
	pol, err := newPolicy(cfg.DenyMethods, cfg.RetryMethods)
	if err != nil {
		return nil, fmt.Errorf("core: %w", err)
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	if cfg.NewSubscriptionID == nil {
		return nil, errors.New("core: no NewSubscriptionID")
	}
	names, err := newNames(cfg.Clients, nil)
	if err != nil {
		return nil, fmt.Errorf("core: %w", err)
	}
	gapTimeout := min(cfg.RequestTimeout, gapfill.DefaultRequestTimeout)
	coalesce := make(map[string]bool, len(cfg.CoalesceMethods))
	for _, m := range cfg.CoalesceMethods {
		coalesce[m] = true
	}
	// Subscriptions are shared by their own table.
	delete(coalesce, methodSubscribe)
	delete(coalesce, methodUnsubscribe)
	c := &Core{
		coalesce:   coalesce,
		coal:       newCoalesceTable(),
		cache:      newAnswerCache(cfg.CacheBytes),
		cfg:        cfg,
		obs:        cfg.Observer,
		policy:     pol,
		reqs:       router.NewRequests(),
		subs:       newSubTable(),
		clients:    make(map[router.ClientID]*client),
		gap:        gapfill.New(gapfill.Config{Blocks: cfg.BackfillBlocks, RequestTimeout: gapTimeout, JobTimeout: 6 * gapTimeout}),
		gapReqs:    make(map[uint64]uint64),
		gapTimeout: gapTimeout,
		fair:       newFairShare(cfg.MaxUpstreamInFlight),
		names:      names,
	}
	c.batches.Alloc = cfg.Arenas
	return c, nil
}

// Join registers a session and returns its id. http says the session is
// one HTTP exchange: it gets one answer and cannot subscribe.
func (c *Core) Join(http bool) (router.ClientID, error) {
	if c.closing {
		return 0, ErrClosed
	}
	if len(c.clients) >= c.cfg.MaxClients {
		c.obs.Limit("clients")
		return 0, ErrTooManyClients
	}
	c.lastID++
	c.clients[c.lastID] = &client{id: c.lastID, http: http}
	return c.lastID, nil
}

// Owed reports what the core owes client id: requests not yet answered,
// and how many deliveries it has produced for it (the Seq of the last).
// A session may close once nothing is owed and every delivery up to seq
// has been written.
func (c *Core) Owed(id router.ClientID) (inflight int, seq uint64) {
	if cl := c.clients[id]; cl != nil {
		return cl.inflight, cl.seq
	}
	return 0, 0
}

// Held is the bytes of client id's requests the core holds.
func (c *Core) Held(id router.ClientID) int {
	if cl := c.clients[id]; cl != nil {
		return cl.held
	}
	return 0
}

// deliver adds a message for cl, numbered in its sequence.
func (e *Effects) deliver(cl *client, d Delivery) {
	cl.seq++
	d.Client, d.Seq = cl.id, cl.seq
	e.Deliveries = append(e.Deliveries, d)
}

// send adds frames to write on the current connection.
func (c *Core) send(e *Effects, frames ...[]byte) {
	if c.gen == 0 || len(frames) == 0 {
		return
	}
	e.Gen = c.gen
	e.Upstream = append(e.Upstream, frames...)
}

// sendArrays is send of u's next arrays (UpstreamBatch.NextArrays),
// appended to e's list without a slice of their own.
func (c *Core) sendArrays(e *Effects, u *router.UpstreamBatch) {
	n := len(e.Upstream)
	e.Upstream = u.NextArrays(e.Upstream, c.cfg.UpstreamMaxBatch, c.cfg.MaxUpstreamMessage)
	switch {
	case c.gen == 0:
		clear(e.Upstream[n:])
		e.Upstream = e.Upstream[:n]
	case len(e.Upstream) > n:
		e.Gen = c.gen
		c.tookSlots(u, time.Time{})
	}
}

// started counts one more request in flight, for cl (nil for muxd's own),
// holding held bytes of it. Its end is counted by ended with the same held.
func (c *Core) started(cl *client, held int) {
	if cl != nil {
		cl.inflight++
		c.hold(cl, held)
		c.owing++
		if cl.named != nil {
			cl.named.inflight++
		}
	}
	c.obs.InFlight(1)
}

// largeRelease is the least a release of held bytes must be (one
// request's frame, or the frames of a batch's array answered whole) for
// the shell to count it towards handing memory back to the OS at once
// (Effects.Released): small requests come and go all the time, and their
// memory is reused.
const largeRelease = 1 << 20

// hold changes the bytes held for cl (and for all clients) by delta.
func (c *Core) hold(cl *client, delta int) {
	cl.held += delta
	c.held += delta
	if -delta >= largeRelease {
		c.released -= delta
	}
}

// ended counts one request of cl (nil for muxd's own), which held held
// bytes, as no longer in flight.
func (c *Core) ended(cl *client, held int) { c.endedN(cl, 1, held) }

// endedN counts n requests of cl (nil for muxd's own), which held held
// bytes in all, as no longer in flight.
func (c *Core) endedN(cl *client, n, held int) {
	if cl != nil {
		cl.inflight -= n
		c.hold(cl, -held)
		c.owing -= n
		if cl.named != nil {
			cl.named.inflight -= n
		}
	}
	c.obs.InFlight(-n)
}

// settled accounts for p leaving the pending table or the waiting queue for
// good, and returns its client (nil if gone or muxd's own).
func (c *Core) settled(p *router.Pending) *client {
	cl := c.clients[p.Client]
	if p.Client == router.Internal {
		cl = nil
	}
	c.ended(cl, len(p.Frame))
	return cl
}

// finish marks e Idle when shutting down and nothing is owed.
func (c *Core) finish(e *Effects) {
	e.Released, c.released = c.released, 0
	if n := c.orphans.len(); n != c.reportedOrphans {
		c.obs.Orphaned(n)
		c.reportedOrphans = n
	}
	if c.closing && c.owing == 0 && c.waiting.live == 0 {
		e.Idle = true
	}
}

// Stats is a snapshot of the core's tables, for status output and tests.
type Stats struct {
	Clients          int // sessions
	Pending          int // requests in flight on the current connection, muxd's own included
	Joined           int // of Pending, requests waiting on another's identical call (nothing sent)
	CacheBytes       int // bytes the cache of answers holds
	Waiting          int // requests waiting for an upstream, muxd's own included
	Backfill         int // backfill requests in flight
	Backfills        int // backfill jobs running (keys being filled)
	InFlight         int // client requests owed an answer, subscribe waiters included
	HeldBytes        int // bytes of client requests held
	SubscribeWaiters int // client eth_subscribe awaiting the node's answer
	UpstreamSubs     int // live upstream subscriptions
	ClientSubs       int // client subscriptions
	Orphaned         int // calls of departed clients still running at the node
	// UpstreamInFlight is the slots taken of MaxUpstreamInFlight: client
	// calls at the node, departed clients' included, each for at most
	// slotHold (0 without a bound).
	UpstreamInFlight int
	// FairQueued is the client calls queued for a slot (a batch counts
	// its elements), and FairQueuedClients the clients they are of.
	FairQueued        int
	FairQueuedClients int
}

// Stats returns a snapshot of the tables. It walks the clients.
func (c *Core) Stats() Stats {
	s := Stats{
		Clients:    len(c.clients),
		Pending:    c.reqs.Len(),
		Waiting:    c.waiting.live,
		Backfill:   len(c.gapReqs),
		Backfills:  c.gap.Jobs(),
		Joined:     c.coal.joined(),
		CacheBytes: c.cache.bytes,
	}
	for _, cl := range c.clients {
		s.InFlight += cl.inflight
		s.HeldBytes += cl.held
	}
	for sh := range c.subs.waiting {
		s.SubscribeWaiters += sh.waiters
	}
	s.UpstreamSubs, s.ClientSubs = c.subs.counts()
	s.Orphaned = c.orphans.len()
	if c.fair.bound > 0 {
		s.UpstreamInFlight = c.slotsUsed()
		s.FairQueued = c.fair.q.Cost() + c.fair.bulk.Cost()
		s.FairQueuedClients = c.fair.q.Flows() + c.fair.bulk.Flows()
	}
	return s
}

// SubscriptionStatus is one subscription key as Subscriptions reports it.
type SubscriptionStatus struct {
	Key       string // the key, cut to its first KeyStatusMax bytes
	KeyBytes  int    // the key's whole length
	State     string // idle, subscribing, resubscribing, live, failed, unsubscribing
	Clients   int    // client subscriptions on it
	Backfill  bool   // a backfill of it runs
	Truncated bool   // Key was cut
}

// KeyStatusMax is how much of a subscription key Subscriptions gives: a
// key is the client's params, of any length.
const KeyStatusMax = 120

// Subscriptions returns the subscription keys, at most limit of them
// (limit <= 0: all), in key order, and how many there are. It walks the
// table.
func (c *Core) Subscriptions(limit int) ([]SubscriptionStatus, int) {
	keys := make([]string, 0, len(c.subs.byKey))
	for k := range c.subs.byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if limit > 0 && len(keys) > limit {
		keys = keys[:limit]
	}
	out := make([]SubscriptionStatus, 0, len(keys))
	for _, k := range keys {
		sh := c.subs.byKey[k]
		st := SubscriptionStatus{
			Key:      k,
			KeyBytes: len(k),
			State:    sh.state.String(),
			Clients:  len(sh.members),
			Backfill: c.gap.Running(k),
		}
		if len(k) > KeyStatusMax {
			st.Key, st.Truncated = strings.ToValidUTF8(k[:KeyStatusMax], ""), true
		}
		out = append(out, st)
	}
	return out, len(c.subs.byKey)
}
