package gapfill

import (
	"encoding/json"
	"maps"
	"slices"
	"time"
)

// Config bounds the machine. Zero fields take the defaults below, except
// Blocks: 0 turns backfill off.
type Config struct {
	// Blocks is backfill_blocks: the most blocks one backfill delivers,
	// and how many delivered blocks are remembered per key. 0: off.
	Blocks int
	// RequestTimeout bounds each request the machine sends.
	RequestTimeout time.Duration
	// Attempts bounds the sends of one request that fails or times out.
	Attempts int
	// NullRetries bounds how often a block the node answers null for is
	// asked again; RetryDelay is the wait before a retry.
	NullRetries int
	RetryDelay  time.Duration
	// JobTimeout bounds one backfill from start to delivery.
	JobTimeout time.Duration
	// MaxInFlight bounds the requests one job has in flight at a time.
	MaxInFlight int
	// LogsChunk is the most blocks one eth_getLogs covers.
	LogsChunk uint64
	// HistoryChunk is the most blocks one eth_getLogs of a history
	// subscription covers (history.go); a range the node refuses as too
	// large is asked again in halves.
	HistoryChunk uint64
	// MaxHeld bounds the live pushes a job holds for its key.
	MaxHeld int
	// HeadWait is how long a newHeads key that is live again waits for
	// the node's next push before it asks the node for its head, so that
	// the heads mined while it was not live are delivered then rather
	// than a block time later.
	HeadWait time.Duration
}

// Defaults for Config fields left zero.
const (
	DefaultBlocks         = 128
	DefaultRequestTimeout = 10 * time.Second
	DefaultAttempts       = 3
	DefaultNullRetries    = 20
	DefaultRetryDelay     = 250 * time.Millisecond
	DefaultJobTimeout     = 60 * time.Second
	DefaultMaxInFlight    = 8
	DefaultLogsChunk      = 32
	DefaultHistoryChunk   = 1000
	DefaultMaxHeld        = 10000
	DefaultHeadWait       = time.Second
)

