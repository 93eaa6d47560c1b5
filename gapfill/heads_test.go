package gapfill

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/muxd/muxd/router"
)

const headsKey = `["newHeads"]`

// TestHeads is the table of newHeads rules: the node's view (chain, what
// it answers), what was delivered before, the push that comes, and what
// the key must see.
func TestHeads(t *testing.T) {
	main := chainOf(0, 0, 40)
	forked := chainOf(1, 8, 40) // shares 0..8 with main
	type tc struct {
		name    string
		cfg     Config
		before  uint64         // heads 1..before of main delivered live first
		node    map[uint64]blk // the node's canonical chain
		extra   map[uint64]blk // another branch the node knows by hash
		head    uint64         // node's head, and the head pushed
		hook    func(s Send) ([]byte, bool, bool)
		ticks   int      // Tick(RetryDelay) this many times after the push
		want    []string // delivered after the first `before`
		wantBF  int      // heads backfilled
		wantGap []Gap
	}
	nullOnce := func() func(Send) ([]byte, bool, bool) {
		asked := map[string]int{}
		return func(s Send) ([]byte, bool, bool) {
			asked[string(s.Params)]++
			if s.Method == "eth_getBlockByNumber" && string(s.Params) == `["0xf",false]` && asked[string(s.Params)] <= 2 {
				return []byte("null"), true, false
			}
			return nil, false, false
		}
	}
	tests := []tc{
		{name: "consecutive heads pass through", before: 10, node: main, head: 11,
			want: headsOf(main, 11, 11)},
		{name: "a jump of five heads, no reconnect", before: 10, node: main, head: 16,
			want: headsOf(main, 11, 16), wantBF: 5},
		{name: "the same head again is dropped", before: 10, node: main, head: 10},
		{name: "reorg across an outage: the new branch from the fork point", before: 10, node: forked, head: 12,
			want: headsOf(forked, 9, 12), wantBF: 3},
		{name: "reorg: the next number, but another parent", before: 10, node: forked, head: 11,
			want: headsOf(forked, 9, 11), wantBF: 2},
		{name: "reorg to a shorter branch", before: 12, node: forked, head: 10,
			want: headsOf(forked, 9, 10), wantBF: 1},
		{name: "gap longer than backfill_blocks: from head-blocks, counted", cfg: Config{Blocks: 4}, before: 10, node: main, head: 30,
			want: headsOf(main, 26, 30), wantBF: 4, wantGap: []Gap{{Kind: "newHeads", Reason: "too_long"}}},
		{name: "null for a block not there yet is asked again", before: 10, node: main, head: 16, hook: nullOnce(), ticks: 3,
			want: headsOf(main, 11, 16), wantBF: 5},
		{name: "null past NullRetries: delivered what it has, counted", cfg: Config{NullRetries: 2}, before: 10, node: main, head: 16,
			hook: func(s Send) ([]byte, bool, bool) {
				if string(s.Params) == `["0xc",false]` {
					return []byte("null"), true, false
				}
				return nil, false, false
			}, ticks: 5,
			// 11 continues the delivered chain: it goes ahead of the walk.
			want: append(headsOf(main, 11, 11), headsOf(main, 13, 16)...), wantBF: 4, wantGap: []Gap{{Kind: "newHeads", Reason: "unavailable"}}},
		{name: "an error is retried", before: 10, node: main, head: 13, ticks: 2,
			hook: func() func(Send) ([]byte, bool, bool) {
				n := 0
				return func(s Send) ([]byte, bool, bool) {
					if s.Method == "eth_getBlockByNumber" && n == 0 {
						n++
						return nil, true, false
					}
					return nil, false, false
				}
			}(),
			want: headsOf(main, 11, 13), wantBF: 2},
		{name: "errors past Attempts: counted, delivery resumes in order", cfg: Config{Attempts: 2}, before: 10, node: main, head: 13, ticks: 3,
			hook: func(s Send) ([]byte, bool, bool) {
				if string(s.Params) == `["0xb",false]` {
					return nil, true, false
				}
				return nil, false, false
			},
			want: headsOf(main, 12, 13), wantBF: 1, wantGap: []Gap{{Kind: "newHeads", Reason: "failed"}}},
		{name: "a block that is no block counts as an error", cfg: Config{Attempts: 1}, before: 10, node: main, head: 12,
			hook: func(s Send) ([]byte, bool, bool) {
				if s.Method == "eth_getBlockByNumber" {
					return []byte(`{"number":"0xb"}`), true, false
				}
				return nil, false, false
			},
			want: headsOf(main, 12, 12), wantGap: []Gap{{Kind: "newHeads", Reason: "failed"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &node{chain: tt.node, head: tt.head, hook: tt.hook}
			h := newHarness(t, withBlocks(tt.cfg), n)
			h.apply(h.m.Live(headsKey, h.now), nil)
			for i := uint64(1); i <= tt.before; i++ {
				h.push(headsKey, headJSON(main[i]))
			}
			if got := h.deliveredHeads(); !slices.Equal(got, headsOf(main, 1, tt.before)) || len(n.seen) != 0 {
				t.Fatalf("live heads: delivered %v, requests %v", got, n.seen)
			}
			h.out = nil
			h.push(headsKey, headJSON(tt.node[tt.head]))
			for range tt.ticks {
				h.tick(h.m.cfg.RetryDelay)
			}
			if got := h.deliveredHeads(); !slices.Equal(got, tt.want) {
				t.Errorf("delivered\n%v\nwant\n%v", got, tt.want)
			}
			if h.heads != tt.wantBF || !slices.Equal(h.gaps, tt.wantGap) {
				t.Errorf("backfilled %d gaps %v, want %d %v", h.heads, h.gaps, tt.wantBF, tt.wantGap)
			}
			if h.m.keys[headsKey].job != nil {
				t.Errorf("job still running")
			}
			// Afterwards the next head passes through with no request.
			sent := len(n.seen)
			h.out = nil
			next := tt.node[tt.head+1]
			h.push(headsKey, headJSON(next))
			if got := h.deliveredHeads(); len(n.seen) != sent || len(got) != 1 {
				t.Errorf("next head: delivered %v with %d requests", got, len(n.seen)-sent)
			}
		})
	}
}

func withBlocks(c Config) Config {
	if c.Blocks == 0 {
		c.Blocks = DefaultBlocks
	}
	return c
}

// TestHeadsHeldDuringJob: heads pushed while a backfill runs are delivered
// after it, in order, once each.
func TestHeadsHeldDuringJob(t *testing.T) {
	main := chainOf(0, 0, 40)
	n := &node{chain: main, head: 20}
	var held []Send
	n.hook = func(s Send) ([]byte, bool, bool) {
		if len(held) < 100 {
			held = append(held, s)
			return nil, false, true // answered later, by hand
		}
		return nil, false, false
	}
	h := newHarness(t, Config{Blocks: 128}, n)
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.push(headsKey, headJSON(main[10]))
	h.push(headsKey, headJSON(main[14])) // job: 11..13
	h.push(headsKey, headJSON(main[15])) // held
	h.push(headsKey, headJSON(main[15])) // held, duplicate
	h.push(headsKey, []byte(`{"not":"a head"}`))
	h.push(headsKey, headJSON(main[16])) // held
	if got := h.deliveredHeads(); !slices.Equal(got, headsOf(main, 10, 10)) {
		t.Fatalf("before the answers: %v", got)
	}
	for _, s := range held {
		res, _ := (&node{chain: main, head: 20}).answer(s)
		h.apply(h.m.Answer(s.ID, res, h.now), nil)
	}
	want := append(headsOf(main, 10, 15), `?{"not":"a head"}`)
	want = append(want, headsOf(main, 16, 16)...)
	if got := h.deliveredHeads(); !slices.Equal(got, want) {
		t.Fatalf("delivered %v\nwant %v", got, want)
	}
}

// TestHeadsTimeout: a request the node never answers times out after
// RequestTimeout and is sent again; a job past JobTimeout gives up and
// delivers in order.
func TestHeadsTimeout(t *testing.T) {
	main := chainOf(0, 0, 40)
	n := &node{chain: main, head: 13, hook: func(s Send) ([]byte, bool, bool) { return nil, false, true }}
	cfg := Config{Blocks: 128, RequestTimeout: time.Second, Attempts: 100, JobTimeout: 10 * time.Second}
	h := newHarness(t, cfg, n)
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.push(headsKey, headJSON(main[10]))
	h.push(headsKey, headJSON(main[13]))
	if len(n.seen) != 2 {
		t.Fatalf("sent %d requests, want 2", len(n.seen))
	}
	h.tick(999 * time.Millisecond)
	if len(n.seen) != 2 {
		t.Fatalf("resent before the timeout")
	}
	h.tick(time.Millisecond)   // timed out: retried after RetryDelay
	h.tick(h.m.cfg.RetryDelay) // resent
	if len(n.seen) != 4 {
		t.Fatalf("sent %d requests after a timeout, want 4", len(n.seen))
	}
	for range 20 {
		h.tick(time.Second)
	}
	want := headsOf(main, 10, 10)
	want = append(want, headsOf(main, 13, 13)...)
	if got := h.deliveredHeads(); !slices.Equal(got, want) || !slices.Equal(h.gaps, []Gap{{Kind: "newHeads", Reason: "timeout"}}) {
		t.Fatalf("delivered %v gaps %v", got, h.gaps)
	}
	if len(h.m.reqs) != 0 {
		t.Fatalf("%d requests still tracked", len(h.m.reqs))
	}
}

// TestHeadsDisconnected: a job cut by a lost connection delivers nothing;
// the next connection's first head fetches the same blocks again.
func TestHeadsDisconnected(t *testing.T) {
	main := chainOf(0, 0, 40)
	n := &node{chain: main, head: 20, hook: func(s Send) ([]byte, bool, bool) { return nil, false, true }}
	h := newHarness(t, Config{Blocks: 128}, n)
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.push(headsKey, headJSON(main[10]))
	h.push(headsKey, headJSON(main[13]))
	h.m.Disconnected()
	n.hook = nil
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.push(headsKey, headJSON(main[15]))
	if got := h.deliveredHeads(); !slices.Equal(got, headsOf(main, 10, 15)) {
		t.Fatalf("delivered %v", got)
	}
}

// TestNotHeads: payloads that are no heads pass through untouched and
// start nothing; so does everything when backfill is off.
func TestNotHeads(t *testing.T) {
	for _, cfg := range []Config{{Blocks: 128}, {Blocks: 0}} {
		n := &node{}
		h := newHarness(t, cfg, n)
		h.apply(h.m.Live(headsKey, h.now), nil)
		for _, p := range []string{`{"n":1,"conn":2,"params":["newHeads"]}`, `{"n":3}`, `"x"`, `{"number":"0x5","hash":"0x1","parentHash":"0x2"}`} {
			h.push(headsKey, []byte(p))
		}
		if len(h.out) != 4 || len(n.seen) != 0 {
			t.Fatalf("Blocks %d: delivered %d, sent %v", cfg.Blocks, len(h.out), n.seen)
		}
	}
}

// TestHeadsShortConnections: every connection is lost after the node has
// answered a few of the job's requests, fewer than the gap needs. What
// each connection fetched is kept, so the backfill still finishes and
// delivers every head once, in order; no block is asked for by number
// twice.
func TestHeadsShortConnections(t *testing.T) {
	main := chainOf(0, 0, 80)
	const perConn = 5 // answers the node gives before the connection drops
	answered := 0
	got := map[string]int{} // by-number requests answered, by params
	n := &node{chain: main}
	n.hook = func(s Send) ([]byte, bool, bool) {
		if answered >= perConn {
			return nil, false, true // the connection is gone: never answered
		}
		answered++
		if s.Method == "eth_getBlockByNumber" {
			got[string(s.Params)]++
		}
		return nil, false, false
	}
	h := newHarness(t, Config{Blocks: 128}, n)
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.push(headsKey, headJSON(main[10]))
	head := uint64(30)
	for conn := 0; conn < 12 && h.m.keys[headsKey].last < head; conn++ {
		// The chain grows by one block per connection; each connection
		// pushes its head once.
		head = 30 + uint64(conn)
		n.head = head
		answered = 0
		h.apply(h.m.Live(headsKey, h.now), nil)
		h.push(headsKey, headJSON(main[head]))
		h.m.Disconnected()
	}
	if d := h.deliveredHeads(); !slices.Equal(d, headsOf(main, 10, head)) {
		t.Fatalf("delivered\n%v\nwant\n%v", d, headsOf(main, 10, head))
	}
	if h.heads != int(head-11) || len(h.gaps) != 0 {
		t.Errorf("backfilled %d gaps %v, want %d none", h.heads, h.gaps, head-11)
	}
	for params, k := range got {
		if k > 1 {
			t.Errorf("the node answered %s %d times", params, k)
		}
	}
}

// TestHeadsContinuationAheadOfWalk: the fetched blocks that continue the
// delivered chain are delivered as they come, before the walk down from
// the new head reaches them; a connection lost before the job ends has
// still delivered them, and the next job starts above them.
func TestHeadsContinuationAheadOfWalk(t *testing.T) {
	main := chainOf(0, 0, 40)
	n := &node{chain: main, head: 20, hook: func(s Send) ([]byte, bool, bool) {
		var p []json.RawMessage
		_ = json.Unmarshal(s.Params, &p)
		var q string
		_ = json.Unmarshal(p[0], &q)
		num, _ := router.ParseQuantity(q)
		return nil, false, num >= 15 // the high blocks: never answered
	}}
	h := newHarness(t, Config{Blocks: 128}, n)
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.push(headsKey, headJSON(main[10]))
	h.push(headsKey, headJSON(main[20])) // job: 11..19, the walk waits for 19
	if got := h.deliveredHeads(); !slices.Equal(got, headsOf(main, 10, 14)) || h.heads != 4 {
		t.Fatalf("before the loss: delivered %v, backfilled %d; want %v, 4", got, h.heads, headsOf(main, 10, 14))
	}
	h.m.Disconnected()
	n.hook = nil
	asked := len(n.seen)
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.push(headsKey, headJSON(main[21]))
	if got := h.deliveredHeads(); !slices.Equal(got, headsOf(main, 10, 21)) || h.heads != 10 || len(h.gaps) != 0 {
		t.Fatalf("after: delivered %v, backfilled %d, gaps %v", got, h.heads, h.gaps)
	}
	for _, s := range n.seen[asked:] {
		if s.Method != "eth_getBlockByNumber" {
			continue
		}
		var p []string
		_ = json.Unmarshal(bytes.Replace(s.Params, []byte(",false"), nil, 1), &p)
		if num, _ := router.ParseQuantity(p[0]); num <= 14 {
			t.Errorf("the next job asked again for delivered block %d", num)
		}
	}
}

// TestHeadsBottomFirst: the node answers each connection fewer requests
// than blocks were mined since the last one. The key still moves on by
// what each connection answered, from the bottom of the gap, in order.
func TestHeadsBottomFirst(t *testing.T) {
	main := chainOf(0, 0, 80)
	const perConn = 4
	answered := 0
	n := &node{chain: main, hook: func(s Send) ([]byte, bool, bool) {
		if answered >= perConn {
			return nil, false, true
		}
		answered++
		return nil, false, false
	}}
	h := newHarness(t, Config{Blocks: 128}, n)
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.push(headsKey, headJSON(main[10]))
	for conn := range uint64(5) {
		n.head = 20 + perConn*conn // more mined than the connection answers
		answered = 0
		h.apply(h.m.Live(headsKey, h.now), nil)
		h.push(headsKey, headJSON(main[n.head]))
		h.m.Disconnected()
	}
	// At least what the connections answered, as a contiguous chain.
	got := h.deliveredHeads()
	if len(got) < 1+5*perConn || !slices.Equal(got, headsOf(main, 10, 10+uint64(len(got))-1)) || h.heads != len(got)-1 {
		t.Fatalf("delivered %v (backfilled %d); want at least 10..%d in order", got, h.heads, 10+5*perConn)
	}
}

// TestHeadsReorgShortConnections: a reorg replaced heads already
// delivered, and every connection is lost after the node has answered one
// request. The walk down from the new head below the last delivered head
// (blocks asked for by hash) keeps what each connection fetched, so the
// backfill still finishes: the new branch from the fork point, once, in
// order.
func TestHeadsReorgShortConnections(t *testing.T) {
	main := chainOf(0, 0, 40)
	forked := chainOf(1, 6, 40) // shares 0..6 with main: 7..10 delivered are replaced
	const head = 14
	answered := 0
	n := &node{chain: forked, head: head, hook: func(s Send) ([]byte, bool, bool) {
		if answered >= 1 {
			return nil, false, true // the connection is gone: never answered
		}
		answered++
		return nil, false, false
	}}
	h := newHarness(t, Config{Blocks: 128}, n)
	h.apply(h.m.Live(headsKey, h.now), nil)
	for i := uint64(1); i <= 10; i++ {
		h.push(headsKey, headJSON(main[i]))
	}
	h.out = nil
	conns := 0
	for ; conns < 30 && h.m.keys[headsKey].last != head; conns++ {
		answered = 0
		h.apply(h.m.Live(headsKey, h.now), nil)
		h.push(headsKey, headJSON(forked[head]))
		h.m.Disconnected()
	}
	if got := h.deliveredHeads(); !slices.Equal(got, headsOf(forked, 7, head)) || len(h.gaps) != 0 {
		t.Fatalf("after %d connections: delivered\n%v\nwant\n%v\ngaps %v", conns, got, headsOf(forked, 7, head), h.gaps)
	}
}

// TestHeadsReorgRoundTrips: the walk below a replaced delivered head asks
// for the blocks under it by number all at once, so a reorg four heads
// deep costs two round trips (block 11, then the heads under it at once),
// not one per replaced head.
func TestHeadsReorgRoundTrips(t *testing.T) {
	main := chainOf(0, 0, 40)
	forked := chainOf(1, 6, 40) // 7..10 delivered are replaced
	var held []Send
	n := &node{chain: forked, head: 12, hook: func(s Send) ([]byte, bool, bool) {
		held = append(held, s)
		return nil, false, true // answered below, a round at a time
	}}
	h := newHarness(t, Config{Blocks: 128}, n)
	h.apply(h.m.Live(headsKey, h.now), nil)
	for i := uint64(1); i <= 10; i++ {
		h.push(headsKey, headJSON(main[i]))
	}
	h.out = nil
	h.push(headsKey, headJSON(forked[12]))
	rounds := 0
	for ; len(held) > 0 && rounds < 10; rounds++ {
		round := held
		held = nil
		for _, s := range round {
			res, _ := (&node{chain: forked, head: 12}).answer(s)
			h.apply(h.m.Answer(s.ID, res, h.now), nil)
		}
	}
	if got := h.deliveredHeads(); !slices.Equal(got, headsOf(forked, 7, 12)) || len(h.gaps) != 0 {
		t.Fatalf("delivered %v gaps %v, want %v", got, h.gaps, headsOf(forked, 7, 12))
	}
	if rounds > 2 {
		t.Errorf("%d round trips, want 2 (block 11, then the replaced heads at once)", rounds)
	}
}

// TestHeadsLiveAgainAsksHead: a newHeads key live again after a reconnect
// waits HeadWait for the node's next push; with none, it asks the node for
// its head and delivers the heads mined while it was not live at once,
// each once and in order, instead of a block time later. What each case
// sends and delivers.
func TestHeadsLiveAgainAsksHead(t *testing.T) {
	main := chainOf(0, 0, 40)
	latest := func(ss []Send) int {
		k := 0
		for _, s := range ss {
			if s.Method == "eth_getBlockByNumber" && string(s.Params) == `["latest",false]` {
				k++
			}
		}
		return k
	}
	tests := []struct {
		name      string
		nodeHead  uint64 // the node's head after the reconnect (10 delivered before)
		pushFirst bool   // the node pushes its head before HeadWait is over
		lostFirst bool   // the connection is lost before HeadWait is over
		wantAsked int    // eth_getBlockByNumber("latest") sent
		want      []string
		wantBF    int
		pushAfter uint64 // then the node pushes this head (0: none)
		wantFinal []string
	}{
		{name: "blocks mined meanwhile: delivered when the wait is over", nodeHead: 15, wantAsked: 1,
			want: headsOf(main, 11, 15), wantBF: 4, pushAfter: 16, wantFinal: headsOf(main, 11, 16)},
		{name: "the node's push of the fetched head is dropped", nodeHead: 13, wantAsked: 1,
			want: headsOf(main, 11, 13), wantBF: 2, pushAfter: 13, wantFinal: headsOf(main, 11, 13)},
		{name: "the next block only: delivered alone", nodeHead: 11, wantAsked: 1,
			want: headsOf(main, 11, 11), pushAfter: 12, wantFinal: headsOf(main, 11, 12)},
		{name: "nothing mined: nothing delivered", nodeHead: 10, wantAsked: 1,
			pushAfter: 11, wantFinal: headsOf(main, 11, 11)},
		{name: "a node behind the last head: nothing delivered, no job", nodeHead: 8, wantAsked: 1},
		{name: "the node pushes first: not asked", nodeHead: 14, pushFirst: true,
			want: headsOf(main, 11, 14), wantBF: 3, wantFinal: headsOf(main, 11, 14)},
		{name: "connection lost before the wait is over: not asked", nodeHead: 14, lostFirst: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := &node{chain: main, head: 10}
			h := newHarness(t, Config{Blocks: 128}, n)
			h.apply(h.m.Live(headsKey, h.now), nil)
			for i := uint64(1); i <= 10; i++ {
				h.push(headsKey, headJSON(main[i]))
			}
			h.out, n.seen = nil, nil
			h.m.Disconnected()
			n.head = tc.nodeHead
			h.apply(h.m.Live(headsKey, h.now), nil)
			if len(h.out) != 0 || len(n.seen) != 0 {
				t.Fatalf("at Live: delivered %v, sent %v", h.deliveredHeads(), n.seen)
			}
			h.tick(DefaultHeadWait / 2)
			if tc.pushFirst {
				h.push(headsKey, headJSON(main[tc.nodeHead]))
			}
			if tc.lostFirst {
				h.m.Disconnected()
			}
			h.tick(DefaultHeadWait)
			h.tick(DefaultHeadWait)
			if got := latest(n.seen); got != tc.wantAsked {
				t.Errorf("asked for the head %d times, want %d", got, tc.wantAsked)
			}
			if got := h.deliveredHeads(); !slices.Equal(got, tc.want) || h.heads != tc.wantBF || len(h.gaps) != 0 {
				t.Fatalf("delivered %v (backfilled %d, gaps %v), want %v (%d)", got, h.heads, h.gaps, tc.want, tc.wantBF)
			}
			if k := h.m.keys[headsKey]; k.job != nil {
				t.Fatalf("a job still runs")
			}
			if tc.pushAfter > 0 {
				n.head = max(n.head, tc.pushAfter)
				h.push(headsKey, headJSON(main[tc.pushAfter]))
				if got := h.deliveredHeads(); !slices.Equal(got, tc.wantFinal) {
					t.Fatalf("after the push of %d: delivered %v, want %v", tc.pushAfter, got, tc.wantFinal)
				}
			}
		})
	}
}

