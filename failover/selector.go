package failover

import (
	"fmt"
	"strings"
	"time"
)

// Config configures a Selector.
type Config struct {
	// Upstreams is how many upstreams there are, index 0 the most
	// preferred. At least 1.
	Upstreams int
	// MaxHeadLag is how many blocks an upstream's head may be behind the
	// best head and the upstream stay healthy.
	MaxHeadLag uint64
	// HeadTimeout is how long an upstream may go without a new head (since
	// its last one, or since it connected) before it is stalled. Positive.
	HeadTimeout time.Duration
	// FailbackAfter is how long the preferred upstream must have been
	// healthy before it is made active again; <= 0: never.
	FailbackAfter time.Duration
	// LagGrace is how long an upstream must have stayed more than
	// MaxHeadLag behind before it counts as lagging, so that a head that
	// merely reached muxd late (a busy connection, a burst of fast blocks)
	// does not move the traffic. 0: at once.
	LagGrace time.Duration
	// StartWait is how long, at start (no upstream active yet, ever), a
	// less preferred upstream is held back while a more preferred one has
	// not been tried yet (connected and its chain id judged, or a dial
	// failed: Unreachable), so that muxd starts on the preferred upstream
	// instead of whichever answered first and failing back later. 0: no
	// wait.
	StartWait time.Duration
	// ChainID, when set, is the chain id (a hex quantity) every upstream
	// must report; "": the first one reported becomes the reference.
	ChainID string
}

// Reason is why the active upstream changed. Its String is the metric
// label value.
type Reason uint8

// The reasons of a Switch.
const (
	ReasonFirst    Reason = iota // there was no active upstream yet
	ReasonLost                   // the active was lost (or its chain id mismatched)
	ReasonLagging                // the active's head was too far behind
	ReasonStalled                // the active pushed no head for HeadTimeout
	ReasonFailback               // back to the preferred upstream
)

