package core

import (
	"fmt"
	"strings"
	"testing"
)

const (
	hashA = "0xaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	hashB = "0xbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	hashC = "0xcccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
	hashD = "0xdddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
	txA   = "0x1111111111111111111111111111111111111111111111111111111111111111"
)

// roundTrip sends req from a new client and, when it goes upstream,
// answers it with result. It returns the upstream frames sent and what the
// client got.
func (r *coalRig) roundTrip(id, method, params, result string) (up, got []string) {
	r.t.Helper()
	cl := r.join()
	o := r.send(cl, request(id, method, params))
	if len(o.up) == 0 {
		return nil, o.to[cl]
	}
	return o.up, r.upstream(reply(r.t, o.up[0], result)).to[cl]
}

// TestCacheImmutable: an answer that cannot change is answered from the
// cache the second time, byte for byte as the node wrote it, under the
// second client's id; anything else, a null or an error goes upstream
// again.
func TestCacheImmutable(t *testing.T) {
	block := `{"hash":"` + hashA + `","number":"0x10","transactions":[]}`
	for _, tc := range []struct {
		name, method, params, result string
		cached                       bool
	}{
		{"chain id", "eth_chainId", `[]`, `"0x1"`, true},
		{"net version", "net_version", `[]`, `"1"`, true},
		{"block by hash", "eth_getBlockByHash", `["` + hashA + `",false]`, block, true},
		{"receipts by hash", "eth_getBlockReceipts", `["` + hashA + `"]`, `[]`, true},
		{"logs by block hash", "eth_getLogs", `[{"blockHash":"` + hashA + `","address":"0x01"}]`, `[{"logIndex":"0x0"}]`, true},
		{"receipts by number", "eth_getBlockReceipts", `["0x10"]`, `[]`, false},
		{"receipts latest", "eth_getBlockReceipts", `["latest"]`, `[]`, false},
		{"receipts require canonical", "eth_getBlockReceipts", `[{"blockHash":"` + hashA + `","requireCanonical":true}]`, `[]`, false},
		{"no logs by block hash", "eth_getLogs", `[{"blockHash":"` + hashA + `","address":"0x01"}]`, `[]`, false},
		{"logs by range", "eth_getLogs", `[{"fromBlock":"0x1","toBlock":"0x2"}]`, `[]`, false},
		{"block by number", "eth_getBlockByNumber", `["0x10",false]`, block, false},
		{"block number", "eth_blockNumber", `[]`, `"0x10"`, false},
		{"null block", "eth_getBlockByHash", `["` + hashA + `",false]`, `null`, false},
		{"transaction, no head seen", "eth_getTransactionByHash", `["` + txA + `"]`, `{"blockHash":"` + hashA + `","blockNumber":"0x10"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newCoalRig(t, nil)
			r.connect()
			up, first := r.roundTrip(`1`, tc.method, tc.params, tc.result)
			if len(up) != 1 || len(first) != 1 {
				t.Fatalf("first request: %d frames, answers %q", len(up), first)
			}
			up2, second := r.roundTrip(`"second"`, tc.method, tc.params, tc.result)
			if tc.cached != (len(up2) == 0) {
				t.Fatalf("second request sent %d frames, cached should be %v", len(up2), tc.cached)
			}
			if want := strings.Replace(first[0], `"id":1`, `"id":"second"`, 1); len(second) != 1 || second[0] != want {
				t.Errorf("second answer %q, want %q", second, want)
			}
			wantHits := 0
			if tc.cached {
				wantHits = 1
			}
			if r.counts.hits != wantHits {
				t.Errorf("hits %d, want %d", r.counts.hits, wantHits)
			}
		})
	}
}

// TestCacheNoErrors: an error answer is not cached.
func TestCacheNoErrors(t *testing.T) {
	r := newCoalRig(t, nil)
	r.connect()
	cl := r.join()
	o := r.send(cl, request(`1`, "eth_chainId", `[]`))
	r.upstream(`{"jsonrpc":"2.0","id":` + upID(t, o.up[0]) + `,"error":{"code":-32000,"message":"busy"}}`)
	if o := r.send(cl, request(`2`, "eth_chainId", `[]`)); len(o.up) != 1 {
		t.Errorf("after an error, %d frames, want 1", len(o.up))
	}
}

// TestCacheBound: the cache never holds more than its bound, evicting the
// least recently used answer first.
func TestCacheBound(t *testing.T) {
	const bound = 4096
	r := newCoalRig(t, func(c *Config) { c.CacheBytes = bound })
	r.connect()
	hash := func(i int) string { return fmt.Sprintf("0x%064x", i) }
	params := func(i int) string { return `["` + hash(i) + `",false]` }
	filler := strings.Repeat("00", 150)
	for i := range 40 {
		r.roundTrip(fmt.Sprint(i), "eth_getBlockByHash", params(i), `{"hash":"`+hash(i)+`","extraData":"0x`+filler+`"}`)
		if got := r.c.Stats().CacheBytes; got > bound || r.counts.bytes != got {
			t.Fatalf("after %d answers the cache holds %d bytes (gauge %d), bound %d", i+1, got, r.counts.bytes, bound)
		}
		if i == 1 {
			// Keep block 0 recently used.
			if up, _ := r.roundTrip("0", "eth_getBlockByHash", params(0), `null`); len(up) != 0 {
				t.Fatal("block 0 not cached")
			}
		}
	}
	if r.counts.evicted == 0 {
		t.Fatal("nothing evicted")
	}
	if up, _ := r.roundTrip(`"x"`, "eth_getBlockByHash", params(39), `null`); len(up) != 0 {
		t.Error("the last answer was evicted")
	}
	if up, _ := r.roundTrip(`"y"`, "eth_getBlockByHash", params(1), `null`); len(up) != 1 {
		t.Error("the least recently used answer was kept")
	}
	// An answer over a quarter of the bound is not kept at all.
	big := `{"extraData":"0x` + strings.Repeat("00", bound/4) + `"}`
	r.roundTrip(`"z"`, "eth_getBlockByHash", params(100), big)
	if up, _ := r.roundTrip(`"z"`, "eth_getBlockByHash", params(100), big); len(up) != 1 {
		t.Error("an answer over a quarter of the bound was cached")
	}
}

// headRig is a coalRig with a newHeads subscription live, so that the
// core sees the node's heads.
type headRig struct {
	*coalRig
	sub string
}

func newHeadRig(t *testing.T) *headRig { return newHeadRigWith(t, nil) }

// newHeadRigWith is newHeadRig over a config changed by tweak.
func newHeadRigWith(t *testing.T, tweak func(*Config)) *headRig {
	r := newCoalRig(t, tweak)
	r.connect()
	cl := r.join()
	o := r.send(cl, request(`1`, "eth_subscribe", `["newHeads"]`))
	if len(o.up) != 1 {
		t.Fatalf("subscribe sent %q", o.up)
	}
	r.upstream(reply(t, o.up[0], `"0xfeed"`))
	return &headRig{r, "0xfeed"}
}

// head pushes the head (number, hash, parent).
func (h *headRig) head(n int, hash, parent string) out {
	return h.upstream(fmt.Sprintf(`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"%s","result":{"parentHash":"%s","number":"0x%x","hash":"%s"}}}`, h.sub, parent, n, hash))
}

// TestCacheReorg: a mined transaction or receipt is cached only in a block
// the heads show canonical, and a reorg evicts it; what is cached by block
// hash stays across a reorg, and goes when the head is set back.
func TestCacheReorg(t *testing.T) {
	receipt := func(block string) string {
		return `{"transactionHash":"` + txA + `","blockHash":"` + block + `","blockNumber":"0x11","status":"0x1"}`
	}
	h := newHeadRig(t)
	h.head(0x10, hashA, hashD)
	// Mined in a block no head named yet: not cached.
	h.roundTrip(`1`, "eth_getTransactionReceipt", `["`+txA+`"]`, receipt(hashB))
	if up, _ := h.roundTrip(`2`, "eth_getTransactionReceipt", `["`+txA+`"]`, receipt(hashB)); len(up) != 1 {
		t.Fatal("a receipt in a block not seen was cached")
	}
	// Pending (no block yet): not cached.
	h.roundTrip(`3`, "eth_getTransactionByHash", `["`+txA+`"]`, `{"hash":"`+txA+`","blockHash":null,"blockNumber":null}`)
	if up, _ := h.roundTrip(`4`, "eth_getTransactionByHash", `["`+txA+`"]`, `null`); len(up) != 1 {
		t.Fatal("a pending transaction was cached")
	}
	h.head(0x11, hashB, hashA)
	h.roundTrip(`5`, "eth_getTransactionReceipt", `["`+txA+`"]`, receipt(hashB))
	if up, _ := h.roundTrip(`6`, "eth_getTransactionReceipt", `["`+txA+`"]`, `null`); len(up) != 0 {
		t.Fatal("a receipt in a canonical block was not cached")
	}
	// Block by hash does not depend on the chain: it stays.
	h.roundTrip(`7`, "eth_getBlockByHash", `["`+hashB+`",false]`, `{"hash":"`+hashB+`"}`)
	// A reorg: another block 0x11.
	evicted := h.counts.evicted
	h.head(0x11, hashC, hashA)
	if h.counts.evicted != evicted+1 || h.counts.lastEvicted != "eth_getTransactionReceipt" {
		t.Errorf("reorg evicted %d entries (last %s), want 1 (eth_getTransactionReceipt)", h.counts.evicted-evicted, h.counts.lastEvicted)
	}
	if up, _ := h.roundTrip(`8`, "eth_getTransactionReceipt", `["`+txA+`"]`, receipt(hashB)); len(up) != 1 {
		t.Fatal("a receipt stayed cached across a reorg")
	}
	if up, _ := h.roundTrip(`9`, "eth_getBlockByHash", `["`+hashB+`",false]`, `null`); len(up) != 0 {
		t.Error("a block by hash was evicted by the reorg")
	}
	// An answer naming the replaced block, come late, is not cached.
	if up, _ := h.roundTrip(`10`, "eth_getTransactionReceipt", `["`+txA+`"]`, receipt(hashB)); len(up) != 1 {
		t.Error("the late answer from the old branch was cached")
	}
	// The head set back below the last one (debug_setHead, a snapshot
	// revert): the node may have forgotten the blocks above, so what was
	// cached by block hash goes too, and is asked again.
	h.roundTrip(`11`, "eth_getBlockReceipts", `["`+hashB+`"]`, `[]`)
	h.head(0x0f, hashD, hashA)
	for i, q := range [][2]string{{"eth_getBlockByHash", `["` + hashB + `",false]`}, {"eth_getBlockReceipts", `["` + hashB + `"]`}} {
		if up, _ := h.roundTrip(fmt.Sprint(12+i), q[0], q[1], `null`); len(up) != 1 {
			t.Errorf("%s stayed cached after the head went back", q[0])
		}
	}
}

// TestCacheLoss: the cache is emptied when the connection is lost.
func TestCacheLoss(t *testing.T) {
	r := newCoalRig(t, nil)
	r.connect()
	r.roundTrip(`1`, "eth_chainId", `[]`, `"0x1"`)
	r.lose()
	r.connect()
	if up, _ := r.roundTrip(`2`, "eth_chainId", `[]`, `"0x5"`); len(up) != 1 {
		t.Error("eth_chainId of the old connection answered on the new one")
	}
	if r.c.Stats().CacheBytes == 0 {
		t.Error("the new connection's answer was not cached")
	}
}

// TestCacheOff: with CacheBytes 0 nothing is cached.
func TestCacheOff(t *testing.T) {
	r := newCoalRig(t, func(c *Config) { c.CacheBytes = 0 })
	r.connect()
	r.roundTrip(`1`, "eth_chainId", `[]`, `"0x1"`)
	if up, _ := r.roundTrip(`2`, "eth_chainId", `[]`, `"0x1"`); len(up) != 1 || r.counts.misses != 0 {
		t.Errorf("cache off: %d frames, %d misses", len(up), r.counts.misses)
	}
}

// TestCacheBatch: a batch element is answered from the cache in its array.
func TestCacheBatch(t *testing.T) {
	r := newCoalRig(t, nil)
	r.connect()
	r.roundTrip(`1`, "eth_chainId", `[]`, `"0x1"`)
	cl := r.join()
	o := r.send(cl, `[`+request(`7`, "eth_chainId", `[]`)+`]`)
	if len(o.up) != 0 || len(o.to[cl]) != 1 || o.to[cl][0] != `[{"jsonrpc":"2.0","id":7,"result":"0x1"}]` {
		t.Errorf("batch: frames %q, answer %q", o.up, o.to[cl])
	}
}

// TestCoalesceNewHead: a request sent after the node pushed a new head does
// not join a call sent before it.
func TestCoalesceNewHead(t *testing.T) {
	h := newHeadRig(t)
	h.head(0x10, hashA, hashD)
	n := len(h.send(h.join(), request(`1`, "eth_blockNumber", `[]`)).up)
	n += len(h.send(h.join(), request(`2`, "eth_blockNumber", `[]`)).up)
	if n != 1 {
		t.Fatalf("%d frames before the head, want 1", n)
	}
	h.head(0x11, hashB, hashA)
	if o := h.send(h.join(), request(`3`, "eth_blockNumber", `[]`)); len(o.up) != 1 {
		t.Errorf("a request after a new head joined the call before it")
	}
}

// TestCacheLearnsFromOrphans: the answer to a call whose client left
// while the node ran it still fills the cache, so the node's work serves
// the next client that asks.
func TestCacheLearnsFromOrphans(t *testing.T) {
	r := newCoalRig(t, nil)
	r.connect()
	gone, next := r.join(), r.join()
	o := r.send(gone, request(`1`, "eth_chainId", `[]`))
	if len(o.up) != 1 {
		t.Fatalf("%d upstream frames, want 1", len(o.up))
	}
	r.gone(gone)
	r.upstream(reply(t, o.up[0], `"0x1"`))
	o = r.send(next, request(`"n"`, "eth_chainId", `[]`))
	if len(o.up) != 0 {
		t.Fatalf("asked the node again: %q", o.up)
	}
	if got := o.to[next]; len(got) != 1 || got[0] != `{"jsonrpc":"2.0","id":"n","result":"0x1"}` {
		t.Errorf("next client got %q, want the cached answer under its own id", got)
	}
}
