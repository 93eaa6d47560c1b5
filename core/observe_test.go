package core

import (
	"strings"
	"testing"
)

// TestSubscriptionsSnapshot: Subscriptions lists the keys in order with
// their state and members, a long key cut to KeyStatusMax bytes, and at
// most limit of them.
func TestSubscriptionsSnapshot(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxHeldBytes = 1 << 20 })
	c1 := h.join(false)
	c2 := h.join(false)
	h.connect()
	long := `["logs",{"address":"0x` + strings.Repeat("ab", 100) + `"}]`
	h.clientFrame(c1, `{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}`)
	h.clientFrame(c2, `{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}`)
	h.clientFrame(c1, `{"jsonrpc":"2.0","id":2,"method":"eth_subscribe","params":`+long+`}`)
	h.upstreamFrame(h.gen, `{"jsonrpc":"2.0","id":1,"result":"0xu1"}`, false)

	keys, n := h.c.Subscriptions(0)
	if n != 2 || len(keys) != 2 {
		t.Fatalf("%d keys listed of %d, want 2 of 2: %+v", len(keys), n, keys)
	}
	// In key order: the logs key sorts first.
	tests := []struct {
		prefix    string
		state     string
		clients   int
		truncated bool
		shown     int
		keyBytes  int
	}{
		{`["logs",{"address":"0xabab`, "subscribing", 1, true, KeyStatusMax, len(long)},
		{`["newHeads"]`, "live", 2, false, len(`["newHeads"]`), len(`["newHeads"]`)},
	}
	for i, tt := range tests {
		k := keys[i]
		if !strings.HasPrefix(k.Key, tt.prefix) || k.State != tt.state || k.Clients != tt.clients || k.Truncated != tt.truncated || len(k.Key) != tt.shown || k.KeyBytes != tt.keyBytes {
			t.Errorf("key %d %+v, want %s…: state %s, %d clients, truncated %v, %d of %d bytes", i, k, tt.prefix, tt.state, tt.clients, tt.truncated, tt.shown, tt.keyBytes)
		}
	}
	if keys, n := h.c.Subscriptions(1); len(keys) != 1 || n != 2 {
		t.Errorf("limit 1: %d keys listed of %d, want 1 of 2", len(keys), n)
	}
}