var reasonNames = [...]string{"first", "lost", "lagging", "stalled", "failback"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// Reasons returns every Reason, for metrics to register their labels.
func Reasons() []Reason {
	return []Reason{ReasonFirst, ReasonLost, ReasonLagging, ReasonStalled, ReasonFailback}
}

// Switch is a change of the active upstream. From and To are upstream
// indexes, -1 for none.
type Switch struct {
	From, To int
	Reason   Reason
}

func (s Switch) String() string { return fmt.Sprintf("%d>%d %s", s.From, s.To, s.Reason) }

// Why an upstream is not healthy (Status.Why).
const (
	WhyDisconnected  = "disconnected"
	WhyChainUnknown  = "chain id unknown"
	WhyChainMismatch = "chain id mismatch"
	WhyStalled       = "stalled"
	WhyLagging       = "lagging"
)

// Status is one upstream's state, for metrics and logs.
type Status struct {
	Connected bool
	ChainOK   bool // its chain id was reported on this connection and matches the reference
	Healthy   bool
	Active    bool
	HasHead   bool   // it pushed a head on this connection (or, disconnected, on the last)
	Head      uint64 // that head's number
	Why       string // "" when healthy, else one of the Why constants
	// HeadAt is when that head came (zero: none); ConnectedAt when the
	// connection came (zero: never connected).
	HeadAt, ConnectedAt time.Time
	// Best is the highest head of the eligible upstreams (0: none).
	// BehindSince is when a head above this upstream's was first seen
	// (by any upstream), zero while it is at Best or has no head: how
	// long it has been behind.
	Best        uint64
	BehindSince time.Time
}

type chainState uint8

const (
	chainUnknown chainState = iota
	chainOK
	chainMismatch
)

// upstream is what the Selector knows of one upstream's current (or last)
// connection.
type upstream struct {
	connected   bool
	connectedAt time.Time
	chain       chainState
	hasHead     bool
	head        uint64
	headAt      time.Time
	// why is the last evaluation's verdict ("" healthy); healthySince is
	// when an evaluation last found it healthy after one that did not.
	why          string
	healthySince time.Time
	// behindSince is when it last fell more than MaxHeadLag behind the
	// best head (zero while it is not), for Config.LagGrace.
	behindSince time.Time
	// headless is set when this connection cannot show its head (the node
	// refused muxd's newHeads subscription): see HeadsUnknown.
	headless bool
}

// seenHead is a best head and when it was first seen.
type seenHead struct {
	n  uint64
	at time.Time
}

// maxSeen bounds the best heads remembered for Status.BehindSince: an
// upstream further behind is behind since at least the oldest of them.
const maxSeen = 256

// Selector decides which upstream is active. Make one with New.
type Selector struct {
	cfg Config
	ups []upstream
	// seen are the best heads lately, ascending, each when first seen.
	seen []seenHead
	ref  string // the reference chain id, normalized; "" until reported
	// active is the active upstream's index, -1 none; lostActive: it is
	// -1 because the last active was lost.
	active     int
	lostActive bool
	// everActive: an upstream has been active; start is the time of the
	// first event, and tried[i] says upstream i was tried (StartWait).
	everActive bool
	start      time.Time
	tried      []bool
}

// New returns a Selector with every upstream disconnected and none active.
func New(cfg Config) (*Selector, error) {
	if cfg.Upstreams < 1 {
		return nil, fmt.Errorf("failover: %d upstreams: need at least one", cfg.Upstreams)
	}
	if cfg.HeadTimeout <= 0 {
		return nil, fmt.Errorf("failover: head timeout %v: must be positive", cfg.HeadTimeout)
	}
	ups := make([]upstream, cfg.Upstreams)
	for i := range ups {
		ups[i].why = WhyDisconnected
	}
	ref := ""
	if cfg.ChainID != "" {
		n, ok := normalizeChainID(cfg.ChainID)
		if !ok {
			return nil, fmt.Errorf("failover: chain id %q: not a hex quantity", cfg.ChainID)
		}
		ref = n
	}
	return &Selector{cfg: cfg, ups: ups, ref: ref, active: -1, tried: make([]bool, cfg.Upstreams)}, nil
}

// get returns upstream i, nil when i is out of range.
func (s *Selector) get(i int) *upstream {
	if i < 0 || i >= len(s.ups) {
		return nil
	}
	return &s.ups[i]
}

// Connected reports that upstream i's connection is up: a new connection,
// whose chain id and head are not known yet.
func (s *Selector) Connected(i int, now time.Time) {
	u := s.get(i)
	if u == nil {
		return
	}
	s.observe(now)
	*u = upstream{connected: true, connectedAt: now, why: WhyChainUnknown}
	s.observe(now)
}

// ChainID reports upstream i's answer to eth_chainId. Without
// Config.ChainID, the first id any upstream reports becomes the reference. It returns false when id does not
// match the reference (or is not a hex quantity): i is then never eligible
// while this connection lasts (with a single upstream it does not matter).
// It also returns false, ignoring the call, when i is out of range or not
// connected.
func (s *Selector) ChainID(i int, id string, now time.Time) bool {
	u := s.get(i)
	if u == nil || !u.connected {
		return false
	}
	if u.chain == chainMismatch {
		return false
	}
	s.observe(now)
	s.tried[i] = true
	n, ok := normalizeChainID(id)
	switch {
	case !ok:
		u.chain = chainMismatch
	case s.ref == "":
		s.ref, u.chain = n, chainOK
	case n == s.ref:
		u.chain = chainOK
	default:
		u.chain = chainMismatch
	}
	s.observe(now)
	return u.chain == chainOK
}

// normalizeChainID returns id as a canonical hex quantity ("0x" and
// lower-case digits without leading zeros), false when it is not one. The
// quotes of a JSON string are allowed.
func normalizeChainID(id string) (string, bool) {
	if len(id) >= 2 && id[0] == '"' && id[len(id)-1] == '"' {
		id = id[1 : len(id)-1]
	}
	if len(id) < 3 || (id[:2] != "0x" && id[:2] != "0X") {
		return "", false
	}
	digits := id[2:]
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return "", false
		}
	}
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		digits = "0"
	}
	return "0x" + strings.ToLower(digits), true
}

