package anviltest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/muxd/muxd/internal/muxtest"
	"github.com/muxd/muxd/internal/testnode"
	"github.com/muxd/muxd/mux"
)

// muxd is an in-process muxd in front of an upstream URL.
type muxd struct {
	srv   *mux.Server
	wsURL string
	log   *testnode.LockedBuffer
}

func startMuxd(t *testing.T, upstream string, mod func(*mux.Config)) *muxd {
	t.Helper()
	m := &muxd{log: &testnode.LockedBuffer{}}
	cfg := mux.Config{
		Upstream: upstream,
		Logger:   slog.New(slog.NewTextHandler(m.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := mux.New(cfg)
	if err != nil {
		t.Fatalf("mux.New: %v", err)
	}
	m.srv = srv
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- srv.Run(ctx) }()
	front := httptest.NewServer(http.HandlerFunc(srv.ServeHTTP))
	t.Cleanup(func() {
		front.CloseClientConnections()
		front.Close()
		cancel()
		select {
		case <-runDone:
		case <-time.After(15 * time.Second):
			t.Errorf("mux Server.Run did not return within 15 s of cancel")
		}
		if t.Failed() {
			s := m.log.String()
			if len(s) > 32<<10 {
				s = s[len(s)-32<<10:]
			}
			t.Logf("muxd log (tail):\n%s", s)
		}
	})
	m.wsURL = "ws" + strings.TrimPrefix(front.URL, "http")
	muxtest.WaitConnected(t, srv, true, 30*time.Second)
	return m
}

// stream records what one subscription receives, in order.
type stream struct {
	name    string
	mu      sync.Mutex
	items   []json.RawMessage
	changed chan struct{} // closed and replaced on every item
}

func subscribe(t *testing.T, c *rpc.Client, name string, args ...any) *stream {
	t.Helper()
	s := &stream{name: name, changed: make(chan struct{})}
	ch := make(chan json.RawMessage, 1<<16)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub, err := c.EthSubscribe(ctx, ch, args...)
	if err != nil {
		t.Fatalf("%s: eth_subscribe: %v", name, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case m := <-ch:
				s.mu.Lock()
				s.items = append(s.items, m)
				close(s.changed)
				s.changed = make(chan struct{})
				s.mu.Unlock()
			case <-sub.Err():
				return
			}
		}
	}()
	t.Cleanup(func() {
		sub.Unsubscribe()
		<-done
	})
	return s
}

// state returns what s received so far and a channel closed on the next
// item.
func (s *stream) state() ([]json.RawMessage, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.items), s.changed
}

// await waits until cond holds for what s received.
func (s *stream) await(t *testing.T, what string, d time.Duration, cond func([]json.RawMessage) bool) {
	t.Helper()
	testnode.AwaitWithin(t, s.name+": "+what, d, func() (bool, <-chan struct{}) {
		items, ch := s.state()
		return cond(items), ch
	})
}

type headFields struct {
	Number     string `json:"number"`
	Hash       string `json:"hash"`
	ParentHash string `json:"parentHash"`
}

type logFields struct {
	Address     string   `json:"address"`
	Topics      []string `json:"topics"`
	BlockNumber string   `json:"blockNumber"`
	BlockHash   string   `json:"blockHash"`
	LogIndex    string   `json:"logIndex"`
	TxHash      string   `json:"transactionHash"`
	Removed     bool     `json:"removed"`
}

// lg is a log as the checks compare it.
type lg struct {
	block uint64
	hash  string
	index uint64
	tx    string
}

func (l lg) String() string { return fmt.Sprintf("%d/%s/%d", l.block, l.hash[:10], l.index) }

func parseLogs(t *testing.T, items []json.RawMessage) ([]lg, []bool) {
	t.Helper()
	var out []lg
	var removed []bool
	for _, m := range items {
		var f logFields
		if err := json.Unmarshal(m, &f); err != nil {
			t.Fatalf("log push %s: %v", m, err)
		}
		out = append(out, lg{hexNum(t, f.BlockNumber), strings.ToLower(f.BlockHash), hexNum(t, f.LogIndex), strings.ToLower(f.TxHash)})
		removed = append(removed, f.Removed)
	}
	return out, removed
}

