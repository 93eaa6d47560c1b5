package core

import (
	"strings"
	"testing"
)

// TestReconfigure: a reload's new limits and policy apply to the next
// request; what cannot change live, or an invalid pattern, is an error
// that changes nothing.
func TestReconfigure(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr string // "" when Reconfigure succeeds
		// frame is sent by a client holding one request in flight after
		// Reconfigure; want is in its first rendered line.
		frame, want string
	}{
		{name: "lower max_in_flight refuses the next request",
			mod:   func(c *Config) { c.MaxInFlight = 1 },
			frame: `{"jsonrpc":"2.0","id":2,"method":"eth_blockNumber"}`, want: `-32005`},
		{name: "deny_methods applies",
			mod:   func(c *Config) { c.DenyMethods = append(c.DenyMethods, "eth_blockNumber") },
			frame: `{"jsonrpc":"2.0","id":2,"method":"eth_blockNumber"}`, want: `"reason":"denied"`},
		{name: "unchanged limits forward",
			mod:   func(c *Config) {},
			frame: `{"jsonrpc":"2.0","id":2,"method":"eth_blockNumber"}`, want: `up> `},
		{name: "restart-only field: error, nothing applied",
			mod:     func(c *Config) { c.MaxInFlight = 1; c.BackfillBlocks = 7; c.HeldPushBytes = 1 },
			wantErr: "BackfillBlocks cannot change without a restart",
			frame:   `{"jsonrpc":"2.0","id":2,"method":"eth_blockNumber"}`, want: `up> `},
		{name: "bad deny pattern: error, nothing applied",
			mod:     func(c *Config) { c.MaxInFlight = 1; c.DenyMethods = []string{""} },
			wantErr: "core:",
			frame:   `{"jsonrpc":"2.0","id":2,"method":"eth_blockNumber"}`, want: `up> `},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.connect()
			id := h.join(false)
			h.clientFrame(id, `{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`)
			cfg := h.c.cfg
			cfg.DenyMethods = append([]string(nil), cfg.DenyMethods...)
			tt.mod(&cfg)
			err := h.c.Reconfigure(cfg)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Reconfigure: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Reconfigure: %v, want an error with %q", err, tt.wantErr)
			}
			out := h.clientFrame(id, tt.frame)
			if len(out) == 0 || !strings.Contains(out[0], tt.want) {
				t.Errorf("after Reconfigure: %q, want %q in the first line", out, tt.want)
			}
		})
	}
}

// TestReconfigureCache: a smaller cache_bytes evicts at once.
func TestReconfigureCache(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.CacheBytes = 1 << 20 })
	h.c.cache.put(&cached{key: "k", method: "eth_chainId", msg: make([]byte, 100)})
	if h.c.cache.bytes == 0 {
		t.Fatal("nothing cached")
	}
	cfg := h.c.cfg
	cfg.CacheBytes = 0
	if err := h.c.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	if h.c.cache.bytes != 0 || h.obs.counts["cache evicted eth_chainId"] != 1 {
		t.Errorf("cache holds %d bytes, evictions %v; want it emptied", h.c.cache.bytes, h.obs.counts)
	}
}
