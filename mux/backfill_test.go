package mux

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/muxd/muxd/gapfill"
)

// fakeChain is the chain a fake node serves to muxd's backfill requests:
// branch 0 up to fork, then branch b.
type fakeChain struct {
	mu     sync.Mutex
	branch uint64
	fork   uint64
	head   uint64
	// hook, when set, may answer a request itself: result "" means no
	// answer at all (a timeout), "error" an error answer.
	hook func(method string, params json.RawMessage) (result string, handled bool)
	asks map[string]int
}

func fakeHash(branch, n uint64) string { return fmt.Sprintf("0x%016x%048x", branch+1, n) }

func (c *fakeChain) hashAt(n uint64) string {
	if n <= c.fork {
		return fakeHash(0, n)
	}
	return fakeHash(c.branch, n)
}

func (c *fakeChain) block(n uint64) string {
	z := "0x" + strings.Repeat("0", 64)
	parent := z
	if n > 0 {
		parent = c.hashAt(n - 1)
	}
	return fmt.Sprintf(`{"baseFeePerGas":"0x7","difficulty":"0x0","extraData":"0x","gasLimit":"0x1c9c380","gasUsed":"0x0","hash":%q,"logsBloom":"0x00","miner":"0x0000000000000000000000000000000000000000","mixHash":%q,"nonce":"0x0000000000000000","number":"0x%x","parentHash":%q,"receiptsRoot":%q,"sha3Uncles":%q,"size":"0x2a1","stateRoot":%q,"timestamp":"0x%x","transactions":[],"transactionsRoot":%q,"uncles":[]}`,
		c.hashAt(n), z, n, parent, z, z, z, 1000+n, z)
}

// head returns block n as geth pushes it for newHeads.
func (c *fakeChain) headPush(n uint64) string {
	h, ok := gapfill.HeaderFromBlock([]byte(c.block(n)))
	if !ok {
		panic("bad block")
	}
	return string(h)
}

func (c *fakeChain) logOf(n, i uint64, removed bool) string {
	return fmt.Sprintf(`{"address":"0x00000000000000000000000000000000000000aa","topics":[],"data":"0x","blockNumber":"0x%x","transactionHash":"0x%064x","transactionIndex":"0x0","blockHash":%q,"blockTimestamp":"0x1","logIndex":"0x%x","removed":%t}`,
		n, n*100+i, c.hashAt(n), i, removed)
}

// answer serves muxd's backfill request r; it reports false for methods
// it does not serve.
func (c *fakeChain) answer(fc *fakeConn, r fakeReq) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.asks == nil {
		c.asks = map[string]int{}
	}
	c.asks[r.Method+string(r.Params)]++
	if c.hook != nil {
		if res, ok := c.hook(r.Method, r.Params); ok {
			switch res {
			case "":
			case "error":
				fc.Send(errorFrame(r.ID, -32000, "backend failure"))
			default:
				fc.Send(resultFrame(r.ID, res))
			}
			return true
		}
	}
	var p []json.RawMessage
	_ = json.Unmarshal(r.Params, &p)
	switch r.Method {
	case "eth_blockNumber":
		fc.Send(resultFrame(r.ID, fmt.Sprintf(`"0x%x"`, c.head)))
	case "eth_getBlockByNumber", "eth_getBlockByHash":
		var q string
		_ = json.Unmarshal(p[0], &q)
		if q == "latest" {
			q = fmt.Sprintf("0x%x", c.head)
		}
		res := "null"
		for n := uint64(0); n <= c.head; n++ {
			if (r.Method == "eth_getBlockByNumber" && q == fmt.Sprintf("0x%x", n)) || q == c.hashAt(n) {
				res = c.block(n)
			}
		}
		fc.Send(resultFrame(r.ID, res))
	case "eth_getLogs":
		var f struct{ FromBlock, ToBlock, BlockHash string }
		_ = json.Unmarshal(p[0], &f)
		var from, to uint64
		if f.BlockHash != "" {
			// By hash (a few blocks missed): that block, if canonical.
			from, to = 1, 0
			for n := uint64(0); n <= c.head; n++ {
				if c.hashAt(n) == f.BlockHash {
					from, to = n, n
				}
			}
		} else {
			from, _ = strconv.ParseUint(f.FromBlock[2:], 16, 64)
			to, _ = strconv.ParseUint(f.ToBlock[2:], 16, 64)
		}
		var logs []string
		for n := from; n <= min(to, c.head); n++ {
			logs = append(logs, c.logOf(n, 0, false), c.logOf(n, 1, false))
		}
		fc.Send(resultFrame(r.ID, "["+strings.Join(logs, ",")+"]"))
	default:
		return false
	}
	return true
}