type header struct {
	num    uint64
	parent string
}

// headersOf indexes heads pushed (any branch) by hash.
func headersOf(t *testing.T, into map[string]header, items []json.RawMessage) {
	t.Helper()
	for _, m := range items {
		var h headFields
		if err := json.Unmarshal(m, &h); err != nil {
			t.Fatalf("head push %s: %v", m, err)
		}
		into[strings.ToLower(h.Hash)] = header{hexNum(t, h.Number), strings.ToLower(h.ParentHash)}
	}
}

// ancestor returns the hash at number n on the branch of hash, as far as
// the headers tell ("" when they do not).
func ancestor(headers map[string]header, hash string, num, n uint64) string {
	for num > n {
		h, ok := headers[hash]
		if !ok || h.num != num {
			return ""
		}
		hash, num = h.parent, num-1
	}
	return hash
}

// checkLogs replays a logs stream: a removal takes out a standing log; a
// log goes out only after every standing one, and only while every
// standing one is on its branch (no removal follows a log of the block
// that replaced it). It returns the logs standing at the end.
func checkLogs(t *testing.T, name string, items []json.RawMessage, headers map[string]header) (standing []lg, breaks []string, unknown int) {
	t.Helper()
	logs, removed := parseLogs(t, items)
	for i, l := range logs {
		if removed[i] {
			j := slices.IndexFunc(standing, func(s lg) bool { return s.hash == l.hash && s.index == l.index })
			if j < 0 {
				breaks = append(breaks, fmt.Sprintf("push %d: removal of %s, which does not stand", i, l))
				continue
			}
			standing = slices.Delete(standing, j, j+1)
			continue
		}
		for _, s := range standing {
			switch {
			case s.hash == l.hash && s.index == l.index:
				breaks = append(breaks, fmt.Sprintf("push %d: %s twice", i, l))
			case s.block > l.block || (s.block == l.block && s.index > l.index):
				breaks = append(breaks, fmt.Sprintf("push %d: %s after %s", i, l, s))
			default:
				switch a := ancestor(headers, l.hash, l.block, s.block); a {
				case "":
					unknown++
				case s.hash:
				default:
					breaks = append(breaks, fmt.Sprintf("push %d: %s while %s of another branch stands", i, l, s))
				}
			}
		}
		standing = append(standing, l)
	}
	return standing, breaks, unknown
}

// checkHeads replays a newHeads stream: each head is the child of the last
// one or of a head delivered below it (a reorg). It returns the heads
// standing at the end, by number.
func checkHeads(t *testing.T, items []json.RawMessage) (view map[uint64]string, last uint64, breaks []string) {
	t.Helper()
	view = map[uint64]string{}
	have := false
	for i, m := range items {
		var f headFields
		if err := json.Unmarshal(m, &f); err != nil {
			t.Fatalf("head push %s: %v", m, err)
		}
		n, hash, parent := hexNum(t, f.Number), strings.ToLower(f.Hash), strings.ToLower(f.ParentHash)
		if have {
			if p, ok := view[n-1]; n > last+1 || (ok && p != parent) || (!ok && n-1 >= firstOf(view)) {
				breaks = append(breaks, fmt.Sprintf("push %d: head %d %s does not chain (last %d)", i, n, hash[:10], last))
			}
		}
		for k := n + 1; k <= last; k++ {
			delete(view, k)
		}
		view[n], last, have = hash, n, true
	}
	return view, last, breaks
}

func firstOf(view map[uint64]string) uint64 {
	first := ^uint64(0)
	for n := range view {
		first = min(first, n)
	}
	return first
}

func lastHead(t *testing.T, items []json.RawMessage) uint64 {
	t.Helper()
	if len(items) == 0 {
		return 0
	}
	var f headFields
	if err := json.Unmarshal(items[len(items)-1], &f); err != nil {
		t.Fatalf("head push: %v", err)
	}
	return hexNum(t, f.Number)
}