// Head reports a newHeads push from upstream i (ignored when i is not
// connected). A lower number than before (a reorg to a shorter branch) is
// taken as it is.
func (s *Selector) Head(i int, number uint64, now time.Time) {
	u := s.get(i)
	if u == nil || !u.connected {
		return
	}
	s.observe(now)
	u.hasHead, u.head, u.headAt = true, number, now
	if s.eligible(u) && (len(s.seen) == 0 || number > s.seen[len(s.seen)-1].n) {
		if len(s.seen) == maxSeen {
			s.seen = append(s.seen[:0], s.seen[1:]...)
		}
		s.seen = append(s.seen, seenHead{number, now})
	}
	s.observe(now)
}

// behindSince is when the first head above n was seen, zero when none
// above n is known to be best.
func (s *Selector) behindSince(n, best uint64) time.Time {
	if best <= n || len(s.seen) == 0 {
		return time.Time{}
	}
	for _, h := range s.seen {
		if h.n > n {
			return h.at
		}
	}
	return time.Time{}
}

// HeadsUnknown reports that upstream i's connection will show no heads
// (the node refused muxd's newHeads subscription). With a single upstream
// it is then healthy while connected, as no head can say otherwise; with
// several it is stalled once HeadTimeout has passed, as before.
func (s *Selector) HeadsUnknown(i int, now time.Time) {
	u := s.get(i)
	if u == nil || !u.connected {
		return
	}
	s.observe(now)
	u.headless = true
	s.observe(now)
}

// Lost reports that upstream i's connection is gone, or that the shell is
// draining it. Its last head stays in its Status but counts for nothing.
func (s *Selector) Lost(i int, now time.Time) {
	u := s.get(i)
	if u == nil {
		return
	}
	s.observe(now)
	if u.connected {
		s.tried[i] = true
	}
	u.connected = false
	s.observe(now)
}

// Unreachable reports that a dial of upstream i failed: it has been tried
// (see Config.StartWait) and stays disconnected.
func (s *Selector) Unreachable(i int, now time.Time) {
	if s.get(i) == nil {
		return
	}
	s.observe(now)
	s.tried[i] = true
}

// Active returns the active upstream's index, -1 when none is.
func (s *Selector) Active() int { return s.active }

// Decide returns the Switch to make, and true, when the active upstream
// must change (see the package doc); the caller makes To active. Otherwise
// it returns false, and a Switch from the active to itself. Call it after
// every event and on a tick.
func (s *Selector) Decide(now time.Time) (Switch, bool) {
	s.observe(now)
	none := Switch{From: s.active, To: s.active}
	a := s.get(s.active)
	switch {
	case a == nil:
		to := s.choose()
		if to < 0 || s.holdAtStart(to, now) {
			return none, false
		}
		r := ReasonFirst
		if s.lostActive {
			r = ReasonLost
		}
		return s.switchTo(to, r), true
	case !s.eligible(a):
		return s.switchTo(s.choose(), ReasonLost), true
	case a.why != "":
		if !s.anyObservedHealthy() {
			return none, false
		}
		r := ReasonLagging
		if a.why == WhyStalled {
			r = ReasonStalled
		}
		return s.switchTo(s.choose(), r), true
	}
	if s.cfg.FailbackAfter <= 0 {
		return none, false
	}
	p := s.mostPreferredHealthy()
	if p < 0 || p >= s.active {
		return none, false
	}
	u := &s.ups[p]
	if now.Sub(u.healthySince) < s.cfg.FailbackAfter || !u.hasHead || !a.hasHead || u.head < a.head {
		return none, false
	}
	return s.switchTo(p, ReasonFailback), true
}

// holdAtStart reports whether upstream to must wait at start because a
// more preferred upstream has not been tried yet (Config.StartWait).
func (s *Selector) holdAtStart(to int, now time.Time) bool {
	if s.everActive || s.cfg.StartWait <= 0 || now.Sub(s.start) >= s.cfg.StartWait {
		return false
	}
	for i := range to {
		if !s.tried[i] {
			return true
		}
	}
	return false
}

func (s *Selector) switchTo(to int, r Reason) Switch {
	sw := Switch{From: s.active, To: to, Reason: r}
	if to >= 0 {
		s.everActive = true
	}
	s.active = to
	s.lostActive = to < 0
	return sw
}