func (c *fakeChain) set(f func(c *fakeChain)) {
	c.mu.Lock()
	f(c)
	c.mu.Unlock()
}

func newBackfillHarness(t *testing.T, chain *fakeChain, cfg func(*Config)) *harness {
	h := newHarness(t, harnessOpts{cfg: cfg})
	h.fake.SetHandler(func(fc *fakeConn, r fakeReq) {
		if !chain.answer(fc, r) {
			fc.Answer(r)
		}
	})
	return h
}

func upstreamID(t *testing.T, fc *fakeConn) string {
	for id := range fc.WaitLiveSubs(t, 1) {
		return id
	}
	return ""
}

func gapCount(s *Server, kind, reason string) float64 {
	return counterValue(s.metrics.BackfillGaps.WithLabelValues(kind, reason))
}

// headsDelivered starts a backfill harness on chain, subscribes a client
// to newHeads and has the node push blocks 1 to 10, each checked received.
func headsDelivered(t *testing.T, chain *fakeChain, cfg func(*Config)) (h *harness, c *wsClient, sub string, fc *fakeConn, up string) {
	t.Helper()
	h = newBackfillHarness(t, chain, cfg)
	c = h.dial(t)
	sub = c.subscribe(`1`, `["newHeads"]`)
	fc = h.fake.Conn(t, 1)
	up = upstreamID(t, fc)
	for n := uint64(1); n <= 10; n++ {
		fc.MustWrite(t, pushFrame(up, chain.headPush(n)))
		c.recvPush(sub, chain.headPush(n))
	}
	return h, c, sub, fc, up
}

// TestBackfillHeads: through a fake node, a newHeads subscriber gets every
// head once, in chain order, across a jump, a reorg across an outage, a
// gap longer than backfill_blocks, null answers, and failing or silent
// backfill requests.
func TestBackfillHeads(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		cfg       func(*Config)
		reconnect bool
		branch    uint64 // the node's chain after the outage forks from block 8 onto this branch
		head      uint64 // pushed after block 10
		hook      func(method string, params json.RawMessage) (string, bool)
		want      []string // blocks delivered after 10, "n" or "n'" (the other branch)
		gap       [2]string
	}{
		{name: "jump of five heads, no reconnect", head: 16, want: []string{"11", "12", "13", "14", "15", "16"}},
		{name: "reconnect", reconnect: true, head: 14, want: []string{"11", "12", "13", "14"}},
		{name: "reorg across an outage", reconnect: true, branch: 1, head: 12, want: []string{"9'", "10'", "11'", "12'"}},
		{name: "gap longer than backfill_blocks", cfg: func(c *Config) { c.BackfillBlocks = 3 }, reconnect: true, head: 20,
			want: []string{"17", "18", "19", "20"}, gap: [2]string{"newHeads", "too_long"}},
		{name: "null for a block not there yet", head: 13, want: []string{"11", "12", "13"},
			hook: func() func(string, json.RawMessage) (string, bool) {
				n := 0
				return func(m string, p json.RawMessage) (string, bool) {
					if m == "eth_getBlockByNumber" && string(p) == `["0xc",false]` && n < 2 {
						n++
						return "null", true
					}
					return "", false
				}
			}()},
		{name: "backfill requests failing", head: 13, want: []string{"13"}, gap: [2]string{"newHeads", "failed"},
			hook: func(m string, p json.RawMessage) (string, bool) { return "error", m == "eth_getBlockByNumber" }},
		{name: "backfill requests timing out", cfg: func(c *Config) { c.RequestTimeout = 200 * time.Millisecond }, head: 13,
			// Three sends of 200 ms each with retry delays between take
			// about as long as the job may (6 request timeouts): on a
			// loaded machine the job's deadline comes first.
			want: []string{"13"}, gap: [2]string{"newHeads", "failed|timeout"},
			hook: func(m string, p json.RawMessage) (string, bool) { return "", m == "eth_getBlockByNumber" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			chain := &fakeChain{head: 10, fork: 1 << 60}
			h, c, sub, fc, up := headsDelivered(t, chain, tt.cfg)
			chain.set(func(c *fakeChain) {
				c.head, c.hook = tt.head+1, tt.hook
				if tt.branch != 0 {
					c.branch, c.fork = tt.branch, 8
				}
			})
			if tt.reconnect {
				fc.Drop()
				fc = h.fake.Conn(t, 2)
				up = upstreamID(t, fc)
			}
			fc.MustWrite(t, pushFrame(up, chain.headPush(tt.head)))
			// Then the next head, live: it must come after the backfill.
			fc.MustWrite(t, pushFrame(up, chain.headPush(tt.head+1)))
			want := append(tt.want, strconv.FormatUint(tt.head+1, 10))
			if tt.branch != 0 {
				want[len(want)-1] += "'"
			}
			for _, w := range want {
				n, _ := strconv.ParseUint(strings.TrimSuffix(w, "'"), 10, 64)
				c.recvPush(sub, chain.headPush(n))
			}
			c.barrier()
			if tt.gap[0] != "" {
				var got float64
				for _, reason := range strings.Split(tt.gap[1], "|") {
					got += gapCount(h.srv, tt.gap[0], reason)
				}
				if got != 1 {
					t.Errorf("gaps %v = %v, want 1", tt.gap, got)
				}
			}
			// Requests the machine gave up on leave the pending table
			// at their deadline.
			eventually(t, "no backfill request tracked", func() (none bool) {
				st := h.stats()
				none = st.Backfill == 0 && st.Pending == 0
				return none
			})
		})
	}
}