// sender sends a transaction calling the log contract from account from
// (each with its own topic) at random ticks of 300 ms, one in two on
// average, so that some blocks hold logs and some none, until stop.
func startSender(t *testing.T, c *rpc.Client, from, contract string, topics *atomic.Uint64, seed uint64) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	rng := rand.New(rand.NewPCG(seed, 7))
	go func() {
		defer close(done)
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			if rng.IntN(2) == 0 {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var tx string
			if err := c.CallContext(ctx, &tx, "eth_sendTransaction", map[string]any{
				"from": from, "to": contract, "data": topic(topics.Add(1)), "gas": "0x10000",
			}); err != nil {
				t.Logf("eth_sendTransaction: %v", err)
			}
			cancel()
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(quit); <-done }) }
	t.Cleanup(stop)
	return stop
}

// gapsCounted returns muxd_backfill_gaps_total by "kind/reason".
func gapsCounted(t *testing.T, m *mux.Metrics) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	ch := make(chan prometheus.Metric, 64)
	go func() { m.BackfillGaps.Collect(ch); close(ch) }()
	for pm := range ch {
		var d dto.Metric
		if err := pm.Write(&d); err != nil {
			t.Fatalf("metric: %v", err)
		}
		var kind, reason string
		for _, lp := range d.GetLabel() {
			switch lp.GetName() {
			case "kind":
				kind = lp.GetValue()
			case "reason":
				reason = lp.GetValue()
			}
		}
		// Every kind and reason exists from the start at 0: only a count
		// is a gap.
		if v := d.GetCounter().GetValue(); v != 0 {
			out[kind+"/"+reason] += v
		}
	}
	return out
}

// TestAnvilReorgs runs anvil mining a block a second with event logs in
// most blocks, and reorganises it with anvil_reorg (its new blocks carry
// logs of their own) at depths 1, 2, 3 and 5, several rounds each, with
// logs and newHeads subscribers through muxd and, for comparison, direct
// to anvil. anvil pushes a reorg's new heads and logs in varying order and
// never pushes removed:true. Through muxd, every stream after applying its
// removals equals eth_getLogs and the canonical chain exactly, no removal
// ever follows a log of the block that replaced it, and no gap is counted;
// the same when the path to the node is cut while anvil reorganises.
func TestAnvilReorgs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs anvil for about a minute")
	}
	for _, tc := range []struct {
		name   string
		rounds int
		cut    func(round int) bool // cut the path to the node for this reorg
	}{
		{name: "live", rounds: 4, cut: func(int) bool { return false }},
		{name: "path cut during every other reorg", rounds: 3, cut: func(r int) bool { return r%2 == 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runReorgs(t, tc.rounds, tc.cut)
		})
	}
}