// choose returns the upstream to make active (see the package doc), from
// the last evaluation.
func (s *Selector) choose() int {
	var top uint64
	for i := range s.ups {
		if u := &s.ups[i]; u.why == "" && u.hasHead && u.head > top {
			top = u.head
		}
	}
	for i := range s.ups {
		if u := &s.ups[i]; u.why == "" && (!u.hasHead || u.head == top) {
			return i
		}
	}
	for i := range s.ups {
		if s.eligible(&s.ups[i]) {
			return i
		}
	}
	return -1
}

func (s *Selector) mostPreferredHealthy() int {
	for i := range s.ups {
		if s.ups[i].why == "" {
			return i
		}
	}
	return -1
}

func (s *Selector) anyObservedHealthy() bool { return s.mostPreferredHealthy() >= 0 }

func (s *Selector) eligible(u *upstream) bool {
	return u.connected && (len(s.ups) == 1 || u.chain == chainOK)
}

// best returns the highest head among the eligible upstreams, false when
// none has one.
func (s *Selector) best() (uint64, bool) {
	var best uint64
	found := false
	for i := range s.ups {
		if u := &s.ups[i]; s.eligible(u) && u.hasHead && (!found || u.head > best) {
			best, found = u.head, true
		}
	}
	return best, found
}

// why returns why u is not healthy at now ("" when it is), given the best
// head.
func (s *Selector) why(u *upstream, now time.Time, best uint64) string {
	single := len(s.ups) == 1
	switch {
	case !u.connected:
		return WhyDisconnected
	case single && u.headless:
		return ""
	case single:
		// No chain id to compare and no other head to lag behind: only
		// a head within HeadTimeout counts.
	case u.chain == chainUnknown:
		return WhyChainUnknown
	case u.chain == chainMismatch:
		return WhyChainMismatch
	}
	last := u.connectedAt
	if u.hasHead && u.headAt.After(last) {
		last = u.headAt
	}
	if now.Sub(last) > s.cfg.HeadTimeout {
		return WhyStalled
	}
	if s.behind(u, best) && !u.behindSince.IsZero() && now.Sub(u.behindSince) >= s.cfg.LagGrace {
		return WhyLagging
	}
	return ""
}

// behind reports whether u's head is more than MaxHeadLag behind best.
func (s *Selector) behind(u *upstream, best uint64) bool {
	return u.hasHead && best > u.head && best-u.head > s.cfg.MaxHeadLag
}

// observe evaluates every upstream's health at now, restarting
// healthySince for each that became healthy.
func (s *Selector) observe(now time.Time) {
	if s.start.IsZero() {
		s.start = now
	}
	best, _ := s.best()
	for i := range s.ups {
		u := &s.ups[i]
		switch {
		case !s.behind(u, best):
			u.behindSince = time.Time{}
		case u.behindSince.IsZero():
			u.behindSince = now
		}
		w := s.why(u, now, best)
		if w == "" && u.why != "" {
			u.healthySince = now
		}
		u.why = w
	}
}

// Status returns upstream i's state at now. It changes nothing; an index
// out of range is disconnected.
func (s *Selector) Status(i int, now time.Time) Status {
	u := s.get(i)
	if u == nil {
		return Status{Why: WhyDisconnected}
	}
	best, _ := s.best()
	w := s.why(u, now, best)
	st := Status{
		Connected:   u.connected,
		ChainOK:     u.connected && u.chain == chainOK,
		Healthy:     w == "",
		Active:      i == s.active,
		HasHead:     u.hasHead,
		Head:        u.head,
		Why:         w,
		ConnectedAt: u.connectedAt,
		Best:        best,
	}
	if u.hasHead {
		st.HeadAt = u.headAt
		if u.connected {
			st.BehindSince = s.behindSince(u.head, best)
		}
	}
	return st
}

// AnyHealthy reports whether any upstream is healthy at now (/readyz). It
// changes nothing.
func (s *Selector) AnyHealthy(now time.Time) bool {
	best, _ := s.best()
	for i := range s.ups {
		if s.why(&s.ups[i], now, best) == "" {
			return true
		}
	}
	return false
}
