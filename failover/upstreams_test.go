package failover

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/muxd/muxd/core"
	"github.com/muxd/muxd/router"
)

// fakeCore records the upstream events Upstreams makes of the core. Its
// UpstreamFrame reports head as the head it routed to clients.
type fakeCore struct {
	calls []string
	head  uint64
}

func (f *fakeCore) UpstreamConnected(e *core.Effects, gen uint64, _ time.Time) {
	e.Reset()
	f.calls = append(f.calls, fmt.Sprintf("connected %d", gen))
}

func (f *fakeCore) UpstreamSwitch(e *core.Effects, gen uint64, _ time.Time) {
	e.Reset()
	f.calls = append(f.calls, fmt.Sprintf("switch %d", gen))
}

func (f *fakeCore) UpstreamLost(e *core.Effects, gen uint64, _ time.Time) {
	e.Reset()
	f.calls = append(f.calls, fmt.Sprintf("lost %d", gen))
}

func (f *fakeCore) UpstreamFrame(e *core.Effects, gen uint64, _ []byte, _ router.Frame, scanErr error, _ time.Time) {
	e.Reset()
	e.Head = f.head
	c := fmt.Sprintf("frame %d", gen)
	if scanErr != nil {
		c += " bad"
	}
	f.calls = append(f.calls, c)
}

func (f *fakeCore) UpstreamTooLarge(e *core.Effects, gen, uid uint64, inArray bool, _ time.Time) {
	e.Reset()
	f.calls = append(f.calls, fmt.Sprintf("toolarge %d %d %v", gen, uid, inArray))
}

// mstep is one line of a machine script: at a time (seconds from t0), one
// event, and what it must do.
//
// Events name a connection as list and index ("a0": list a's upstream 0;
// the script's lists are a and, after "use b", b): "conn a0", "lost a0",
// "unreach a0", "chain a0 ID" (its eth_chainId answer; "chain a0 -" an
// error), "sub a0 ID" (its newHeads health subscription's id; "sub a0 -"
// refused), "health a0 N" (a push of that subscription, head N), "routed
// a0 N" (a frame the core routes, reporting head N to clients; 0: none),
// "frame a0 RAW" (a frame for the core), "probe a0" (keepalive's answer),
// "toolarge a0 UID array|single", "tick", "use b", "stop".
type mstep struct {
	at   int
	do   string
	core string // the core's events, ";"-separated ("" none)
	sw   string // the switch: "a0>a1 reason" (+" counted"), "" none
	send int    // how many frames e.Send holds
	// notes are substrings of e.Notes' messages, in order; mismatch is
	// e.ChainMismatch.
	notes    []string
	mismatch bool
	// heads, when set: each of list a's upstreams' Status.Head (with
	// HasHead), comma-separated, "-" for none.
	heads string
}

type machineRig struct {
	t     *testing.T
	core  *fakeCore
	m     *Upstreams
	lists map[string]*List
	conns map[string]*Conn
	subs  map[string]string // a connection's health subscription id
	names map[*Conn]string
}