// TestHeadsLatestAfterPush: the node's head, asked after HeadWait, is
// answered after a push has started a job: the answer changes nothing
// and every head is still delivered once, in order.
func TestHeadsLatestAfterPush(t *testing.T) {
	main := chainOf(0, 0, 40)
	h := latestHeldBack(t, Config{Blocks: 128}, main)
	if len(h.unans) != 1 {
		t.Fatalf("unanswered %v, want the head request", h.unans)
	}
	h.push(headsKey, headJSON(main[14])) // job: 11..13, then 14
	h.collect(h.m.Answer(h.unans[0].ID, blockJSON(main[14]), h.now), nil)
	h.push(headsKey, headJSON(main[15]))
	if got := h.deliveredHeads(); !slices.Equal(got, headsOf(main, 10, 15)) || h.heads != 3 {
		t.Fatalf("delivered %v (backfilled %d), want %v (3)", got, h.heads, headsOf(main, 10, 15))
	}
}

// TestHeadsLatestTimesOutDuringJob: the node's head, asked after HeadWait,
// times out after a push has started a job: it is no request of that job,
// which neither counts it nor fails for it.
func TestHeadsLatestTimesOutDuringJob(t *testing.T) {
	main := chainOf(0, 0, 40)
	h := latestHeldBack(t, Config{Blocks: 128, Attempts: 1}, main)
	h.n.hook = func(s Send) ([]byte, bool, bool) { return nil, false, true } // the job's requests held too
	h.now = h.now.Add(DefaultRequestTimeout - time.Second)
	h.push(headsKey, headJSON(main[14])) // starts a job: 11..13
	h.tick(2 * time.Second)              // the head request is past its deadline, the job's are not
	if len(h.gaps) != 0 || h.m.keys[headsKey].job == nil {
		t.Fatalf("gaps %v, job running %v: the head request's timeout failed the job", h.gaps, h.m.keys[headsKey].job != nil)
	}
}

// latestHeldBack delivers head 10 of main live, loses the connection, moves
// the node to head 14 and makes the key live again; after HeadWait the key
// asks for the node's head, which the node leaves unanswered (in h.unans).
func latestHeldBack(t *testing.T, cfg Config, main map[uint64]blk) *harness {
	t.Helper()
	n := &node{chain: main, head: 10}
	h := newHarness(t, cfg, n)
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.push(headsKey, headJSON(main[10]))
	h.m.Disconnected()
	n.head = 14
	n.hook = func(s Send) ([]byte, bool, bool) {
		return nil, false, string(s.Params) == `["latest",false]` // held back
	}
	h.apply(h.m.Live(headsKey, h.now), nil)
	h.tick(DefaultHeadWait)
	return h
}