func runReorgs(t *testing.T, rounds int, cut func(int) bool) {
	a := startAnvil(t)
	px := testnode.NewCutProxy(t, a.addr)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("what anvil sent muxd:\n%s", summarize(px.DownMessages()))
		}
	})
	md := startMuxd(t, "ws://"+px.Addr(), nil)
	node := dial(t, a.wsURL())
	var accts []string
	call(t, node, &accts, "eth_accounts")
	contract := deploy(t, node, accts[0])
	direct, via := dial(t, a.wsURL()), dial(t, md.wsURL)
	filter := map[string]any{"address": contract}
	dHeads, dLogs := subscribe(t, direct, "direct newHeads", "newHeads"), subscribe(t, direct, "direct logs", "logs", filter)
	mHeads, mLogs := subscribe(t, via, "muxd newHeads", "newHeads"), subscribe(t, via, "muxd logs", "logs", filter)
	var startHex string
	call(t, node, &startHex, "eth_blockNumber")
	start := hexNum(t, startHex)
	// The deepest reorg stays above the contract's block and the blocks
	// the subscribers started at.
	ready := start + 7
	dHeads.await(t, fmt.Sprintf("block %d", ready), 30*time.Second, func(it []json.RawMessage) bool { return lastHead(t, it) >= ready })
	// The seed picks the reorgs' order, their new logs and the sender's
	// transactions; MUXD_ANVIL_SEED repeats a run's (anvil's block times
	// and push orders are its own).
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("MUXD_ANVIL_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (MUXD_ANVIL_SEED)", seed)
	var topics atomic.Uint64
	topics.Store(1 << 32) // the reorgs' own topics stay below
	stop := startSender(t, node, accts[0], contract, &topics, seed)

	rng := rand.New(rand.NewPCG(seed, 34))
	var plan []uint64
	for range rounds {
		plan = append(plan, 1, 2, 3, 5)
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	var reorgTopic uint64
	cuts := 0 // reorgs during which the path was cut
	for round, depth := range plan {
		// A few blocks with logs on the chain as it is.
		items, _ := dHeads.state()
		next := lastHead(t, items) + 1 + uint64(rng.IntN(4))
		dHeads.await(t, fmt.Sprintf("block %d", next), 30*time.Second, func(it []json.RawMessage) bool { return lastHead(t, it) >= next })
		cutNow := cut(round)
		if cutNow {
			cuts++
			px.Cut()
			muxtest.WaitConnected(t, md.srv, false, 30*time.Second)
		}
		// The new branch: up to two logs in each of its blocks, none in
		// some (where the old branch may have had logs, or not).
		var pairs []any
		for off := range depth {
			k := rng.IntN(3)
			if off == depth-1 && len(pairs) == 0 {
				k = 1
			}
			for range k {
				reorgTopic++
				pairs = append(pairs, []any{map[string]any{"from": accts[1], "to": contract, "data": topic(reorgTopic), "gas": "0x10000"}, off})
			}
		}
		var res any
		call(t, node, &res, "anvil_reorg", depth, pairs)
		t.Logf("round %d: anvil_reorg depth %d at block %d (cut %v)", round, depth, next, cutNow)
		if cutNow {
			items, _ := dHeads.state()
			after := lastHead(t, items) + 1
			dHeads.await(t, fmt.Sprintf("block %d", after), 30*time.Second, func(it []json.RawMessage) bool { return lastHead(t, it) >= after })
			px.Restore()
			muxtest.WaitConnected(t, md.srv, true, 30*time.Second)
		}
	}
	stop()
	// Quiet: no more transactions nor reorgs; three more blocks.
	items, _ := dHeads.state()
	quiet := lastHead(t, items) + 3
	dHeads.await(t, fmt.Sprintf("block %d", quiet), 30*time.Second, func(it []json.RawMessage) bool { return lastHead(t, it) >= quiet })
	var finalHex string
	call(t, node, &finalHex, "eth_blockNumber")
	final := hexNum(t, finalHex)
	mHeads.await(t, fmt.Sprintf("block %d through muxd", final), 30*time.Second, func(it []json.RawMessage) bool { return lastHead(t, it) >= final })

	// The node's final view.
	canon := map[uint64]string{}
	for n := start; n <= final; n++ {
		var b headFields
		call(t, node, &b, "eth_getBlockByNumber", fmt.Sprintf("0x%x", n), false)
		canon[n] = strings.ToLower(b.Hash)
	}
	var raw []json.RawMessage
	call(t, node, &raw, "eth_getLogs", map[string]any{"address": contract, "fromBlock": fmt.Sprintf("0x%x", start+1), "toBlock": finalHex})
	want, _ := parseLogs(t, raw)

	headers := map[string]header{}
	for _, s := range []*stream{dHeads, mHeads} {
		it, _ := s.state()
		headersOf(t, headers, it)
	}
	within := func(ls []lg) []lg {
		return slices.DeleteFunc(slices.Clone(ls), func(l lg) bool { return l.block <= start || l.block > final })
	}

	// Through muxd: exact, in order, and no gap, live and across cuts
	// alike (a backfill whose fork keeps moving refetches rather than
	// deliver out of order).
	gaps := gapsCounted(t, md.srv.Metrics())
	mItems, _ := mLogs.state()
	standing, breaks, unknown := checkLogs(t, "muxd logs", mItems, headers)
	for _, b := range breaks {
		t.Errorf("muxd logs: %s", b)
	}
	if got := within(standing); !slices.Equal(got, want) {
		t.Errorf("muxd logs standing (%d) differ from eth_getLogs (%d):\n got %v\nwant %v", len(got), len(want), got, want)
	}
	hItems, _ := mHeads.state()
	view, _, hbreaks := checkHeads(t, hItems)
	for _, b := range hbreaks {
		t.Errorf("muxd newHeads: %s", b)
	}
	for n := start + 1; n <= final; n++ {
		if h, ok := view[n]; ok && h != canon[n] {
			t.Errorf("muxd newHeads: block %d is %s, the node's %s", n, h[:10], canon[n][:10])
		}
	}
	if len(gaps) != 0 {
		t.Errorf("gaps counted: %v", gaps)
	}

	// Direct, for comparison.
	dItems, _ := dLogs.state()
	dStanding, dBreaks, _ := checkLogs(t, "direct logs", dItems, headers)
	stale := 0
	for _, l := range within(dStanding) {
		if !slices.Contains(want, l) {
			stale++
		}
	}
	t.Logf("%d reorgs (%d with the path cut), blocks %d..%d: through muxd %d pushes, %d logs standing = eth_getLogs (%d ancestry checks without headers); direct %d pushes, %d stale logs, %d order breaks",
		len(plan), cuts, start+1, final, len(mItems), len(within(standing)), unknown, len(dItems), stale, len(dBreaks))
}

