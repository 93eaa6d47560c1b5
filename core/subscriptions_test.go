package core

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// sub is a client's eth_subscribe with id and params (raw JSON).
func sub(id, params string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"eth_subscribe","params":` + params + `}`
}

// push is an eth_subscription push for subscription id subID (raw JSON).
func push(subID, result string) string {
	return `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":` + subID + `,"result":` + result + `}}`
}

const (
	heads    = `["newHeads"]`
	headsKey = `["newHeads"]`
)

// refusal is the node's error to eth_subscribe under id.
func refusal(id string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32000,"message":"no such subscription"}}`
}

// TestSubscriptionParamsHeld: a subscription holds its params against
// max_held_bytes for as long as it lives, so a client cannot make muxd hold
// more through subscriptions (a logs filter padded with members the node
// ignores) than through requests. The first passes whatever its size; one
// that would take the client past the bound gets -32005; an unsubscribe
// gives the bytes back.
func TestSubscriptionParamsHeld(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxHeldBytes = 1000 })
	h.join(false)
	h.connect()
	fat := func(id, addr string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"eth_subscribe","params":["logs",{"address":"` + addr + `","junk":"` + strings.Repeat("j", 600) + `"}]}`
	}
	has := func(out []string, s string) bool {
		return slices.ContainsFunc(out, func(l string) bool { return strings.Contains(l, s) })
	}
	if out := h.clientFrame(1, fat("1", "0xa1")); !has(out, "up> ") {
		t.Fatalf("first subscription: %v, want it sent upstream", out)
	}
	h.upstreamFrame(0, res("1", `"0xaa"`), false)
	if held := h.c.Held(1); held < 1200 {
		t.Fatalf("held %d after a subscription with 600 bytes of params, want its params and key", held)
	}
	if out := h.clientFrame(1, fat("2", "0xa2")); !has(out, "-32005") || !has(out, "too many request bytes in flight") || has(out, "up> ") {
		t.Fatalf("second subscription: %v, want -32005 too many request bytes in flight", out)
	}
	if out := h.clientFrame(1, `{"jsonrpc":"2.0","id":3,"method":"eth_unsubscribe","params":["0xs1"]}`); !has(out, `"result":true`) {
		t.Fatalf("unsubscribe: %v", out)
	}
	if held := h.c.Held(1); held != 0 {
		t.Fatalf("held %d after the unsubscribe, want 0", held)
	}
	if out := h.clientFrame(1, fat("4", "0xa3")); !has(out, "up> ") {
		t.Fatalf("subscription after the unsubscribe: %v, want it sent upstream", out)
	}
}

// TestRefusedSubscriptionNote: the warning for a subscription the node
// refused is one a client can cause at will, with params of its choosing,
// so it is marked for the shell's rate limit and carries the key cut to
// maxLoggedKey bytes, whatever the params' size.
func TestRefusedSubscriptionNote(t *testing.T) {
	for _, pad := range []int{0, 4 << 20} {
		t.Run(strconv.Itoa(pad), func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.MaxHeldBytes = 64 << 20 })
			h.join(false)
			h.connect()
			params := `["logs",{"address":"0xzz","pad":"` + strings.Repeat("A", pad) + `"}]`
			h.clientFrame(1, sub("1", params))
			h.upstreamFrame(0, refusal("1"), false)
			var found bool
			for _, n := range h.e.Notes {
				if n.Msg != "upstream refused a subscription" {
					continue
				}
				found = true
				if n.Limited != LimitedSubscriptionRefused || n.Drop || n.Info {
					t.Errorf("note kind: Limited %v Drop %v Info %v, want a limited warning", n.Limited, n.Drop, n.Info)
				}
				args := map[any]any{}
				for i := 0; i+1 < len(n.Args); i += 2 {
					args[n.Args[i]] = n.Args[i+1]
				}
				key, _ := args["key"].(string)
				if len(key) > maxLoggedKey+len("…") || !strings.HasPrefix(key, `["logs",`) {
					t.Errorf("key in the note: %d bytes, %.40q…; want at most %d and the key's start", len(key), key, maxLoggedKey+len("…"))
				}
				if kb, _ := args["key_bytes"].(int); kb < pad {
					t.Errorf("key_bytes %d, want the whole key's length (at least %d)", kb, pad)
				}
			}
			if !found {
				t.Fatalf("no note for the refusal; notes: %v", h.e.Notes)
			}
		})
	}
}
