package core

import (
	"fmt"
	"strings"
	"testing"
)

// blockHash is the hash of block n on the rig's main chain.
func blockHash(n int) string { return fmt.Sprintf("0x%064x", n) }

// blockAt is a block as the node answers it.
func blockAt(n int, hash string) string {
	return fmt.Sprintf(`{"number":"0x%x","hash":"%s","transactions":[]}`, n, hash)
}

// isFinalizedAsk reports whether an upstream frame is muxd's own request
// for the finalized block.
func isFinalizedAsk(frame string) bool {
	return strings.Contains(frame, `"method":"eth_getBlockByNumber"`) && strings.Contains(frame, `"params":["finalized",false]`)
}

// asks returns the requests for the finalized block among o's frames.
func asks(o out) []string {
	var a []string
	for _, f := range o.up {
		if isFinalizedAsk(f) {
			a = append(a, f)
		}
	}
	return a
}

// chain pushes heads from..to of the main chain and returns the request
// for the finalized block they made (the first head's).
func (h *headRig) chain(from, to int) string {
	h.t.Helper()
	var ask []string
	for n := from; n <= to; n++ {
		ask = append(ask, asks(h.head(n, blockHash(n), blockHash(n-1)))...)
	}
	if len(ask) != 1 {
		h.t.Fatalf("heads 0x%x..0x%x asked for the finalized block %d times, want 1", from, to, len(ask))
	}
	return ask[0]
}

// finalize answers ask with result ("" for an error).
func (h *headRig) finalize(ask, result string) {
	h.t.Helper()
	if result == "" {
		h.upstream(`{"jsonrpc":"2.0","id":` + upID(h.t, ask) + `,"error":{"code":-32000,"message":"finalized block not found"}}`)
		return
	}
	h.upstream(reply(h.t, ask, result))
}

// byNumber asks for block n by number (false: hashes only) and answers it
// from the main chain when it goes upstream; it reports whether it did.
func (h *headRig) byNumber(id string, n int) (sent bool) {
	h.t.Helper()
	up, got := h.roundTrip(id, "eth_getBlockByNumber", fmt.Sprintf(`["0x%x",false]`, n), blockAt(n, blockHash(n)))
	if len(got) != 1 || !strings.Contains(got[0], `"id":`+id+`,`) || !strings.Contains(got[0], blockHash(n)) {
		h.t.Fatalf("block 0x%x: answer %q", n, got)
	}
	return len(up) != 0
}

// TestFinalizedAsked: the core asks the node for its finalized block on
// each new head, one request at a time, only with the cache on, and
// records the answer.
func TestFinalizedAsked(t *testing.T) {
	h := newHeadRig(t)
	o := h.head(0x10, blockHash(0x10), blockHash(0xf))
	if len(o.up) != 1 || !isFinalizedAsk(o.up[0]) {
		t.Fatalf("a new head sent %q, want the request for the finalized block", o.up)
	}
	if o := h.head(0x10, blockHash(0x10), blockHash(0xf)); len(o.up) != 0 {
		t.Errorf("the same head again sent %q", o.up)
	}
	if o := h.head(0x11, blockHash(0x11), blockHash(0x10)); len(o.up) != 0 {
		t.Errorf("a head while the request is in flight sent %q", o.up)
	}
	h.finalize(o.up[0], blockAt(0x8, strings.ToUpper(blockHash(0x8))))
	if f := h.c.fin; !f.known || f.number != 0x8 || f.hash != blockHash(0x8) || f.asking != 0 {
		t.Errorf("finalized recorded as %+v, want block 0x8", f)
	}
	o = h.head(0x12, blockHash(0x12), blockHash(0x11))
	if len(asks(o)) != 1 {
		t.Fatalf("the head after the answer sent %q", o.up)
	}
	// A request that times out leaves the next head free to ask.
	h.tick(coalTimeout)
	if h.c.fin.asking != 0 {
		t.Fatal("the timed-out request is still counted in flight")
	}
	if o := h.head(0x13, blockHash(0x13), blockHash(0x12)); len(asks(o)) != 1 {
		t.Errorf("after a timeout the next head sent %q", o.up)
	}
	if !h.c.fin.known {
		t.Error("a timeout forgot the finalized block")
	}

	off := newHeadRigWith(t, func(c *Config) { c.CacheBytes = 0 })
	if o := off.head(0x10, blockHash(0x10), blockHash(0xf)); len(o.up) != 0 {
		t.Errorf("cache off: a head sent %q", o.up)
	}
}

