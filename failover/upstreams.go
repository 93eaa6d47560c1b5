package failover

import (
	"fmt"
	"strconv"
	"time"

	"github.com/muxd/muxd/core"
	"github.com/muxd/muxd/gapfill"
	"github.com/muxd/muxd/router"
)

// Core is what Upstreams drives: package core's *core.Core. Upstreams makes
// every upstream event of the core: which connection is current, and what
// each connection read that is not muxd's own.
type Core interface {
	UpstreamConnected(e *core.Effects, gen uint64, now time.Time)
	UpstreamSwitch(e *core.Effects, gen uint64, now time.Time)
	UpstreamLost(e *core.Effects, gen uint64, now time.Time)
	UpstreamFrame(e *core.Effects, gen uint64, frame []byte, f router.Frame, scanErr error, now time.Time)
	UpstreamTooLarge(e *core.Effects, gen, uid uint64, inArray bool, now time.Time)
}

// ListConfig configures one list of upstreams (a List).
type ListConfig struct {
	Config
	// WatchHeads says every connection carries muxd's newHeads health
	// subscription. It is taken as set with more than one upstream; a
	// single upstream may go without (its heads then decide nothing).
	WatchHeads bool
	// Hosts names each upstream in notes (redacted URLs); missing names
	// are "".
	Hosts []string
}

// List is one list of upstreams (the configuration's; a reload that
// changes it makes another) and its Selector. Make one with NewList.
type List struct {
	sel   *Selector
	multi bool
	watch bool
	hosts []string
	conns []*Conn // each upstream's live connection, nil while it is down
}

// NewList returns a list of cfg.Upstreams upstreams, all disconnected.
func NewList(cfg ListConfig) (*List, error) {
	sel, err := New(cfg.Config)
	if err != nil {
		return nil, err
	}
	return &List{
		sel:   sel,
		multi: cfg.Upstreams > 1,
		watch: cfg.WatchHeads || cfg.Upstreams > 1,
		hosts: cfg.Hosts,
		conns: make([]*Conn, cfg.Upstreams),
	}, nil
}

// Status is the Selector's Status of upstream i at now.
func (l *List) Status(i int, now time.Time) Status { return l.sel.Status(i, now) }

// AnyHealthy is the Selector's AnyHealthy at now.
func (l *List) AnyHealthy(now time.Time) bool { return l.sel.AnyHealthy(now) }

// Multi reports whether the list has more than one upstream: health
// requests include the chain id, and failover applies.
func (l *List) Multi() bool { return l.multi }

func (l *List) host(i int) string {
	if i >= 0 && i < len(l.hosts) {
		return l.hosts[i]
	}
	return ""
}

// label names upstream i in notes and metrics: its number from 1, "none"
// for -1.
func label(i int) string {
	if i < 0 {
		return "none"
	}
	return strconv.Itoa(i + 1)
}

// The streams a connection's heads come from (Conn.last).
const (
	streamHealth = iota // muxd's own newHeads subscription
	streamRouted        // a push the core routed to clients
	numStreams
)

// Conn is one connection of one upstream of a List, from Upstreams.Connected
// to Upstreams.Lost.
type Conn struct {
	list  *List
	index int
	// gen is the core's number for the connection, given when it is first
	// made active (0 before); demoted is set when the traffic moved away
	// from it (it drains, then is closed).
	gen     uint64
	demoted bool
	// healthSub is the node's id (raw JSON) of the health subscription.
	healthSub string
	// head is the head the selector was last given; last is the last head
	// of each stream, to tell a reorg to a shorter branch (that stream
	// going back) from a head one stream shows after the other did.
	head uint64
	last [numStreams]uint64
}

// Gen returns the core's number for c, 0 while it has never been active.
func (c *Conn) Gen() uint64 { return c.gen }

// Demoted reports whether the traffic moved away from c: it drains what it
// owes, then the shell closes it (core.Effects.Close).
func (c *Conn) Demoted() bool { return c.demoted }

// Index returns c's upstream's index in its List.
func (c *Conn) Index() int { return c.index }

// List returns the List of c's upstream.
func (c *Conn) List() *List { return c.list }

// Level is a Note's log level.
type Level uint8

// The levels of a Note.
const (
	LevelInfo Level = iota
	LevelWarn
	LevelError
)

// Note is a line for the log: Msg with slog-style key/value Args.
type Note struct {
	Level Level
	Msg   string
	Args  []any
}

// Switchover is a change of the active connection.
type Switchover struct {
	// From is the connection that was active (nil: none); it now drains.
	// To is the one now active.
	From, To *Conn
	Reason   Reason
	// Counted says the change is a failover to count: another upstream of
	// the same list took over (not the first, not the same one back).
	Counted bool
	// Core is the core's effects of the change, to apply with To as the
	// active connection.
	Core *core.Effects
}

