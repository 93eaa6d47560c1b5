package gethtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/rpc"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/muxd/muxd/internal/muxtest"
	"github.com/muxd/muxd/internal/testnode"
	"github.com/muxd/muxd/mux"
)

// TestFailoverLossless: one geth --dev --dev.period 1 behind two cutProxies
// A and B, given to muxd as upstreams [A, B]. 20 clients read in closed
// loops through muxd's WebSocket (five methods of retry_methods, one not)
// while a newHeads and a logs subscriber listen and a sender calls the log
// contract on geth directly. The path through A is cut for 8 blocks, then
// restored:
//   - muxd makes B active, and A again FailbackAfter after it is back;
//   - no client connection closes and no subscription fails;
//   - every read is answered; only reads in flight at the cut may get
//     -32002 (issued before muxd read the loss: written to the cut path),
//     none at the failback; no read waits more than 2 s from the
//     cut or the failback;
//   - heads are consecutive with chained parent hashes over the whole run,
//     and logs are exactly eth_getLogs over it, each once, none removed.
func TestFailoverLossless(t *testing.T) {
	const (
		readers       = 20
		failbackAfter = 3 * time.Second
		cutBlocks     = 8
		// maxDelay bounds a read around a switch, from its start or from
		// the switch, whichever is later.
		maxDelay = 2 * time.Second
		// Reads issued up to window after a switch count as around it.
		window = 3 * time.Second
	)
	reg := prometheus.NewRegistry()
	var pa *testnode.CutProxy // A; B is never cut
	h := newHarness(t, func(c *mux.Config) {
		target := strings.TrimPrefix(c.Upstream, "ws://")
		pa = testnode.NewCutProxy(t, target)
		pb := testnode.NewCutProxy(t, target)
		c.Upstream = ""
		c.Upstreams = []mux.Upstream{{URL: "ws://" + pa.Addr()}, {URL: "ws://" + pb.Addr()}}
		c.ReconnectInitial = 100 * time.Millisecond
		c.ReconnectMax = 200 * time.Millisecond
		c.FailbackAfter = failbackAfter
		c.Registerer = reg
	})
	base := time.Now() // the run's clock: all times below are since base
	since := func() time.Duration { return time.Since(base) }
	// muxd may start on B, if B answers first, and then fail back to A.
	startSeen, _, ok := waitActive(t, h.srv, base, 0, 30*time.Second)
	if !ok {
		t.FailNow()
	}
	t.Logf("start: active %v", startSeen)

	direct := dial(t, h.node.WSURL)
	from := devAccount(t, direct)
	contract := deployLogContract(t, direct, from)
	filter := map[string]any{"address": contract}
	heads := subscribeGap(t, dial(t, h.WSURL), "heads", "newHeads")
	logs := subscribeGap(t, dial(t, h.WSURL), "logs", "logs", filter)
	directHeads := subscribeGap(t, direct, "direct heads", "newHeads")
	start := fmt.Sprintf("0x%x", blockNumber(t, direct))
	stopSend := startLogSender(t, direct, from, contract)

	clients := make([]*rpc.Client, readers)
	for i := range clients {
		clients[i] = dial(t, h.WSURL)
	}
	accepts := h.wsAccepts.Load()
	load := startReads(clients, base, from, contract)
	t.Cleanup(func() { load.stop() })
	testnode.Poll(t, "every reader answered, a head and a log pushed", func() bool {
		for i := range load.answered {
			if load.answered[i].Load() == 0 {
				return false
			}
		}
		return len(heads.ch) > 0 && len(logs.ch) > 0
	})
	waitBlock(t, direct, blockNumber(t, direct)+2)
	if a := muxtest.ActiveUpstream(h.srv); a != 0 {
		t.Fatalf("before the cut: active upstream %d, want 0", a)
	}
	activeGauge(t, reg, "before the cut", 0)
	failoversBefore := failoverCounts(t, h.srv)
	retried := h.srv.Metrics().Retried
	retriedBefore := counterValue(t, retried)

	// Cut A: B takes over.
	cutAt := since()
	pa.Cut()
	// On a failure to switch, the run goes on, to show what clients got.
	seen, cutSwitch, _ := waitActive(t, h.srv, base, 1, 10*time.Second)
	t.Logf("cut A at %v: active %v, 1 after %v", cutAt.Round(time.Millisecond), seen, (cutSwitch - cutAt).Round(time.Millisecond))
	activeGauge(t, reg, "during the cut", 1)
	waitBlock(t, direct, blockNumber(t, direct)+cutBlocks)
	if a := muxtest.ActiveUpstream(h.srv); a != 1 {
		t.Errorf("at the end of the cut: active upstream %d, want 1", a)
	}

	// Restore A: muxd moves back once A has been healthy for FailbackAfter.
	retriedCut := counterValue(t, retried) - retriedBefore
	restoreAt := since()
	pa.Restore()
	seen, backAt, _ := waitActive(t, h.srv, base, 0, failbackAfter+30*time.Second)
	// The failback began after the last poll that saw B active.
	failback := seen.lastSeen(1, restoreAt)
	t.Logf("restored A at %v: active %v, 0 after %v", restoreAt.Round(time.Millisecond), seen, (backAt - restoreAt).Round(time.Millisecond))
	if backAt-restoreAt < failbackAfter {
		t.Errorf("failed back %v after A was restored, before FailbackAfter (%v)", backAt-restoreAt, failbackAfter)
	}
	activeGauge(t, reg, "after the failback", 0)
	waitBlock(t, direct, blockNumber(t, direct)+3)
	retriedFailback := counterValue(t, retried) - retriedBefore - retriedCut

	reads := load.stop()
	sent := stopSend()
	// Every log the sender caused is mined within a couple of blocks.
	end := blockNumber(t, direct) + 3
	waitBlock(t, direct, end+2)

	// No client connection closed: no rpc client dialed again, no
	// subscription failed.
	if n := h.wsAccepts.Load(); n != accepts {
		t.Errorf("muxd accepted %d WebSocket connections during the run: a client connection closed and its client dialed again", n-accepts)
	}
	for _, s := range []*gapSub{heads, logs} {
		select {
		case err := <-s.sub.Err():
			t.Errorf("%s: subscription failed: %v", s.name, err)
		default:
		}
	}

	// Reads.
	events := []readEvent{{name: "cut", at: cutAt, switched: cutSwitch, allow32002: true}, {name: "failback", at: failback, switched: failback}}
	st := judgeReads(t, reads, events, maxDelay, window)

	// Heads and logs over the whole run.
	checkHeads(t, heads, headsByNumber(t, directHeads.drain()), end)
	checkLogs(t, direct, logs, filter, start, end)

	// Failovers during the run (a failback at the start is not one).
	failovers := failoverCounts(t, h.srv)
	run := map[string]float64{}
	for reason, v := range failovers {
		run[reason] = v - failoversBefore[reason]
	}
	for reason, want := range map[string]float64{"lost": 1, "failback": 1, "lagging": 0, "stalled": 0} {
		if run[reason] != want {
			t.Errorf("muxd_upstream_failovers_total{reason=%q} went up by %v during the run, want %v (before the cut %s, at the end %s)",
				reason, run[reason], want, formatValues(failoversBefore), formatValues(failovers))
		}
	}
	t.Logf("summary: reads %d (%s); errored at the cut (-32002, in flight) %d; max read delay from the cut %v, from the failback %v (max read latency overall %v); failovers in the run %s (since start %s); requests retried at the cut %v, at the failback %v; sent %d transactions",
		st.total, st.byMethod, st.events[0].errored,
		st.events[0].maxDelay.Round(time.Millisecond), st.events[1].maxDelay.Round(time.Millisecond),
		st.maxLatency.Round(time.Millisecond), formatValues(run), formatValues(failovers),
		retriedCut, retriedFailback, sent)
}