// TestCacheByNumber: a block by number is cached when at or below the
// finalized block, and answered from the cache under the client's id;
// above it, by a tag, null, or with no finalized block, it is not.
func TestCacheByNumber(t *testing.T) {
	final := blockAt(0x10, blockHash(0x10))
	for _, tc := range []struct {
		name, params, result, finalized string
		cached                          bool
	}{
		{"at finalized", `["0x10",false]`, blockAt(0x10, blockHash(0x10)), final, true},
		{"below, full transactions", `["0x5",true]`, blockAt(0x5, blockHash(0x5)), final, true},
		{"no boolean", `["0x5"]`, blockAt(0x5, blockHash(0x5)), final, true},
		{"above finalized", `["0x11",false]`, blockAt(0x11, blockHash(0x11)), final, false},
		{"latest", `["latest",false]`, blockAt(0x20, blockHash(0x20)), final, false},
		{"safe", `["safe",false]`, blockAt(0x10, blockHash(0x10)), final, false},
		{"finalized", `["finalized",false]`, blockAt(0x10, blockHash(0x10)), final, false},
		{"pending", `["pending",false]`, blockAt(0x21, blockHash(0x21)), final, false},
		{"earliest", `["earliest",false]`, blockAt(0, blockHash(0)), final, false},
		{"not a boolean", `["0x5","yes"]`, blockAt(0x5, blockHash(0x5)), final, false},
		{"three params", `["0x5",false,1]`, blockAt(0x5, blockHash(0x5)), final, false},
		{"null", `["0x5",false]`, `null`, final, false},
		{"node has no finalized block (null)", `["0x5",false]`, blockAt(0x5, blockHash(0x5)), `null`, false},
		{"node has no finalized block (error)", `["0x5",false]`, blockAt(0x5, blockHash(0x5)), "", false},
		{"finalized without a number", `["0x5",false]`, blockAt(0x5, blockHash(0x5)), `{"hash":"` + hashA + `"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHeadRig(t)
			h.finalize(h.chain(0x1c, 0x20), tc.finalized)
			up, first := h.roundTrip(`1`, "eth_getBlockByNumber", tc.params, tc.result)
			if len(up) != 1 || len(first) != 1 {
				t.Fatalf("first request: %d frames, answers %q", len(up), first)
			}
			up2, second := h.roundTrip(`"second"`, "eth_getBlockByNumber", tc.params, tc.result)
			if tc.cached != (len(up2) == 0) {
				t.Fatalf("second request sent %d frames, cached should be %v", len(up2), tc.cached)
			}
			if want := strings.Replace(first[0], `"id":1`, `"id":"second"`, 1); len(second) != 1 || second[0] != want {
				t.Errorf("second answer %q, want %q", second, want)
			}
			if wantHits := map[bool]int{true: 1}[tc.cached]; h.counts.hits != wantHits {
				t.Errorf("hits %d, want %d", h.counts.hits, wantHits)
			}
		})
	}
}

// TestCacheByNumberReorg: a break in the heads evicts the blocks cached by
// number at or above the lowest block it may have replaced, all of them
// when the head view cannot tell; a head that continues the chain evicts
// nothing.
func TestCacheByNumberReorg(t *testing.T) {
	other := "0x" + strings.Repeat("e", 64)
	for _, tc := range []struct {
		name               string
		n                  int
		hash, parent       string
		keptLow, keptFinal bool // blocks 0xe and 0x10 still cached
		wantEvicted        int
	}{
		{"child", 0x13, blockHash(0x13), blockHash(0x12), true, true, 0},
		{"sibling of the head", 0x12, other, blockHash(0x11), true, true, 0},
		{"fork below a cached block", 0x10, other, blockHash(0xf), true, false, 1},
		{"fork at the lowest cached block", 0xe, other, blockHash(0xd), false, false, 2},
		{"fork point unknown", 0x13, other, hashA, false, false, 2},
		{"jump", 0x15, blockHash(0x15), blockHash(0x14), false, false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHeadRig(t)
			h.finalize(h.chain(0xc, 0x12), blockAt(0x10, blockHash(0x10)))
			h.byNumber(`1`, 0xe)
			h.byNumber(`2`, 0x10)
			if h.byNumber(`3`, 0xe) || h.byNumber(`4`, 0x10) {
				t.Fatal("blocks at or below finalized not cached")
			}
			h.head(tc.n, tc.hash, tc.parent)
			if got := h.counts.evicted; got != tc.wantEvicted {
				t.Errorf("evicted %d, want %d", got, tc.wantEvicted)
			}
			if sent := h.byNumber(`5`, 0xe); sent == tc.keptLow {
				t.Errorf("block 0xe went upstream %v, want %v", sent, !tc.keptLow)
			}
			if sent := h.byNumber(`6`, 0x10); sent == tc.keptFinal {
				t.Errorf("block 0x10 went upstream %v, want %v", sent, !tc.keptFinal)
			}
		})
	}
}

// TestFinalizedBack: a finalized block lower than before, another hash at
// the same number, or none at all evicts every block cached by number; one
// that moves on keeps them.
func TestFinalizedBack(t *testing.T) {
	for _, tc := range []struct {
		name, next string
		kept       bool
	}{
		{"same", blockAt(0x10, blockHash(0x10)), true},
		{"higher", blockAt(0x11, blockHash(0x11)), true},
		{"lower", blockAt(0xf, blockHash(0xf)), false},
		{"other hash", blockAt(0x10, hashB), false},
		{"null", `null`, false},
		{"error", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHeadRig(t)
			h.finalize(h.chain(0x10, 0x12), blockAt(0x10, blockHash(0x10)))
			h.byNumber(`1`, 0x8)
			h.finalize(h.chain(0x13, 0x13), tc.next)
			if sent := h.byNumber(`2`, 0x8); sent == tc.kept {
				t.Errorf("block 0x8 went upstream %v, want %v", sent, !tc.kept)
			}
		})
	}
}

// TestFinalizedLoss: the finalized block is forgotten with the connection,
// and nothing is cached by number on the next one until its node says.
func TestFinalizedLoss(t *testing.T) {
	h := newHeadRig(t)
	ask := h.chain(0x10, 0x12)
	h.finalize(ask, blockAt(0x10, blockHash(0x10)))
	h.byNumber(`1`, 0x8)
	h.head(0x13, blockHash(0x13), blockHash(0x12)) // an ask in flight
	h.lose()
	if h.c.fin != (finalizedView{}) {
		t.Fatalf("after the loss the finalized view is %+v", h.c.fin)
	}
	if o := h.connect(); len(asks(o)) != 0 {
		t.Errorf("reconnecting asked for the finalized block: %q", o.up)
	}
	if !h.byNumber(`2`, 0x8) || !h.byNumber(`3`, 0x8) {
		t.Error("a block by number was cached on a connection that knows no finalized block")
	}
	// The old connection's answer, come late, is not the new one's.
	h.finalize(ask, blockAt(0x10, blockHash(0x10)))
	if h.c.fin.known {
		t.Error("an answer from the lost connection set the finalized block")
	}
}