func newRig(t *testing.T, a, b ListConfig) *machineRig {
	t.Helper()
	r := &machineRig{t: t, core: new(fakeCore), lists: map[string]*List{}, conns: map[string]*Conn{},
		subs: map[string]string{}, names: map[*Conn]string{}}
	for name, cfg := range map[string]ListConfig{"a": a, "b": b} {
		l, err := NewList(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r.lists[name] = l
	}
	r.m = NewUpstreams(r.core, r.lists["a"])
	return r
}

// scan scans a frame as the shell does.
func scan(raw string) ([]byte, router.Frame, error) {
	frame := []byte(raw)
	f, err := router.ScanUpstream(frame, nil)
	return frame, f, err
}

func headPush(sub string, n uint64) string {
	hash := fmt.Sprintf("0x%064x", n)
	parent := fmt.Sprintf("0x%064x", n-1)
	return `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":` + sub +
		`,"result":{"number":"0x` + strconv.FormatUint(n, 16) + `","hash":"` + hash + `","parentHash":"` + parent + `"}}}`
}

// do plays one event.
func (r *machineRig) do(e *Effects, ev string, now time.Time) {
	t := r.t
	f := strings.Fields(ev)
	var ce core.Effects
	conn := func() *Conn {
		c := r.conns[f[1]]
		if c == nil {
			t.Fatalf("%s: no connection %s", ev, f[1])
		}
		return c
	}
	list := func() (*List, int) {
		i, err := strconv.Atoi(f[1][1:])
		if err != nil {
			t.Fatal(err)
		}
		return r.lists[f[1][:1]], i
	}
	frame := func(raw string) {
		b, fr, err := scan(raw)
		r.m.Frame(&ce, e, conn(), b, fr, err, now)
	}
	switch f[0] {
	case "conn":
		l, i := list()
		c, err := r.m.Connected(e, l, i, now)
		if err != nil {
			t.Fatal(err)
		}
		r.conns[f[1]], r.names[c] = c, f[1]
	case "lost":
		r.m.Lost(&ce, e, conn(), now)
	case "unreach":
		l, i := list()
		r.m.Unreachable(e, l, i, now)
	case "chain":
		if f[2] == "-" {
			frame(`{"jsonrpc":"2.0","id":` + HealthChainID + `,"error":{"code":-32601,"message":"no"}}`)
		} else {
			frame(`{"jsonrpc":"2.0","id":` + HealthChainID + `,"result":"` + f[2] + `"}`)
		}
	case "sub":
		if f[2] == "-" {
			frame(`{"jsonrpc":"2.0","id":` + HealthHeadsID + `,"error":{"code":-32601,"message":"no"}}`)
		} else {
			r.subs[f[1]] = `"` + f[2] + `"`
			frame(`{"jsonrpc":"2.0","id":` + HealthHeadsID + `,"result":"` + f[2] + `"}`)
		}
	case "health":
		n, _ := strconv.ParseUint(f[2], 10, 64)
		frame(headPush(r.subs[f[1]], n))
	case "routed":
		n, _ := strconv.ParseUint(f[2], 10, 64)
		r.core.head = n
		frame(headPush(`"0xclient"`, max(n, 1)))
		r.core.head = 0
	case "frame":
		frame(strings.Join(f[2:], " "))
	case "probe":
		frame(`{"jsonrpc":"2.0","id":` + ProbeID + `,"result":"0x1"}`)
	case "toolarge":
		uid, _ := strconv.ParseUint(f[2], 10, 64)
		r.m.TooLarge(&ce, e, conn(), uid, f[3] == "array", now)
	case "tick":
		r.m.Tick(e, now)
	case "use":
		r.m.Use(e, r.lists[f[1]], now)
	case "stop":
		r.m.Stop()
		e.Reset()
	default:
		t.Fatalf("unknown event %q", ev)
	}
	if len(ce.Deliveries) > 0 || len(ce.Upstream) > 0 {
		t.Fatalf("%s: the fake core's effects leaked", ev)
	}
}

// play runs the script. After every step it checks, besides the step's
// own expectations, what holds always: Active is the last switch's To,
// the core's numbers only grow, and the active connection is not demoted.
func (r *machineRig) play(script []mstep) {
	t := r.t
	var e Effects
	var lastGen uint64
	for n, st := range script {
		r.core.calls = r.core.calls[:0]
		r.do(&e, st.do, at(st.at))
		if got := strings.Join(r.core.calls, ";"); got != st.core {
			t.Errorf("step %d (%s): core events %q, want %q", n, st.do, got, st.core)
		}
		got := ""
		if sw := e.Switch; sw != nil {
			got = fmt.Sprintf("%s>%s %s", r.nameOf(sw.From), r.nameOf(sw.To), sw.Reason)
			if sw.Counted {
				got += " counted"
			}
			if sw.To.Gen() <= lastGen {
				t.Errorf("step %d (%s): gen %d after %d", n, st.do, sw.To.Gen(), lastGen)
			}
			lastGen = sw.To.Gen()
			if sw.From != nil && !sw.From.Demoted() {
				t.Errorf("step %d (%s): the connection switched from is not demoted", n, st.do)
			}
			if sw.Core == nil {
				t.Errorf("step %d (%s): a switch without its core effects", n, st.do)
			}
			if r.m.Active() != sw.To {
				t.Errorf("step %d (%s): Active is not the switch's To", n, st.do)
			}
		}
		if got != st.sw {
			t.Errorf("step %d (%s): switch %q, want %q", n, st.do, got, st.sw)
		}
		if a := r.m.Active(); a != nil && a.Demoted() {
			t.Errorf("step %d (%s): the active connection is demoted", n, st.do)
		}
		if len(e.Send) != st.send {
			t.Errorf("step %d (%s): %d frames to send, want %d", n, st.do, len(e.Send), st.send)
		}
		if e.ChainMismatch != st.mismatch {
			t.Errorf("step %d (%s): ChainMismatch %v, want %v", n, st.do, e.ChainMismatch, st.mismatch)
		}
		var msgs []string
		for _, note := range e.Notes {
			msgs = append(msgs, note.Msg)
		}
		if len(msgs) != len(st.notes) {
			t.Errorf("step %d (%s): notes %q, want %q", n, st.do, msgs, st.notes)
		} else {
			for i := range msgs {
				if !strings.Contains(msgs[i], st.notes[i]) {
					t.Errorf("step %d (%s): note %q, want one with %q", n, st.do, msgs[i], st.notes[i])
				}
			}
		}
		a := r.lists["a"]
		healthy := false
		for i := range len(a.conns) {
			healthy = healthy || a.Status(i, at(st.at)).Healthy
		}
		if a.AnyHealthy(at(st.at)) != healthy {
			t.Errorf("step %d (%s): AnyHealthy %v, Status says %v", n, st.do, !healthy, healthy)
		}
		if st.heads != "" {
			var hs []string
			for i := range len(a.conns) {
				s := a.Status(i, at(st.at))
				if s.HasHead {
					hs = append(hs, strconv.FormatUint(s.Head, 10))
				} else {
					hs = append(hs, "-")
				}
			}
			if got := strings.Join(hs, ","); got != st.heads {
				t.Errorf("step %d (%s): heads %s, want %s", n, st.do, got, st.heads)
			}
		}
	}
}

func (r *machineRig) nameOf(c *Conn) string {
	if c == nil {
		return "none"
	}
	return r.names[c]
}

func listCfg(n int, watch bool) ListConfig {
	return ListConfig{Config: Config{Upstreams: n, MaxHeadLag: 2, HeadTimeout: 10 * time.Second, FailbackAfter: 5 * time.Second},
		WatchHeads: watch, Hosts: []string{"h1"}}
}

func TestUpstreams(t *testing.T) {
	single, singleHeadless, two := listCfg(1, true), listCfg(1, false), listCfg(2, false)
	// Two upstreams, both connected, on the chain, 0 active, each with a
	// health subscription.
	twoUp := []mstep{
		{at: 0, do: "conn a0", send: 2},
		{at: 0, do: "conn a1", send: 2},
		{at: 0, do: "chain a0 0x1", core: "connected 1", sw: "none>a0 first", notes: []string{"upstream active"}},
		{at: 0, do: "chain a1 0x1"},
		{at: 0, do: "sub a0 0xa"},
		{at: 0, do: "sub a1 0xb"},
	}
	for _, tt := range []struct {
		name   string
		a, b   ListConfig
		script []mstep
	}{
		{"one upstream: its health subscription, active at once, not a failover", single, two, []mstep{
			{at: 0, do: "conn a0", core: "connected 1", sw: "none>a0 first", send: 1},
			{at: 1, do: "lost a0", core: "lost 1"},
			// Back after the outage: the same upstream, so no failover.
			{at: 2, do: "conn a0", core: "connected 2", sw: "none>a0 lost", send: 1},
		}},
		{"one upstream without heads: no health request, healthy while connected", singleHeadless, two, []mstep{
			{at: 0, do: "conn a0", core: "connected 1", sw: "none>a0 first"},
			{at: 100, do: "tick"},
			// The health ids are then not the machine's: the core drops them.
			{at: 100, do: "sub a0 0xa", core: "frame 1"},
			{at: 100, do: "chain a0 0x1", core: "frame 1"},
		}},
		{"muxd's own answers never reach the core; the rest does", single, two, []mstep{
			{at: 0, do: "conn a0", core: "connected 1", sw: "none>a0 first", send: 1},
			{at: 0, do: "probe a0"},
			{at: 0, do: "sub a0 0xa"},
			{at: 0, do: "health a0 5", heads: "5"},
			{at: 0, do: `frame a0 {"jsonrpc":"2.0","id":7,"result":"0x1"}`, core: "frame 1"},
			{at: 0, do: `frame a0 {"jsonrpc":"2.0","id":"other","result":"0x1"}`, core: "frame 1"},
			{at: 0, do: `frame a0 [{"jsonrpc":"2.0","id":` + ProbeID + `,"result":"0x1"}]`, core: "frame 1"},
			{at: 0, do: `frame a0 {"jsonrpc":"2.0","id":` + ProbeID + `,"result":`, core: "frame 1 bad"},
			// A push of another subscription is the core's.
			{at: 0, do: "routed a0 0", core: "frame 1"},
			{at: 0, do: "toolarge a0 9 array", core: "toolarge 1 9 true"},
		}},
		{"a refused health subscription: the head is unknown", single, two, []mstep{
			{at: 0, do: "conn a0", core: "connected 1", sw: "none>a0 first", send: 1},
			{at: 0, do: "sub a0 -", notes: []string{"refused muxd's newHeads subscription"}},
			{at: 100, do: "tick", heads: "-"},
		}},
		{"one upstream: ready while a head is within head_timeout", single, two, []mstep{
			{at: 0, do: "conn a0", core: "connected 1", sw: "none>a0 first", send: 1},
			{at: 0, do: "sub a0 0xa"},
			{at: 1, do: "health a0 3", heads: "3"},
		}},
		{"heads: a lower one from the stream that went back is a reorg, taken", single, two, []mstep{
			{at: 0, do: "conn a0", core: "connected 1", sw: "none>a0 first", send: 1},
			{at: 0, do: "sub a0 0xa"},
			{at: 1, do: "health a0 10", heads: "10"},
			{at: 2, do: "health a0 12", heads: "12"},
			// A reorg to a shorter branch: the node's head is 11 now.
			{at: 3, do: "health a0 11", heads: "11"},
			{at: 4, do: "health a0 11", heads: "11"},
			{at: 5, do: "health a0 12", heads: "12"},
		}},
		{"heads: what one stream shows late after the other is not taken", single, two, []mstep{
			{at: 0, do: "conn a0", core: "connected 1", sw: "none>a0 first", send: 1},
			{at: 0, do: "sub a0 0xa"},
			{at: 1, do: "health a0 10", heads: "10"},
			{at: 2, do: "routed a0 12", core: "frame 1", heads: "12"},
			// The health subscription's copies of 11 and 12 come late.
			{at: 2, do: "health a0 11", heads: "12"},
			{at: 2, do: "health a0 12", heads: "12"},
			{at: 3, do: "health a0 13", heads: "13"},
			{at: 3, do: "routed a0 13", core: "frame 1", heads: "13"},
			// Both streams go back: a reorg, taken from either.
			{at: 4, do: "routed a0 11", core: "frame 1", heads: "11"},
			{at: 4, do: "health a0 11", heads: "11"},
		}},
		{"a chain id mismatch is counted, logged and never used", two, two, []mstep{
			{at: 0, do: "conn a0", send: 2},
			{at: 0, do: "conn a1", send: 2},
			{at: 0, do: "chain a1 0x1", core: "connected 1", sw: "none>a1 first", notes: []string{"upstream active"}},
			{at: 0, do: "chain a0 0x2", mismatch: true, notes: []string{"another chain"}},
			// a1 stalls, but a0 is no candidate: a1 stays.
			{at: 100, do: "tick"},
		}},
		{"an unanswered chain id counts as a mismatch", two, two, []mstep{
			{at: 0, do: "conn a0", send: 2},
			{at: 0, do: "chain a0 -", mismatch: true, notes: []string{"another chain"}},
		}},
		{"the active lost: the other takes over, a failover counted", two, two, append(twoUp[:len(twoUp):len(twoUp)],
			mstep{at: 1, do: "health a0 5", heads: "5,-"},
			mstep{at: 1, do: "health a1 5", heads: "5,5"},
			mstep{at: 2, do: "lost a0", core: "lost 1;connected 2", sw: "none>a1 lost counted", notes: []string{"upstream active"}},
			// Back after the outage: a failback later, counted too.
			mstep{at: 3, do: "conn a0", send: 2},
			mstep{at: 3, do: "chain a0 0x1"},
			mstep{at: 3, do: "sub a0 0xc"},
			mstep{at: 4, do: "health a0 6"},
			mstep{at: 4, do: "health a1 6"},
			mstep{at: 9, do: "tick", core: "switch 3", sw: "a1>a0 failback counted", notes: []string{"upstream active"}},
			// The demoted connection's heads count for nothing; its end
			// fails what it still drained.
			mstep{at: 9, do: "health a1 7", heads: "6,6"},
			mstep{at: 10, do: "lost a1", core: "lost 2"},
			mstep{at: 10, do: "lost a0", core: "lost 3", notes: []string{"no upstream to make active"}},
		)},
		{"a stalled active: the healthy one takes over at the tick", two, two, append(twoUp[:len(twoUp):len(twoUp)],
			mstep{at: 8, do: "health a1 5"},
			mstep{at: 11, do: "tick", core: "switch 2", sw: "a0>a1 stalled counted", notes: []string{"upstream active"}},
			mstep{at: 12, do: "routed a0 9", core: "frame 1", heads: "-,5"},
		)},
		{"a failed dial ends the wait at start for the preferred upstream", func() ListConfig {
			c := listCfg(2, true)
			c.StartWait = 5 * time.Second
			return c
		}(), two, []mstep{
			{at: 0, do: "conn a1", send: 2},
			{at: 0, do: "chain a1 0x1"},
			{at: 1, do: "unreach a0", core: "connected 1", sw: "none>a1 first", notes: []string{"upstream active"}},
		}},
		{"a reload: the move to the new list is no failover", single, two, []mstep{
			{at: 0, do: "conn a0", core: "connected 1", sw: "none>a0 first", send: 1},
			{at: 1, do: "use b"},
			{at: 1, do: "conn b0", send: 2},
			{at: 1, do: "conn b1", send: 2},
			{at: 2, do: "chain b0 0x1", core: "switch 2", sw: "a0>b0 first",
				notes: []string{"traffic moved to the new list", "upstream active"}},
			{at: 2, do: "chain b1 0x1"},
			// The old list's connection drains; its end changes nothing more.
			{at: 3, do: "lost a0", core: "lost 1"},
			{at: 4, do: "lost b0", core: "lost 2;connected 3", sw: "none>b1 lost counted", notes: []string{"upstream active"}},
		}},
		{"stopped: nothing is made active", single, two, []mstep{
			{at: 0, do: "stop"},
			{at: 0, do: "conn a0", send: 1},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			newRig(t, tt.a, tt.b).play(tt.script)
		})
	}
}

func TestOwner(t *testing.T) {
	for _, tt := range []struct {
		id   string
		want IDOwner
	}{
		{"7", OwnerCore},
		{"18446744073709551615", OwnerCore},
		{HealthChainID, OwnerHealthChain},
		{HealthHeadsID, OwnerHealthHeads},
		{ProbeID, OwnerProbe},
		{`"muxd-other"`, OwnerNone},
		{`"7"`, OwnerNone},
		{"07", OwnerNone},
		{"null", OwnerNone},
		{"", OwnerNone},
	} {
		if got := Owner([]byte(tt.id)); got != tt.want {
			t.Errorf("Owner(%s) = %d, want %d", tt.id, got, tt.want)
		}
	}
}

func TestConnectedOutOfRange(t *testing.T) {
	l, err := NewList(listCfg(1, true))
	if err != nil {
		t.Fatal(err)
	}
	m := NewUpstreams(new(fakeCore), l)
	var e Effects
	for _, i := range []int{-1, 1} {
		if c, err := m.Connected(&e, l, i, t0); err == nil || c != nil {
			t.Errorf("Connected(%d) = %v, %v; want an error", i, c, err)
		}
	}
	if _, err := NewList(ListConfig{}); err == nil {
		t.Error("NewList with no upstreams: no error")
	}
	if m.Current() != l || !listCfgMulti(t) {
		t.Error("Current or Multi wrong")
	}
}

func listCfgMulti(t *testing.T) bool {
	t.Helper()
	l, err := NewList(listCfg(2, false))
	if err != nil {
		t.Fatal(err)
	}
	c := &Conn{list: l, index: 1}
	return l.Multi() && c.List() == l && c.Index() == 1 && l.host(1) == "" && l.host(0) == "h1"
}

// FuzzFrame gives Upstreams whatever a node may send: it must not panic,
// must hand the core everything that is not muxd's own, and must take only
// a lone valid message that is.
func FuzzFrame(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":` + HealthChainID + `,"result":"0x1"}`,
		`{"jsonrpc":"2.0","id":` + HealthHeadsID + `,"result":"0xa"}`,
		`{"jsonrpc":"2.0","id":` + HealthHeadsID + `,"error":{"code":1,"message":"x"}}`,
		`{"jsonrpc":"2.0","id":` + ProbeID + `,"result":"0x1"}`,
		headPush(`"0xa"`, 7),
		`{"jsonrpc":"2.0","id":7,"result":"0x1"}`,
		`[{"jsonrpc":"2.0","id":` + ProbeID + `,"result":"0x1"}]`,
		`{"jsonrpc":"2.0","id":` + ProbeID + `,"id":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		l, err := NewList(listCfg(2, true))
		if err != nil {
			t.Fatal(err)
		}
		fc := new(fakeCore)
		m := NewUpstreams(fc, l)
		var e Effects
		var ce core.Effects
		c, err := m.Connected(&e, l, 0, t0)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			frame := append([]byte(nil), raw...)
			fr, scanErr := router.ScanUpstream(frame, nil)
			fc.calls = fc.calls[:0]
			m.Frame(&ce, &e, c, frame, fr, scanErr, at(i))
			own := scanErr == nil && !fr.Batch && len(fr.Messages) == 1 && fr.Messages[0].Invalid == nil
			if len(fc.calls) == 0 && !own {
				t.Fatalf("%q: neither the core's nor a lone valid message", raw)
			}
		}
	})
}