// activeSeen is the sequence of Active() values waitActive saw, each with
// when it was first and last seen.
type activeSeen []activeSample

type activeSample struct {
	active      int
	first, last time.Duration
}

func (s activeSeen) String() string {
	var b strings.Builder
	for i, x := range s {
		if i > 0 {
			b.WriteString(" → ")
		}
		fmt.Fprintf(&b, "%d", x.active)
	}
	return b.String()
}

// lastSeen returns when active was last seen, or otherwise if never.
func (s activeSeen) lastSeen(active int, otherwise time.Duration) time.Duration {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i].active == active {
			return s[i].last
		}
	}
	return otherwise
}

// waitActive polls srv's active upstream until it is want (muxd offers no
// event for it), failing the test (without stopping it) after within. It returns the
// values it saw and when it last looked, both as times since base, and
// whether it saw want.
func waitActive(t *testing.T, srv *mux.Server, base time.Time, want int, within time.Duration) (activeSeen, time.Duration, bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	var seen activeSeen
	for {
		a, at := muxtest.ActiveUpstream(srv), time.Since(base)
		if n := len(seen); n > 0 && seen[n-1].active == a {
			seen[n-1].last = at
		} else {
			seen = append(seen, activeSample{active: a, first: at, last: at})
		}
		if a == want {
			return seen, at, true
		}
		if time.Now().After(deadline) {
			t.Errorf("active upstream not %d within %v: saw %v; status %+v", want, within, seen, srv.Status().Upstreams)
			return seen, at, false
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// read is one read of the load: when it was issued and answered (since
// the run's base) and what went wrong, if anything.
type read struct {
	method     string
	start, end time.Duration
	code       int    // JSON-RPC error code; 0 if none
	err        string // the error, or what is wrong with the result; "" if fine
}

// readLoad is readers in closed loops of reads, one goroutine a client.
type readLoad struct {
	answered []atomic.Int64 // reads answered without error, by client
	done     chan struct{}
	wg       sync.WaitGroup
	reads    [][]read // by client; read once wg is done
	once     sync.Once
}

// readCall is one kind of read of the mix, with a check of its result.
type readCall struct {
	method string
	args   []any
	check  func(json.RawMessage) string // "" if the result is fine
}

func readMix(from, contract string) []readCall {
	hexString := func(r json.RawMessage) string {
		var s string
		if err := json.Unmarshal(r, &s); err != nil || !strings.HasPrefix(s, "0x") {
			return fmt.Sprintf("result %s is not a hex string", r)
		}
		return ""
	}
	return []readCall{
		{"eth_blockNumber", nil, hexString},
		{"eth_getBlockByNumber", []any{"latest", false}, func(r json.RawMessage) string {
			var f *headFields
			if err := json.Unmarshal(r, &f); err != nil || f == nil || f.Hash == "" {
				return fmt.Sprintf("result %.200s is not a block", r)
			}
			return ""
		}},
		{"eth_getBalance", []any{from, "latest"}, hexString},
		// The contract's code emits a log and returns nothing.
		{"eth_call", []any{map[string]any{"to": contract, "data": topicA}, "latest"}, func(r json.RawMessage) string {
			if string(r) != `"0x"` {
				return fmt.Sprintf("result %.200s, want \"0x\"", r)
			}
			return ""
		}},
		{"eth_chainId", nil, func(r json.RawMessage) string {
			if string(r) != `"`+devChainID+`"` {
				return fmt.Sprintf("result %s, want %q", r, devChainID)
			}
			return ""
		}},
		// Not in retry_methods (the five above are): in flight at the
		// cut it may get -32002; at a failback it stays on the old
		// upstream, which answers it.
		{"eth_getBlockTransactionCountByNumber", []any{"latest"}, hexString},
	}
}

// startReads runs a closed loop of reads (readMix in turn, each bounded by
// 10 s) on every client until stop.
func startReads(clients []*rpc.Client, base time.Time, from, contract string) *readLoad {
	mix := readMix(from, contract)
	l := &readLoad{answered: make([]atomic.Int64, len(clients)), done: make(chan struct{}), reads: make([][]read, len(clients))}
	for i, c := range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for n := i; ; n++ {
				select {
				case <-l.done:
					return
				default:
				}
				call := mix[n%len(mix)]
				r := read{method: call.method, start: time.Since(base)}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				var res json.RawMessage
				err := c.CallContext(ctx, &res, call.method, call.args...)
				cancel()
				r.end = time.Since(base)
				var rerr rpc.Error
				switch {
				case errors.As(err, &rerr):
					r.code, r.err = rerr.ErrorCode(), rerr.Error()
				case err != nil:
					r.err = "no answer: " + err.Error()
				default:
					r.err = call.check(res)
				}
				if r.err == "" {
					l.answered[i].Add(1)
				}
				l.reads[i] = append(l.reads[i], r)
			}
		}()
	}
	return l
}

// stop ends the loops and returns every read (once; later calls return
// nil).
func (l *readLoad) stop() []read {
	var all []read
	l.once.Do(func() {
		close(l.done)
		l.wg.Wait()
		for _, rs := range l.reads {
			all = append(all, rs...)
		}
	})
	return all
}

// readEvent is a switch of the active upstream the reads are judged
// around: at is the latest time it had surely not begun.
type readEvent struct {
	name string
	at   time.Duration
	// switched is when the test saw muxd on the new upstream. A read
	// issued between at and switched was written to the path before muxd
	// read the loss, so it too was in flight at the event.
	switched   time.Duration
	allow32002 bool // reads in flight at it may get -32002
}

type readStats struct {
	total      int
	byMethod   string
	maxLatency time.Duration
	events     []eventStats
}

type eventStats struct {
	around   int           // reads in flight at the event or issued up to window after it
	inFlight int           // of them, in flight at the event (issued before muxd was seen to switch)
	errored  int           // of them, in flight at the event and answered -32002 (allowed)
	maxDelay time.Duration // the longest answer, from the read's start or the event, whichever is later
}

// judgeReads fails the test for every read that was not answered well,
// except -32002 on a read in flight at an event that allows it, and for
// every read around an event answered more than maxDelay after the event
// or its own start.
func judgeReads(t *testing.T, reads []read, events []readEvent, maxDelay, window time.Duration) readStats {
	t.Helper()
	st := readStats{total: len(reads), events: make([]eventStats, len(events))}
	methods := map[string]int{}
	var bad, slow []string
	report := func(list *[]string, r read, what string) {
		*list = append(*list, fmt.Sprintf("%s issued at %v, answered at %v: %s", r.method,
			r.start.Round(time.Millisecond), r.end.Round(time.Millisecond), what))
	}
	for _, r := range reads {
		methods[r.method]++
		st.maxLatency = max(st.maxLatency, r.end-r.start)
		allowed := false
		for i, e := range events {
			if r.end <= e.at || r.start >= e.at+window {
				continue
			}
			es := &st.events[i]
			es.around++
			inFlight := r.start < max(e.at, e.switched)
			if inFlight {
				es.inFlight++
			}
			d := r.end - max(r.start, e.at)
			es.maxDelay = max(es.maxDelay, d)
			if d > maxDelay {
				report(&slow, r, fmt.Sprintf("%v after the %s", d.Round(time.Millisecond), e.name))
			}
			if r.err != "" && r.code == -32002 && e.allow32002 && inFlight {
				es.errored++
				allowed = true
				t.Logf("in flight at the %s: %s issued at %v, answered at %v: %s", e.name, r.method,
					r.start.Round(time.Millisecond), r.end.Round(time.Millisecond), r.err)
			}
		}
		if r.err != "" && !allowed {
			where := "away from any switch"
			for _, e := range events {
				if r.end > e.at && r.start < e.at+window {
					where = fmt.Sprintf("%v after the %s", (r.start - e.at).Round(time.Millisecond), e.name)
				}
			}
			report(&bad, r, fmt.Sprintf("%s (code %d; issued %s)", r.err, r.code, where))
		}
	}
	st.byMethod = joinSorted(methods, "%s %d", ", ")
	for i, e := range events {
		es := st.events[i]
		t.Logf("around the %s (at %v): %d reads, %d of them in flight at it, %d answered -32002, longest %v", e.name,
			e.at.Round(time.Millisecond), es.around, es.inFlight, es.errored, es.maxDelay.Round(time.Millisecond))
	}
	for _, l := range []struct {
		what string
		list []string
	}{{"reads not answered well", bad}, {fmt.Sprintf("reads answered more than %v after a switch", maxDelay), slow}} {
		if len(l.list) > 0 {
			t.Errorf("%d %s, of %d:\n%s", len(l.list), l.what, len(reads), strings.Join(l.list[:min(len(l.list), 20)], "\n"))
		}
	}
	return st
}

// metricValues gathers reg and returns the values (counter or gauge) of
// the series of metric family name, by the value of label. A family reg
// does not have is an error of the test, naming the muxd_upstream families
// it has.
func metricValues(t *testing.T, reg *prometheus.Registry, name, label string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Errorf("gather metrics: %v", err)
		return nil
	}
	var have []string
	for _, mf := range mfs {
		if mf.GetName() != name {
			if strings.HasPrefix(mf.GetName(), "muxd_upstream") {
				have = append(have, mf.GetName())
			}
			continue
		}
		out := map[string]float64{}
		for _, m := range mf.GetMetric() {
			key := ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label {
					key = lp.GetValue()
				}
			}
			switch {
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			}
		}
		return out
	}
	t.Errorf("no metric %s; muxd_upstream metrics: %v", name, have)
	return nil
}