// gapLine is one "subscription gap not closed" line of muxd's log.
type gapLine struct {
	kind, reason string
	from, to     uint64 // 0: not given
}

func gapLines(t *testing.T, log string) []gapLine {
	t.Helper()
	var out []gapLine
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `msg="subscription gap not closed"`) {
			continue
		}
		var g gapLine
		for _, f := range strings.Fields(line) {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				continue
			}
			switch k {
			case "kind":
				g.kind = v
			case "reason":
				g.reason = v
			case "missed_from":
				fmt.Sscan(v, &g.from)
			case "missed_to":
				fmt.Sscan(v, &g.to)
			}
		}
		out = append(out, g)
	}
	return out
}

// TestAnvilReorgPastBound: with backfill_blocks 4, anvil reorganises 8
// blocks deep, every old block holding logs. muxd cannot send all the
// orphaned logs removed (it remembers the last 4 numbers and the one
// below), so it says so: the logs subscription's gap names exactly the
// blocks from above the fork point to the last one it forgot, in the log
// and (subscription_gap_notices on) in band to its clients; outside those
// blocks its logs are eth_getLogs' exactly. The newHeads subscription
// (anvil pushes every new head) misses nothing and states no gap.
func TestAnvilReorgPastBound(t *testing.T) {
	if testing.Short() {
		t.Skip("runs anvil for about 20 s")
	}
	const depth = 8
	a := startAnvil(t)
	md := startMuxd(t, a.wsURL(), func(c *mux.Config) { c.BackfillBlocks = 4; c.SubscriptionGapNotices = true })
	node := dial(t, a.wsURL())
	var accts []string
	call(t, node, &accts, "eth_accounts")
	contract := deploy(t, node, accts[0])
	via := dial(t, md.wsURL)
	filter := map[string]any{"address": contract}
	// A raw client of the same logs subscription, which reads the gap
	// notice (go-ethereum's client, above, ignores it: its method does not
	// end in _subscription).
	rc := dialRaw(t, md.wsURL)
	rc.send(t, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "eth_subscribe", "params": []any{"logs", filter}})
	dHeads := subscribe(t, node, "direct newHeads", "newHeads")
	mHeads, mLogs := subscribe(t, via, "muxd newHeads", "newHeads"), subscribe(t, via, "muxd logs", "logs", filter)
	var startHex string
	call(t, node, &startHex, "eth_blockNumber")
	start := hexNum(t, startHex)
	// One log in every block for depth+2 blocks: sent one at a time,
	// each after the block that holds the one before.
	for i := range uint64(depth + 2) {
		var tx string
		call(t, node, &tx, "eth_sendTransaction", map[string]any{"from": accts[0], "to": contract, "data": topic(1<<32 + i), "gas": "0x10000"})
		items, _ := dHeads.state()
		next := lastHead(t, items) + 1
		dHeads.await(t, fmt.Sprintf("block %d", next), 30*time.Second, func(it []json.RawMessage) bool { return lastHead(t, it) >= next })
	}
	items, _ := dHeads.state()
	tip := lastHead(t, items)
	mLogs.await(t, "the logs of the blocks before the reorg", 30*time.Second, func(it []json.RawMessage) bool {
		ls, _ := parseLogs(t, it)
		return len(ls) > 0 && ls[len(ls)-1].block >= tip-1
	})
	var pairs []any
	for off := range depth {
		if off%2 == 1 { // the new branch has logs in every other block
			pairs = append(pairs, []any{map[string]any{"from": accts[1], "to": contract, "data": topic(uint64(off + 1)), "gas": "0x10000"}, off})
		}
	}
	var res any
	call(t, node, &res, "anvil_reorg", depth, pairs)
	// The fork point: the first head anvil pushed not above the one
	// before it is the reorg's first new block.
	var fork uint64
	dHeads.await(t, "the reorg's first head", 30*time.Second, func(it []json.RawMessage) bool {
		var prev uint64
		for _, m := range it {
			var h headFields
			_ = json.Unmarshal(m, &h)
			n := hexNum(t, h.Number)
			if prev != 0 && n <= prev {
				fork = n - 1
				return true
			}
			prev = n
		}
		return false
	})
	reorgTip := fork + depth
	quiet := reorgTip + 3
	dHeads.await(t, fmt.Sprintf("block %d", quiet), 30*time.Second, func(it []json.RawMessage) bool { return lastHead(t, it) >= quiet })
	mHeads.await(t, fmt.Sprintf("block %d through muxd", quiet), 30*time.Second, func(it []json.RawMessage) bool { return lastHead(t, it) >= quiet })
	var raw []json.RawMessage
	call(t, node, &raw, "eth_getLogs", map[string]any{"address": contract, "fromBlock": fmt.Sprintf("0x%x", start+1), "toBlock": fmt.Sprintf("0x%x", quiet)})
	want, _ := parseLogs(t, raw)

	var logGaps []gapLine
	for _, g := range gapLines(t, md.log.String()) {
		switch g.kind {
		case "logs":
			logGaps = append(logGaps, g)
		default:
			t.Errorf("gap stated for %s: %+v", g.kind, g)
		}
	}
	stated := func(n uint64) bool {
		for _, g := range logGaps {
			if g.from <= n && n <= g.to {
				return true
			}
		}
		return false
	}
	// Every old block held a log: the stale ones are those below the
	// last 4 numbers and the one below them, from above the fork; the new
	// branch's below the backfill's floor (head-4) are the same blocks.
	if wantGaps := []gapLine{{"logs", "reorg_too_deep", fork + 1, reorgTip - 5}}; !slices.Equal(logGaps, wantGaps) {
		t.Errorf("logs gaps %+v, want %+v (fork at %d, tip %d)", logGaps, wantGaps, fork, reorgTip)
	}
	mItems, _ := mLogs.state()
	standing, _, _ := checkLogs(t, "muxd logs", mItems, map[string]header{})
	var got, wantOut []lg
	for _, l := range standing {
		if l.block > start && !slices.Contains(want, l) && !stated(l.block) {
			t.Errorf("stale log %s standing in a block no gap names (gaps %+v)", l, logGaps)
		}
		if l.block > start && !stated(l.block) {
			got = append(got, l)
		}
	}
	for _, l := range want {
		if !stated(l.block) {
			wantOut = append(wantOut, l)
		}
	}
	if !slices.Equal(got, wantOut) {
		t.Errorf("outside the gap, logs standing\n%v\nwant eth_getLogs'\n%v", got, wantOut)
	}
	// The raw client was told in band, with the same blocks.
	notice := rc.await(t, "a gap notice", func(m map[string]json.RawMessage) bool {
		return string(m["method"]) == `"muxd_subscriptionGap"`
	})
	var params struct {
		Result struct {
			Kind, Reason, FromBlock, ToBlock string
		}
	}
	if err := json.Unmarshal(notice["params"], &params); err != nil {
		t.Fatalf("gap notice params: %v", err)
	}
	if r := params.Result; r.Kind != "logs" || r.Reason != "reorg_too_deep" || hexNum(t, r.FromBlock) != fork+1 || hexNum(t, r.ToBlock) != reorgTip-5 {
		t.Errorf("gap notice %+v, want logs reorg_too_deep %d..%d", r, fork+1, reorgTip-5)
	}
	t.Logf("fork %d, tip %d: logs gaps %+v", fork, reorgTip, logGaps)
}

