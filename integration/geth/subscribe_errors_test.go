package gethtest

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/rpc"
)

// TestSubscribeErrorsMatchDirect compares eth_subscribe / eth_unsubscribe
// edge cases through muxd with geth's own answers. Subscription ids differ
// by design (muxd hands out its own), so only their shape is compared.
func TestSubscribeErrorsMatchDirect(t *testing.T) {
	h := newHarness(t, nil)
	direct := dial(t, h.node.WSURL)
	via := dial(t, h.WSURL)

	// Errors geth reports are passed on as they came.
	for _, cl := range []call{
		{"eth_subscribe", []any{"nope"}},
		{"eth_subscribe", []any{"logs", map[string]any{"address": "zz"}}},
		{"eth_subscribe", []any{"newHeads", "extra"}},
	} {
		want := callOutcome(t, direct, cl)
		got := callOutcome(t, via, cl)
		if want.Code == 0 {
			t.Fatalf("geth accepted %s: %+v", cl, want)
		}
		if !sameOutcome(got, want) {
			t.Errorf("%s:\n via muxd %+v\n direct   %+v", cl, got, want)
		}
	}
	// muxd answers eth_subscribe without a name itself: same code as geth
	// (-32602), its own message.
	{
		cl := call{"eth_subscribe", []any{}}
		want, got := callOutcome(t, direct, cl), callOutcome(t, via, cl)
		if got.Code != want.Code {
			t.Errorf("%s: via muxd %+v, direct %+v", cl, got, want)
		}
	}

	// subscribe, unsubscribe, unsubscribe again: same answers as geth.
	for name, c := range map[string]*rpc.Client{"direct": direct, "via": via} {
		var id string
		if err := c.CallContext(ctxT(t, 10*time.Second), &id, "eth_subscribe", "newHeads"); err != nil {
			t.Fatalf("%s eth_subscribe: %v", name, err)
		}
		// geth writes its 16 random bytes as hex with leading zeros
		// trimmed (one id in 16 has 31 digits or fewer); muxd keeps all 32.
		want := `^0x[0-9a-f]{1,32}$`
		if name == "via" {
			want = `^0x[0-9a-f]{32}$`
		}
		if !regexp.MustCompile(want).MatchString(id) {
			t.Errorf("%s subscription id %q does not match %s", name, id, want)
		}
		first := callOutcome(t, c, call{"eth_unsubscribe", []any{id}})
		second := callOutcome(t, c, call{"eth_unsubscribe", []any{id}})
		b, _ := json.Marshal([]outcome{first, second})
		t.Logf("%s: unsubscribe, unsubscribe again: %s", name, b)
		if first.Result != true {
			t.Errorf("%s: first eth_unsubscribe = %+v, want true", name, first)
		}
		// README: muxd answers false for an id that is not the client's
		// live subscription; geth 1.17.10 answers -32000 "subscription
		// not found". A documented difference.
		if name == "via" && (second.Code != 0 || second.Result != false) {
			t.Errorf("second eth_unsubscribe via muxd = %+v, want false (README)", second)
		}
		if name == "direct" && second.Code == 0 {
			t.Logf("geth now answers a repeated eth_unsubscribe with %+v", second)
		}
	}
}