// failoverCounts returns muxd_upstream_failovers_total by reason.
func failoverCounts(t *testing.T, srv *mux.Server) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, reason := range []string{"lost", "lagging", "stalled", "failback"} {
		out[reason] = counterValue(t, srv.Metrics().Failovers.WithLabelValues(reason))
	}
	return out
}

// activeGauge checks muxd_upstream_node_active: 1 for upstream want (an
// index into Upstreams), 0 for the other of the two. Labels number the
// upstreams from 1.
func activeGauge(t *testing.T, reg *prometheus.Registry, when string, want int) {
	t.Helper()
	got := metricValues(t, reg, "muxd_upstream_node_active", "upstream")
	for u := range 2 {
		w := 0.0
		if u == want {
			w = 1
		}
		if v := got[fmt.Sprint(u+1)]; v != w {
			t.Errorf("%s: muxd_upstream_node_active{upstream=\"%d\"} = %v, want %v (all: %s)", when, u+1, v, w, formatValues(got))
		}
	}
}

// formatValues prints metric values by label value, sorted.
func formatValues(m map[string]float64) string {
	return "{" + joinSorted(m, "%s=%v", " ") + "}"
}

// joinSorted formats each entry of m as format(key, value), in key order,
// joined by sep.
func joinSorted[V any](m map[string]V, format, sep string) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf(format, k, m[k]))
	}
	return strings.Join(parts, sep)
}