func (c Config) withDefaults() Config {
	if c.Blocks < 0 {
		c.Blocks = 0
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.Attempts <= 0 {
		c.Attempts = DefaultAttempts
	}
	if c.NullRetries <= 0 {
		c.NullRetries = DefaultNullRetries
	}
	if c.RetryDelay <= 0 {
		c.RetryDelay = DefaultRetryDelay
	}
	if c.JobTimeout <= 0 {
		c.JobTimeout = DefaultJobTimeout
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.LogsChunk == 0 {
		c.LogsChunk = DefaultLogsChunk
	}
	if c.HistoryChunk == 0 {
		c.HistoryChunk = DefaultHistoryChunk
	}
	if c.MaxHeld <= 0 {
		c.MaxHeld = DefaultMaxHeld
	}
	if c.HeadWait <= 0 {
		c.HeadWait = DefaultHeadWait
	}
	return c
}

// Send is a request the machine wants sent upstream, as muxd's own. ID is
// the machine's; the answer comes back through Answer(ID, ...).
type Send struct {
	ID     uint64
	Key    string
	Method string
	Params []byte // JSON array
}

// Delivery is a push for every subscriber of Key, in the order given.
// Live means "the push just handed to Push, exactly as it came"; otherwise
// Result is the params.result to deliver.
type Delivery struct {
	Key    string
	Live   bool
	Result []byte
}

// Gap is a gap the machine could not close.
type Gap struct {
	Kind   string // subscription name: newHeads, logs, newPendingTransactions, …
	Reason string // too_long, failed, unavailable, timeout, too_many_held, reorg_too_deep, late, not_backfillable, disabled
	// Key is the subscription key (its eth_subscribe params), for the log.
	Key string
	// From and To are the blocks the gap is about, when known: for
	// newHeads the heads not delivered; for logs the blocks whose logs may
	// be missing or stale (delivered, then replaced by a reorg, and no
	// longer remembered to be sent removed). Both 0: not known. From 0
	// with To set: the gap starts deeper than the machine remembers.
	From, To uint64
}

// Effects is what the caller must do after an event, in this order: send
// the requests, deliver the pushes (in slice order), count.
type Effects struct {
	Sends           []Send
	Deliveries      []Delivery
	HeadsBackfilled int
	LogsBackfilled  int // including logs delivered again with removed:true
	// HistoryLogs and HistoryHeads are what history subscriptions
	// (history.go) were delivered that the machine fetched, counted here
	// instead of in LogsBackfilled and HeadsBackfilled.
	HistoryLogs  int
	HistoryHeads int
	Gaps         []Gap
	Durations    []time.Duration // of backfill jobs that ended
}

// Kinds of subscription the machine tells apart.
const (
	kindOther = iota
	kindHeads
	kindLogs
)

// Machine tracks every live subscription key. Create it with New.
type Machine struct {
	cfg    Config
	keys   map[string]*keyState
	reqs   map[uint64]*request // sent, awaiting Answer
	nextID uint64
	eff    Effects // effects of the event being handled

	// The number of the last head the node pushed to a newHeads key on
	// the current connection: a head further on than the next one is a
	// jump, whose blocks every logs key backfills (noteHead).
	nodeHead     uint64
	haveNodeHead bool
	// nodeHashes are the hashes of the blocks the heads pushed on the
	// current connection name (each head and its parent), by number, for
	// the last Blocks numbers: what a logs key's covered block is, so
	// that a backfill can tell whether a reorg replaced it.
	nodeHashes map[uint64]string
	// headers are the blocks (number, hash, parent) the machine has seen,
	// pushed or fetched, on any connection and branch, for the last
	// memory() numbers below topHeader: how a logs key's branch is
	// followed below the blocks it remembers (branchOf).
	headers   map[string]header
	topHeader uint64

	// heldAbove: the log being run from what a backfill started for a
	// live log held is placed only because its block is above the head
	// that backfill fetched to (runHeld).
	heldAbove bool

	// headWaits are the newHeads keys live again on this connection that
	// have had no push yet, with when they ask the node for its head
	// (Config.HeadWait).
	headWaits map[string]time.Time
}

// New returns a machine with no keys.
func New(cfg Config) *Machine {
	return &Machine{cfg: cfg.withDefaults(), keys: map[string]*keyState{}, reqs: map[uint64]*request{}, headWaits: map[string]time.Time{}, nodeHashes: map[uint64]string{}}
}

// Enabled reports whether backfill is on (Config.Blocks > 0).
func (m *Machine) Enabled() bool { return m.cfg.Blocks > 0 }

// Running reports whether key has a backfill job running.
func (m *Machine) Running(key string) bool {
	k := m.keys[key]
	return k != nil && k.job != nil
}

// Jobs returns how many backfill jobs are running. It walks the keys.
func (m *Machine) Jobs() int {
	n := 0
	for _, k := range m.keys {
		if k.job != nil {
			n++
		}
	}
	return n
}

// keyState is what the machine knows of one subscription key.
type keyState struct {
	key    string
	kind   int
	name   string
	filter map[string]json.RawMessage // logs: the filter, without a range

	// newHeads: the delivered chain, number -> hash, for the last Blocks
	// numbers up to last.
	hashes   map[uint64]string
	last     uint64
	haveLast bool
	first    uint64 // the number of the first head delivered

	// logs: what was delivered, by block, for the last Blocks blocks;
	// covered is the highest block all of whose logs were delivered;
	// coveredHash its hash when known ("" otherwise): those logs were
	// of the branch through that block, which a reorg may replace even
	// where no log of the key was.
	blocks map[uint64]*logBlock
	// forgotten are the blocks whose logs the key was delivered and no
	// longer remembers (more than Blocks below its newest), by number:
	// their hash and how many of those logs the node has not removed. A
	// reorg that replaces them leaves those logs standing, stale, and the
	// gap is stated with them.
	forgotten map[uint64]forgottenBlock
	// stated is the last range of blocks a reorg_too_deep or too_long
	// gap named for the key (statedTo 0: none): a log of those blocks
	// that cannot go out in order is part of that gap, not another one.
	statedFrom, statedTo uint64
	covered              uint64
	coveredHash          string
	haveCovered          bool
	// logs: the block the key started after (the node's head when it
	// became live the first time, as far as known): a head jump from
	// below it owes nothing before it.
	start uint64
	// logs: a head jump seen while a job ran, whose blocks
	// [owedFrom, owedTo] the next job fetches; owedTo 0: none.
	owedFrom, owedTo uint64

	// newHeads: headers a job fetched but could not deliver before the
	// connection was lost, by hash. A hash names one header for good,
	// so the next job starts from them instead of fetching them again:
	// on a connection that keeps dropping, each one moves the backfill
	// on instead of starting it over.
	fetched map[string]header

	// live: the key's subscription is live on the current connection
	// (Live since the last Disconnected).
	live bool

	// history: a history subscription's logs key (history.go), owed
	// every log from block histFrom on.
	history  bool
	histFrom uint64
	// histEnd: newHeads: the block its history ends at (its toBlock, at
	// or below the node's head when asked; 0: the head).
	histEnd uint64
	// expected: a logs key whose eth_subscribe was sent and not answered
	// yet (Expect): its start is being asked for.
	expected bool
	// histTo: newHeads: the head its first backfill delivered up to (0:
	// not known yet); below it, no backfill_blocks floor applies.
	histTo uint64

	job  *job
	held [][]byte // pushes (params.result, copied) held while job runs
}

// forgottenBlock is what a logs key keeps of a block it forgot.
type forgottenBlock struct {
	hash string
	logs int // delivered and not removed since
}

type logBlock struct {
	hash string
	logs []logEntry // in delivery order
}

// purposes of requests.
const (
	purposeHeadByNumber = "head_by_number"
	purposeHeadByHash   = "head_by_hash"
	purposeHeadLatest   = "head_latest" // the node's head, asked when a newHeads key is live again
	purposeHeadSearch   = "head_search" // a block below a newHeads job's floor, for where its gap starts (searchFork)
	purposeBaseline     = "logs_baseline"
	purposeHeadNumber   = "logs_head" // the head block: its number, hash and parent
	purposeCheckBlock   = "logs_check_block"
	purposeGetLogs      = "logs_range"
	purposeLogsBlock    = "logs_block"     // a block's hash, for purposeLogsByHash
	purposeLogsByHash   = "logs_by_hash"   // eth_getLogs {blockHash}
	purposeLogsHeader   = "logs_header"    // a block fetched by hash: its header, to check the chain (forkMoved)
	purposeHistAnchor   = "history_anchor" // the block a newHeads history starts after (history.go)
)

// request is one request of the machine's, sent or waiting to be.
type request struct {
	id       uint64
	key      string
	method   string
	params   []byte
	purpose  string
	num      uint64 // block number it is about (by number, check, range start)
	to       uint64 // range end (eth_getLogs by range)
	hash     string // by hash
	deadline time.Time
	retryAt  time.Time // zero while in flight
	attempts int
	nulls    int
}

// logsAnswer is what one eth_getLogs answer of a job covered.
type logsAnswer struct {
	from, to uint64
	hash     string // the block asked for by hash ("" for a range)
	held     int    // pushes the key held when it came in
}

// job is one backfill of a key.
type job struct {
	started  time.Time
	deadline time.Time
	queue    []*request // not sent yet (bounded concurrency), or waiting for retryAt
	inflight int

	// newHeads
	target  header            // the head that started it; delivered last
	floor   uint64            // lowest number it may deliver
	cur     uint64            // number of the block the walk needs next
	expect  string            // hash of that block
	byHash  map[string]header // fetched headers
	numWait map[uint64]bool   // numbers asked for by number, not answered yet
	chain   []header          // walked, descending from target-1
	askedBy string            // the hash asked for by hash, if any
	probed  map[uint64]bool   // numbers at or below the last head asked for by number (probeBelow)
	// The walk went below floor: the fork point is looked for by number,
	// from searchAt down, only to state which heads are not delivered
	// (searchFork); searched holds the node's hashes asked for.
	search      bool
	searchAt    uint64
	searched    map[uint64]string
	searchAsked uint64 // the lowest number asked for (searchAsked > searchAt: none yet)

	// logs
	head     uint64 // node's head
	haveHead bool
	fetching bool              // the logs were asked for (fetchRange): delivered once every chunk is in
	checks   []uint64          // remembered blocks not resolved yet, descending
	asked    int               // how many of checks (from the front) were asked for
	checked  map[uint64]string // canonical hashes known: answers to checks, a jump's head and parent
	// checkedAt is, for each hash in checked the node answered, how many
	// pushes the key held when the answer came in: a held log of another
	// block at that number, pushed before it, is stale (dropFetchedStale).
	checkedAt map[uint64]int
	replaced  []uint64 // remembered blocks whose hash changed, descending
	forkOK    bool     // a remembered block kept its hash
	forkAt    uint64   // that block
	chunks    int      // eth_getLogs not answered yet
	fetched   []logEntry
	missing   bool // a chunk was given up
	// missingFrom..missingTo spans the blocks of the chunks given up
	// (0, 0 while one of them named no block number).
	missingFrom, missingTo uint64
	late                   bool // a fetched log came after a later one was delivered
	// lateFrom and lateTo are the blocks of the logs not delivered late.
	lateFrom, lateTo uint64
	// heldFrom is how many of the key's held pushes came before the
	// checks were (last) asked: the checks' answers know of those.
	heldFrom int
	restarts int // times the fork moved under the job (restartChecks)
	// resumeAt: the job starts its next round then (restartChecks past
	// MaxForkRestarts); zero: it is not paused.
	resumeAt time.Time
	// owedHead is the highest head an earlier round of the job learned:
	// the gap a job given up while its fork moves states ends there.
	owedHead uint64
	// answers are the blocks each eth_getLogs answer covered and how many
	// pushes the key held when it came in: those came before the answer
	// that says which logs those blocks hold (dropFetchedStale).
	answers []logsAnswer
	// wait: the job sends nothing: it holds a live log whose block the
	// heads pushed on the connection have not named yet (place), until a
	// head names it or waitUntil passes (then it finds the fork itself).
	wait      bool
	waitUntil time.Time
	// noFork: a wait whose end (no head in time) runs what it held
	// through the rules for held pushes, not a backfill (onLog).
	noFork bool
	// anchor: a newHeads history key's first job, which reads the hash
	// of the block its history starts after (history.go).
	anchor bool
	// forLog: the job was started to place a log pushed live (findForkFor):
	// what it held is then run through the rules for held pushes only,
	// and cannot start another such job.
	forLog bool
	// branch is the branch the key was delivered when the checks were
	// asked (branchOf): the hashes of the blocks it covered where it had
	// no log, which the checks compare below its remembered blocks.
	branch map[uint64]string
}

func (m *Machine) take() Effects {
	e := m.eff
	m.eff = Effects{}
	return e
}

// deliver queues a delivery for k: the push just given (live, res
// ignored) or res.
func (m *Machine) deliver(k *keyState, live bool, res []byte) {
	if live {
		res = nil
	}
	m.eff.Deliveries = append(m.eff.Deliveries, Delivery{Key: k.key, Live: live, Result: res})
}

func (m *Machine) gap(k *keyState, reason string) { m.gapBlocks(k, reason, 0, 0) }

// memory is how many numbers below the newest the machine keeps block
// hashes for (a newHeads key's delivered heads, the heads pushed on the
// connection, the headers seen): Blocks, and UnknownForkDepth more, so
// that the fork point of a reorg deeper than a backfill delivers is still
// found, and the gap it leaves stated exactly.
func (m *Machine) memory() uint64 { return uint64(m.cfg.Blocks) + UnknownForkDepth }

// giveUpChunk records that the logs of r's blocks stay missing: the gap
// stated when the job delivers spans them, and every chunk given up
// before (so it may name blocks between two such chunks that did arrive).
// A chunk that names no block number leaves the span unknown.
func (j *job) giveUpChunk(r *request) {
	from, to := r.num, max(r.to, r.num)
	switch {
	case from == 0:
		j.missingFrom, j.missingTo = 0, 0
	case !j.missing:
		j.missingFrom, j.missingTo = from, to
	case j.missingTo != 0:
		j.missingFrom, j.missingTo = min(j.missingFrom, from), max(j.missingTo, to)
	}
	j.missing = true
}

// gapBlocks is gap for blocks from to to, which k does not get (0, 0 when
// not known).
func (m *Machine) gapBlocks(k *keyState, reason string, from, to uint64) {
	if k.kind == kindLogs && to != 0 && k.statedTo != 0 && from >= k.statedFrom && to <= k.statedTo {
		return // within a reorg_too_deep gap already stated for the key
	}
	if k.kind == kindLogs && (reason == "reorg_too_deep" || reason == "too_long") && to != 0 {
		if k.statedTo != 0 && from <= k.statedTo+1 && to+1 >= k.statedFrom {
			k.statedFrom, k.statedTo = min(k.statedFrom, from), max(k.statedTo, to)
		} else {
			k.statedFrom, k.statedTo = from, to
		}
	}
	m.eff.Gaps = append(m.eff.Gaps, Gap{Kind: gapKind(k.name), Reason: reason, Key: k.key, From: from, To: to})
}

// gapKind bounds the kind label: node-specific names count as "other".
func gapKind(name string) string {
	switch name {
	case "newHeads", "logs", "newPendingTransactions", "syncing":
		return name
	}
	return "other"
}

func newKey(key string) *keyState {
	name, filter := subscriptionName(key)
	k := &keyState{key: key, name: name, filter: filter}
	switch name {
	case "newHeads":
		k.kind = kindHeads
		k.hashes = map[uint64]string{}
	case "logs":
		k.kind = kindLogs
		k.blocks = map[uint64]*logBlock{}
	}
	return k
}

// Live is the event "key's eth_subscribe was answered: the key is live on
// the current connection". A key the machine already knows was live on an
// earlier connection (a resubscribe): pushes may have been missed.
func (m *Machine) Live(key string, now time.Time) Effects {
	k := m.keys[key]
	if k == nil {
		k = newKey(key)
		k.live = true
		m.keys[key] = k
		if k.kind == kindLogs && m.Enabled() {
			// Where the key starts: logs from before it are not owed.
			m.askBaseline(k, now)
		}
		return m.take()
	}
	if k.expected {
		// Its first Live: where it starts was asked for with its
		// eth_subscribe (Expect), and again if that connection was lost
		// before the answer.
		k.expected, k.live = false, true
		if !k.haveCovered && !m.asking(k, purposeBaseline) {
			m.askBaseline(k, now)
		}
		return m.take()
	}
	k.live = true
	switch {
	case k.kind == kindOther:
		m.gap(k, "not_backfillable")
	case !m.Enabled():
		m.gap(k, "disabled")
	case k.kind == kindLogs && k.job == nil:
		if !k.haveCovered {
			// It never learned where it started: nothing to backfill from.
			m.gap(k, "unavailable")
			m.askBaseline(k, now)
			break
		}
		m.findFork(k, m.startJob(k, now), now)
	case k.kind == kindHeads && k.job == nil && k.history && !k.haveLast:
		m.startAnchor(k, now) // its history's start was not read yet
	case k.kind == kindHeads && k.job == nil && k.haveLast:
		// The next push starts the job that fills the gap; if none comes
		// within HeadWait, the node is asked for its head (Tick), so the
		// heads mined while the key was not live are delivered then, not
		// a block time later. Waiting first costs nothing when the node
		// pushes soon, and spends no request of a connection that does
		// not last.
		m.headWaits[key] = now.Add(m.cfg.HeadWait)
	}
	return m.take()
}

// latestAnswered takes the node's head block, asked when newHeads key k
// became live again and the node pushed nothing for HeadWait, as if the
// node had pushed it: a head above the last delivered one is delivered,
// with the heads missed below it fetched first (onHead). An answer that
// comes after a push started a job, or that is no block, or not above the
// last delivered head (a node behind the one before it), changes nothing:
// the node's pushes carry on from there under the usual rules.
func (m *Machine) latestAnswered(k *keyState, result []byte, now time.Time) {
	if k.kind != kindHeads || k.job != nil || !k.haveLast || result == nil {
		return
	}
	raw, ok := HeaderFromBlock(result)
	if !ok {
		return
	}
	h, ok := parseHeader(raw)
	if !ok || h.num <= k.last {
		return
	}
	m.onHead(k, h, false, now)
}

// askBaseline asks for the node's head: where logs key k starts (outside
// any job).
func (m *Machine) askBaseline(k *keyState, now time.Time) {
	m.sendNew(k, &request{method: "eth_blockNumber", params: []byte("[]"), purpose: purposeBaseline}, now)
}

// Forget drops everything known about key (its last subscriber left).
func (m *Machine) Forget(key string) {
	delete(m.keys, key)
	delete(m.headWaits, key)
	m.dropRequests(key)
}

// dropRequests forgets the requests sent for key: their answers are
// ignored.
func (m *Machine) dropRequests(key string) {
	for id, r := range m.reqs {
		if r.key == key {
			delete(m.reqs, id)
		}
	}
}

// Sending reports whether the machine still waits for the answer to
// request id (handed out in Effects.Sends and not answered, timed out,
// dropped or forgotten since), and when so starts its deadline again at
// now: the caller held the request back (core paces history requests as
// bulk traffic) and sends it now, so RequestTimeout measures the node's
// time, not the wait. The job's deadline is not moved.
func (m *Machine) Sending(id uint64, now time.Time) bool {
	r := m.reqs[id]
	if r == nil {
		return false
	}
	r.deadline = now.Add(m.cfg.RequestTimeout)
	return true
}

// Disconnected is the event "the upstream connection is gone": every
// request in flight is lost and every job is abandoned (the next
// connection's job fetches its blocks again).
func (m *Machine) Disconnected() {
	clear(m.reqs)
	clear(m.headWaits)
	m.haveNodeHead = false // the next connection's job covers the outage
	clear(m.nodeHashes)
	for _, k := range m.keys {
		k.live = false
		k.owedTo = 0
		if j := k.job; j != nil && k.kind == kindHeads {
			m.keepFetched(k, j)
		}
		k.job = nil
		k.held = nil
	}
}

// Passes reports whether pushes for key go through untouched (a kind that
// cannot be backfilled, a key the machine does not track, or backfill
// off): a caller may then deliver them itself without calling Push.
func (m *Machine) Passes(key string) bool { return m.passes(m.keys[key]) }

func (m *Machine) passes(k *keyState) bool {
	return k == nil || k.kind == kindOther || !m.Enabled()
}

// Push is the event "the node pushed params (the eth_subscription params
// object) for key".
func (m *Machine) Push(key string, params []byte, now time.Time) Effects {
	k := m.keys[key]
	delete(m.headWaits, key) // the node pushes: its rules take it from here
	if m.passes(k) {
		m.eff.Deliveries = append(m.eff.Deliveries, Delivery{Key: key, Live: true})
		return m.take()
	}
	res, ok := pushResult(params)
	if !ok {
		m.deliver(k, true, nil)
		return m.take()
	}
	// A head is parsed once: for its key's rules and for noteHead.
	var h header
	isHead := false
	if k.kind == kindHeads {
		h, isHead = parseHeader(res)
	}
	switch {
	case k.job != nil:
		m.hold(k, res, now)
	case isHead:
		m.onHead(k, h, true, now)
	case k.kind == kindLogs:
		if l, ok := parseLog(res); ok {
			m.onLog(k, l, true, true, now)
		} else {
			m.deliver(k, true, nil)
		}
	default:
		m.deliver(k, true, nil)
	}
	if isHead && !k.history {
		m.noteHead(h, now) // after this key's own effects (a history key's pushes are another key's)
	}
	return m.take()
}

func (m *Machine) hold(k *keyState, res []byte, now time.Time) {
	k.held = append(k.held, append([]byte(nil), res...))
	if len(k.held) > m.cfg.MaxHeld {
		m.giveUp(k, "too_many_held", now)
	}
}

// Answer is the event "the node answered request id": result is the raw
// result (nil when it answered with an error).
func (m *Machine) Answer(id uint64, result []byte, now time.Time) Effects {
	r := m.reqs[id]
	if r == nil {
		return m.take()
	}
	delete(m.reqs, id)
	k := m.keys[r.key]
	if k == nil {
		return m.take()
	}
	if r.purpose == purposeHeadLatest {
		m.latestAnswered(k, result, now)
		return m.take()
	}
	if r.purpose == purposeBaseline {
		if n, ok := parseQuantityJSON(result); ok && !k.haveCovered {
			k.covered, k.coveredHash, k.haveCovered = n, "", true
			k.start = n
		}
		return m.take()
	}
	j := k.job
	if j == nil {
		return m.take()
	}
	j.inflight--
	switch {
	case result == nil:
		m.failed(k, r, now)
	case string(result) == "null":
		m.null(k, r, now)
	default:
		m.answered(k, r, result, now)
	}
	if k.job == j {
		m.pump(k, now)
	}
	return m.take()
}

// Tick is the event "time is now": requests past their deadline count as
// failed, retries that are due are sent, jobs past their deadline give up.
func (m *Machine) Tick(now time.Time) Effects {
	for _, id := range m.expired(now) {
		r, ok := m.reqs[id]
		if !ok {
			continue // dropped by an earlier one's failure (its job gave up or started over)
		}
		delete(m.reqs, id)
		k := m.keys[r.key]
		if k == nil || k.job == nil || r.purpose == purposeHeadLatest || r.purpose == purposeBaseline {
			continue // not one of a job's requests: a job that started meanwhile does not count it
		}
		k.job.inflight--
		m.failed(k, r, now)
	}
	for _, key := range m.dueHeadWaits(now) {
		delete(m.headWaits, key)
		if k := m.keys[key]; k != nil && k.job == nil {
			m.sendNew(k, latestBlock(purposeHeadLatest), now)
		}
	}
	for _, key := range m.keysWithJobs() {
		k := m.keys[key] // each key's effects touch that key only: its job still runs
		if j := k.job; j.wait && !now.Before(j.waitUntil) {
			// No head named the held log's block in time: the machine
			// finds where it belongs itself.
			if j.noFork {
				k.job = nil
				m.runHeld(k, false, noBlock, now)
				continue
			}
			m.findForkFor(k, now)
			continue
		}
		if !now.Before(k.job.deadline) {
			m.giveUp(k, "timeout", now)
			continue
		}
		if m.resume(k, k.job, now) {
			continue
		}
		m.pump(k, now)
	}
	return m.take()
}

// expired returns the ids of the requests past their deadline, in the
// order they were sent (effects in a stable order: a map's is not, and a
// run of the machine would not repeat).
func (m *Machine) expired(now time.Time) []uint64 {
	var ids []uint64
	for id, r := range m.reqs {
		if !now.Before(r.deadline) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// dueHeadWaits returns the keys whose HeadWait is over, sorted (effects
// in a stable order).
func (m *Machine) dueHeadWaits(now time.Time) []string {
	var due []string
	for key, at := range m.headWaits {
		if !now.Before(at) {
			due = append(due, key)
		}
	}
	slices.Sort(due)
	return due
}

// sortedKeys returns the machine's keys in order (effects in a stable
// order).
func (m *Machine) sortedKeys() []string {
	return slices.Sorted(maps.Keys(m.keys))
}

// keysWithJobs returns the keys whose job runs, sorted (effects in a
// stable order).
func (m *Machine) keysWithJobs() []string {
	return slices.DeleteFunc(m.sortedKeys(), func(key string) bool { return m.keys[key].job == nil })
}

// failed handles an error answer or a timeout of r.
func (m *Machine) failed(k *keyState, r *request, now time.Time) {
	r.attempts++
	if r.attempts >= m.cfg.Attempts {
		if r.purpose == purposeHeadSearch {
			// Where the gap starts stays unknown; the heads go out.
			m.searchEnded(k, 0, false, now)
			return
		}
		if r.purpose == purposeLogsHeader {
			// The check is lost, not the logs.
			k.job.chunks--
			m.afterChunk(k, now)
			return
		}
		if r.purpose == purposeGetLogs || r.purpose == purposeLogsByHash || r.purpose == purposeLogsBlock {
			// That range stays missing; the rest is delivered.
			k.job.giveUpChunk(r)
			k.job.chunks--
			m.afterChunk(k, now)
			return
		}
		m.giveUp(k, "failed", now)
		return
	}
	m.retryLater(k, r, now)
}

// null handles a null answer: the node has not got the block yet.
func (m *Machine) null(k *keyState, r *request, now time.Time) {
	switch r.purpose {
	case purposeHeadByHash:
		if r.nulls > 0 {
			// Asked twice: the node no longer has the block the walk
			// needs (the parent of a head it pushed), so that head is
			// of a branch a reorg orphaned (anvil forgets such blocks).
			m.headOrphaned(k, now)
			return
		}
	case purposeHeadByNumber, purposeCheckBlock, purposeLogsBlock, purposeHeadSearch:
	case purposeLogsHeader:
		// The node no longer has it (another branch's, pruned): the
		// check is lost, not the logs.
		k.job.chunks--
		m.afterChunk(k, now)
		return
	default:
		m.failed(k, r, now)
		return
	}
	r.nulls++
	if r.nulls > m.cfg.NullRetries {
		if r.purpose == purposeHeadSearch {
			m.searchEnded(k, 0, false, now)
			return
		}
		m.giveUp(k, "unavailable", now)
		return
	}
	m.retryLater(k, r, now)
}

func (m *Machine) retryLater(k *keyState, r *request, now time.Time) {
	r.retryAt = now.Add(m.cfg.RetryDelay)
	k.job.queue = append(k.job.queue, r)
}

func (m *Machine) startJob(k *keyState, now time.Time) *job {
	k.job = &job{started: now, deadline: now.Add(m.cfg.JobTimeout)}
	return k.job
}

// enqueue adds a new request to k's job and sends what may be sent.
func (m *Machine) enqueue(k *keyState, r *request, now time.Time) {
	k.job.queue = append(k.job.queue, r)
	m.pump(k, now)
}

// pump sends queued requests that are due while the job has room.
func (m *Machine) pump(k *keyState, now time.Time) {
	j := k.job
	if j == nil {
		return
	}
	kept := j.queue[:0]
	for _, r := range j.queue {
		if j.inflight >= m.cfg.MaxInFlight || (!r.retryAt.IsZero() && now.Before(r.retryAt)) {
			kept = append(kept, r)
			continue
		}
		r.retryAt = time.Time{}
		j.inflight++
		m.sendNew(k, r, now)
	}
	clear(j.queue[len(kept):])
	j.queue = kept
}

// blockByNumber is eth_getBlockByNumber(n, false), for purpose.
// latestBlock asks for the node's head block, its header only.
func latestBlock(purpose string) *request {
	return &request{method: "eth_getBlockByNumber", params: []byte(`["latest",false]`), purpose: purpose}
}

func blockByNumber(n uint64, purpose string) *request {
	return &request{method: "eth_getBlockByNumber", params: []byte(`["` + quantity(n) + `",false]`), purpose: purpose, num: n}
}

// sendNew sends r under a fresh id.
func (m *Machine) sendNew(k *keyState, r *request, now time.Time) {
	m.nextID++
	r.id = m.nextID
	r.key = k.key
	r.deadline = now.Add(m.cfg.RequestTimeout)
	m.reqs[r.id] = r
	m.eff.Sends = append(m.eff.Sends, Send{ID: r.id, Key: k.key, Method: r.method, Params: r.params})
}

func (m *Machine) answered(k *keyState, r *request, result []byte, now time.Time) {
	switch r.purpose {
	case purposeHeadByNumber, purposeHeadByHash:
		m.headAnswered(k, r, result, now)
	case purposeHeadSearch:
		m.searchAnswered(k, r, result, now)
	case purposeHeadNumber, purposeCheckBlock, purposeGetLogs, purposeLogsBlock, purposeLogsByHash, purposeLogsHeader:
		m.logsAnswered(k, r, result, now)
	case purposeHistAnchor:
		m.anchorAnswered(k, r, result, now)
	}
}

// endJob finishes k's job: counts its duration, then runs the pushes it
// held through the usual rules (one of them may start the next job).
func (m *Machine) endJob(k *keyState, now time.Time) {
	j := k.job
	m.dropRequests(k.key)
	k.job = nil
	if !j.wait {
		m.eff.Durations = append(m.eff.Durations, now.Sub(j.started))
	}
	if k.kind == kindLogs {
		k.held = dropFetchedStale(k.held, j)
	}
	if k.kind == kindLogs && k.owedTo != 0 {
		// A head jump came while it ran: its blocks next, ahead of
		// what is held.
		from, to := k.owedFrom, k.owedTo
		k.owedTo = 0
		m.startJump(k, from, to, nil, now)
		return
	}
	above := noBlock
	if j.forLog && j.haveHead {
		// Logs of blocks above its head are live pushes it only held:
		// placed as such (a reorg the job did not see may have replaced
		// their block, or a block of the key's below them).
		above = j.head
	}
	m.runHeld(k, !j.forLog, above, now)
}

// noBlock is above every block number: no held log is fresh by its block.
const noBlock = ^uint64(0)

// runHeld runs the pushes k held through the usual rules, in order, until
// one of them starts another job (the rest wait for it). fresh says held
// logs are placed as live pushes are (place): they were held only while
// the key waited for heads, or behind a job that did not look for them;
// so are those of blocks above `above`.
func (m *Machine) runHeld(k *keyState, fresh bool, above uint64, now time.Time) {
	held := k.held
	k.held = nil
	var removedAt map[string]int
	if k.kind == kindLogs {
		removedAt = removals(held)
	}
	for i, res := range held {
		if k.job != nil {
			// A held push started another job: the rest wait for it.
			k.held = append(k.held, held[i:]...)
			return
		}
		switch k.kind {
		case kindHeads:
			if h, ok := parseHeader(res); ok {
				m.onHead(k, h, false, now)
				continue
			}
		case kindLogs:
			if l, ok := parseLog(res); ok {
				if !l.removed && removedAt[logID(l)] > i {
					// Orphaned by a reorg the node pushed while
					// the job ran: the job delivered the chain as it
					// is now, which may not have this block's number
					// at all (a block with no matching log), and the
					// subscriber need not get a log only to be told
					// it is gone. Its removal, not sent either, is
					// dropped by onLog.
					continue
				}
				m.heldAbove = !fresh && l.block > above
				m.onLog(k, l, false, fresh || m.heldAbove, now)
				m.heldAbove = false
				continue
			}
		}
		m.deliver(k, false, res)
	}
}

// giveUp ends k's job past a bound: what it has is delivered in order,
// then what it held, and the gap is counted.
func (m *Machine) giveUp(k *keyState, reason string, now time.Time) {
	j := k.job
	if j == nil {
		return
	}
	if k.kind == kindLogs && (!j.resumeAt.IsZero() || m.forkMoved(k, j)) {
		// Its fork still moving: nothing it fetched can be placed. It
		// delivers none of it and states the blocks the key is owed;
		// its covered block does not move (a later backfill may still
		// fetch them).
		m.gapBlocks(k, reason, k.covered+1, max(j.owedHead, j.head, k.covered+1))
		j.fetched, j.fetching, j.replaced, j.missing = nil, false, nil, false
		j.missingFrom, j.missingTo = 0, 0
		m.deliverLogs(k, now)
		return
	}
	m.gap(k, reason)
	if j.anchor {
		m.anchorFailed(k, now)
		return
	}
	switch k.kind {
	case kindHeads:
		m.deliverChain(k, now)
	case kindLogs:
		j.missing = false // counted just now
		m.deliverLogs(k, now)
	}
}