// rawClient is a WebSocket client that keeps every message it reads.
type rawClient struct {
	conn    *websocket.Conn
	mu      sync.Mutex
	msgs    []map[string]json.RawMessage
	changed chan struct{}
}

func dialRaw(t *testing.T, url string) *rawClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	conn.SetReadLimit(-1)
	c := &rawClient{conn: conn, changed: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			_, b, err := conn.Read(context.Background())
			if err != nil {
				return
			}
			var m map[string]json.RawMessage
			if json.Unmarshal(b, &m) != nil {
				continue
			}
			c.mu.Lock()
			c.msgs = append(c.msgs, m)
			close(c.changed)
			c.changed = make(chan struct{})
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		conn.Close(websocket.StatusNormalClosure, "")
		<-done
	})
	return c
}

func (c *rawClient) send(t *testing.T, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageText, b); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// await returns the first message read that match accepts, waiting for it.
func (c *rawClient) await(t *testing.T, what string, match func(map[string]json.RawMessage) bool) map[string]json.RawMessage {
	t.Helper()
	var found map[string]json.RawMessage
	testnode.AwaitWithin(t, what, 30*time.Second, func() (bool, <-chan struct{}) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, m := range c.msgs {
			if match(m) {
				found = m
				return true, nil
			}
		}
		return false, c.changed
	})
	return found
}