// Effects is what the shell must do after one event of Upstreams, beside
// the core effects of the event: in this order,
//
//  1. Send: write these frames on the event's connection (the health
//     requests of a new connection).
//  2. the event's core effects, with the active connection as it was.
//  3. Switch: when not nil, To is now active; apply its Core effects.
//  4. ChainMismatch: count it for the event's connection.
//  5. Notes: log them.
type Effects struct {
	Send          [][]byte
	Switch        *Switchover
	ChainMismatch bool
	Notes         []Note
}

// Reset empties e for the next event, keeping its memory.
func (e *Effects) Reset() {
	clear(e.Send)
	e.Send = e.Send[:0]
	e.Switch = nil
	e.ChainMismatch = false
	clear(e.Notes)
	e.Notes = e.Notes[:0]
}

func (e *Effects) note(l Level, msg string, args ...any) {
	e.Notes = append(e.Notes, Note{l, msg, args})
}

// Upstreams is the upstream set: the current List (and the connections of
// lists a reload replaced, until they are lost), which connection is
// active, and every connection's health requests, health answers and
// heads. It makes the core's upstream events. Like the core it is sans
// I/O: each event changes its state and fills an Effects for the shell to
// carry out; the shell serializes the calls. See the package doc.
type Upstreams struct {
	core   Core
	cur    *List
	active *Conn
	// gens counts the connections made active: the core's numbers.
	gens uint64
	// lastActive is the index, in cur, of the upstream last made active
	// (-1 before the first): only another one taking over is a failover.
	lastActive int
	stopped    bool
}

// NewUpstreams returns the upstream set of list l, none connected, that
// drives c.
func NewUpstreams(c Core, l *List) *Upstreams {
	return &Upstreams{core: c, cur: l, lastActive: -1}
}

// Active returns the active connection, nil while none is.
func (m *Upstreams) Active() *Conn { return m.active }

// Current returns the list in force.
func (m *Upstreams) Current() *List { return m.cur }

// Use makes l the list in force (a reload): the traffic moves to one of its
// upstreams once its selector picks one, as in a failover. Failovers are
// counted within one list: the move to l is none.
func (m *Upstreams) Use(e *Effects, l *List, now time.Time) {
	e.Reset()
	m.cur, m.lastActive = l, -1
	m.decide(e, now)
}

// Stop ends the decisions: muxd is shutting down, and no connection is
// made active any more.
func (m *Upstreams) Stop() { m.stopped = true }

// Connected is the event of a new connection of upstream i of l. Its
// health requests go in e.Send.
func (m *Upstreams) Connected(e *Effects, l *List, i int, now time.Time) (*Conn, error) {
	e.Reset()
	if i < 0 || i >= len(l.conns) {
		return nil, fmt.Errorf("failover: upstream %d of %d", i, len(l.conns))
	}
	c := &Conn{list: l, index: i}
	l.conns[i] = c
	switch {
	case l.multi:
		e.Send = append(e.Send, []byte(healthChainIDReq), []byte(healthHeadsReq))
	case l.watch:
		e.Send = append(e.Send, []byte(healthHeadsReq))
	}
	l.sel.Connected(i, now)
	if !l.watch {
		l.sel.HeadsUnknown(i, now)
	}
	m.decide(e, now)
	return c, nil
}

// Unreachable is the event of a failed dial of upstream i of l.
func (m *Upstreams) Unreachable(e *Effects, l *List, i int, now time.Time) {
	e.Reset()
	l.sel.Unreachable(i, now)
	m.decide(e, now)
}

// Tick gives the selector the time, so that a stalled upstream or a due
// failback is noticed without other events (with more than one upstream).
func (m *Upstreams) Tick(e *Effects, now time.Time) {
	e.Reset()
	if m.cur.multi {
		m.decide(e, now)
	}
}

// Frame is the event of a frame read on c, scanned by the shell as for
// core.UpstreamFrame. A lone message whose id is muxd's own (see the id
// space), or a push of c's health subscription, is taken here, ce then
// empty; anything else is the core's (ce its effects). A newHeads head the
// core routed to clients from the active connection counts as that
// connection's head too.
func (m *Upstreams) Frame(ce *core.Effects, e *Effects, c *Conn, frame []byte, f router.Frame, scanErr error, now time.Time) {
	e.Reset()
	if scanErr == nil && !f.Batch && len(f.Messages) == 1 && f.Messages[0].Invalid == nil && m.own(e, c, frame, &f.Messages[0], now) {
		ce.Reset()
		return
	}
	m.core.UpstreamFrame(ce, c.gen, frame, f, scanErr, now)
	// A head clients were sent: the active node's head is at least that,
	// whatever its health subscription has said so far.
	if ce.Head != 0 && c == m.active && m.head(c, ce.Head, streamRouted, now) {
		m.decide(e, now)
	}
}