// TestBackfillHeadsWithoutPush: after a reconnect the node pushes nothing
// (a chain whose next block is a while away); the subscriber still gets
// the heads mined during the outage, about HeadWait after the
// resubscription, and then the node's next push, each once and in order.
func TestBackfillHeadsWithoutPush(t *testing.T) {
	t.Parallel()
	chain := &fakeChain{head: 10, fork: 1 << 60}
	h, c, sub, fc, up := headsDelivered(t, chain, nil)
	chain.set(func(c *fakeChain) { c.head = 13 })
	fc.Drop()
	fc = h.fake.Conn(t, 2)
	up = upstreamID(t, fc)
	for n := uint64(11); n <= 13; n++ {
		c.recvPush(sub, chain.headPush(n))
	}
	chain.set(func(c *fakeChain) { c.head = 14 })
	fc.MustWrite(t, pushFrame(up, chain.headPush(13))) // late: dropped
	fc.MustWrite(t, pushFrame(up, chain.headPush(14)))
	c.recvPush(sub, chain.headPush(14))
	c.barrier()
}

// TestBackfillLogsReorg: a reorg across an outage replaces blocks 9 and
// 10 (8, whose logs were delivered too, stays); the logs subscriber gets their logs again with removed:true, then the
// new branch's logs, then what the node pushes live, each once.
func TestBackfillLogsReorg(t *testing.T) {
	t.Parallel()
	chain := &fakeChain{head: 10, fork: 1 << 60}
	h := newBackfillHarness(t, chain, nil)
	c := h.dial(t)
	sub := c.subscribe(`1`, `["logs",{"address":"0x00000000000000000000000000000000000000aa"}]`)
	fc := h.fake.Conn(t, 1)
	up := upstreamID(t, fc)
	// The baseline eth_blockNumber is answered before the first push.
	h.fake.Wait(t, "baseline", func() bool {
		chain.mu.Lock()
		defer chain.mu.Unlock()
		return chain.asks["eth_blockNumber[]"] == 1
	})
	c.barrier()
	old := map[uint64][]string{}
	for n := uint64(8); n <= 10; n++ {
		for i := range uint64(2) {
			l := chain.logOf(n, i, false)
			old[n] = append(old[n], l)
			fc.MustWrite(t, pushFrame(up, l))
			c.recvPush(sub, l)
		}
	}
	chain.set(func(c *fakeChain) { c.branch, c.fork, c.head = 1, 8, 12 })
	fc.Drop()
	fc = h.fake.Conn(t, 2)
	up = upstreamID(t, fc)
	// The new subscription pushes block 12's logs (also in the backfill)
	// and 13's, possibly before the backfill is done.
	for i := range uint64(2) {
		fc.MustWrite(t, pushFrame(up, chain.logOf(12, i, false)))
	}
	for i := range uint64(2) {
		fc.MustWrite(t, pushFrame(up, chain.logOf(13, i, false)))
	}
	for n := uint64(9); n <= 10; n++ {
		for i := range uint64(2) {
			c.recvPush(sub, strings.Replace(old[n][i], `"removed":false`, `"removed":true`, 1))
		}
	}
	for n := uint64(9); n <= 13; n++ {
		for i := range uint64(2) {
			c.recvPush(sub, chain.logOf(n, i, false))
		}
	}
	c.barrier()
	if got := counterValue(h.srv.metrics.BackfilledLogs); got != 4+8 {
		t.Errorf("logs backfilled = %v, want 12", got)
	}
	if got := gapCount(h.srv, "logs", "reorg_too_deep"); got != 0 {
		t.Errorf("reorg_too_deep counted with the fork point remembered")
	}
}