// summarize writes the node's messages to muxd one a line, pushes as
// "head n hash parent" or "log n hash index removed".
func summarize(conns [][]string) string {
	var b strings.Builder
	for i, msgs := range conns {
		fmt.Fprintf(&b, "connection %d:\n", i+1)
		for _, m := range msgs {
			var msg struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Params struct {
					Result json.RawMessage `json:"result"`
				} `json:"params"`
				Result json.RawMessage `json:"result"`
			}
			if json.Unmarshal([]byte(m), &msg) != nil {
				fmt.Fprintf(&b, "  ? %.80s\n", m)
				continue
			}
			if msg.Method != "eth_subscription" {
				fmt.Fprintf(&b, "  answer %s %.60s\n", msg.ID, msg.Result)
				continue
			}
			var h headFields
			var l logFields
			_ = json.Unmarshal(msg.Params.Result, &h)
			_ = json.Unmarshal(msg.Params.Result, &l)
			switch {
			case h.ParentHash != "":
				fmt.Fprintf(&b, "  head %s %.10s parent %.10s\n", h.Number, h.Hash, h.ParentHash)
			case l.BlockHash != "":
				fmt.Fprintf(&b, "  log %s %.10s %s removed=%v\n", l.BlockNumber, l.BlockHash, l.LogIndex, l.Removed)
			default:
				fmt.Fprintf(&b, "  push %.80s\n", msg.Params.Result)
			}
		}
	}
	return b.String()
}