// TooLarge is the event of an answer on c past the shell's read limit,
// whose first bytes carry the core's upstream id uid (core.UpstreamTooLarge).
func (m *Upstreams) TooLarge(ce *core.Effects, e *Effects, c *Conn, uid uint64, inArray bool, now time.Time) {
	e.Reset()
	m.core.UpstreamTooLarge(ce, c.gen, uid, inArray, now)
}

// Lost is the event of c's end (its failure, or its close after draining).
func (m *Upstreams) Lost(ce *core.Effects, e *Effects, c *Conn, now time.Time) {
	e.Reset()
	l := c.list
	if l.conns[c.index] == c {
		l.conns[c.index] = nil
	}
	if !c.demoted {
		l.sel.Lost(c.index, now)
	}
	if m.active == c {
		m.active = nil
	}
	if c.gen != 0 {
		m.core.UpstreamLost(ce, c.gen, now)
	} else {
		ce.Reset()
	}
	m.decide(e, now)
}

// own takes msg, the lone message of frame read on c, when it is muxd's
// own, and reports whether it was.
func (m *Upstreams) own(e *Effects, c *Conn, frame []byte, msg *router.Message, now time.Time) bool {
	l := c.list
	if !msg.HasID() {
		if c.healthSub == "" || !msg.Subscription.Present() || string(msg.Subscription.In(frame)) != c.healthSub {
			return false
		}
		if n, _, _, ok := gapfill.PushedHead(msg.Params.In(frame)); ok {
			m.head(c, n, streamHealth, now)
		}
		m.decide(e, now)
		return true
	}
	current := l.conns[c.index] == c
	switch Owner(msg.ID.In(frame)) {
	case OwnerProbe:
		// keepalive's: hearing, already recorded by the shell.
		return true
	case OwnerHealthChain:
		if !l.watch {
			return false
		}
		id := ""
		if msg.Result.Present() {
			id = string(msg.Result.In(frame))
		}
		if !c.demoted && current && !l.sel.ChainID(c.index, id, now) {
			e.ChainMismatch = true
			e.note(LevelError, "upstream is on another chain (or did not say): it is never used",
				"upstream", label(c.index), "host", l.host(c.index), "chain_id", id)
		}
	case OwnerHealthHeads:
		if !l.watch {
			return false
		}
		if msg.Result.Present() {
			c.healthSub = string(msg.Result.In(frame))
			break
		}
		e.note(LevelWarn, "upstream refused muxd's newHeads subscription: its head is unknown", "upstream", label(c.index))
		if current {
			l.sel.HeadsUnknown(c.index, now)
		}
	default:
		return false
	}
	m.decide(e, now)
	return true
}

// head gives the selector head n of c from stream, and reports whether it
// did. A head is taken when it is higher than c's last, or lower than the
// last of its own stream: that stream went back, a reorg to a shorter
// branch. A head at or below c's last that its stream has not gone back
// from is one the other stream showed first (geth pushes each
// subscription on its own), not taken, so that a failback never goes to a
// node behind what clients were sent. Nothing of a demoted connection, or
// of one its upstream has replaced, is taken.
func (m *Upstreams) head(c *Conn, n uint64, stream int, now time.Time) bool {
	if c.demoted || c.list.conns[c.index] != c {
		return false
	}
	back := n < c.last[stream]
	c.last[stream] = n
	if n <= c.head && !back {
		return false
	}
	c.head = n
	c.list.sel.Head(c.index, n, now)
	return true
}

// decide asks the current list's selector whether the active connection
// changes now, and if so makes the change in the core (e.Switch).
func (m *Upstreams) decide(e *Effects, now time.Time) {
	if m.stopped {
		return
	}
	l := m.cur
	sw, ok := l.sel.Decide(now)
	if !ok {
		return
	}
	var to *Conn
	if sw.To >= 0 {
		to = l.conns[sw.To]
	}
	if to == nil {
		if l.multi {
			e.note(LevelWarn, "no upstream to make active", "from", label(sw.From), "reason", sw.Reason.String())
		}
		return
	}
	counted := sw.Reason != ReasonFirst && m.lastActive >= 0 && sw.To != m.lastActive
	m.lastActive = sw.To
	m.gens++
	to.gen = m.gens
	ce := new(core.Effects)
	old := m.active
	if old != nil {
		// The old connection drains what it owes and is closed, then
		// dialled again as a standby: until then it is not a candidate.
		old.demoted = true
		old.list.sel.Lost(old.index, now)
		m.core.UpstreamSwitch(ce, to.gen, now)
		if old.list != to.list {
			e.note(LevelInfo, "upstream list reloaded: traffic moved to the new list", "upstream", label(to.index), "host", l.host(to.index))
		}
	} else {
		m.core.UpstreamConnected(ce, to.gen, now)
	}
	m.active = to
	if l.multi {
		e.note(LevelInfo, "upstream active", "upstream", label(to.index), "host", l.host(to.index), "from", label(sw.From), "reason", sw.Reason.String())
	}
	e.Switch = &Switchover{From: old, To: to, Reason: sw.Reason, Counted: counted, Core: ce}
}
