package mux

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/muxd/muxd/internal/testnode"
)

// TestOpsMetrics: the series for operating muxd (metrics_ops.go), each
// after what moves it: latency by method and outcome, the upstream's round
// trip, push delivery lag, the head's age, queue depths, backfills, and
// the label values that exist at 0 from the start.
func TestOpsMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, harnessOpts{cfg: func(c *Config) {
		c.Registerer = reg
		c.noHealthHeads = false // muxd's own newHeads subscription: the head's age
		c.CacheBytes = 1 << 20
	}})
	conn := h.fake.Conn(t, 1)
	conn.WaitLiveSubs(t, 1) // muxd's own
	c := h.dial(t)
	c.call(`{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}`)
	c.call(`{"jsonrpc":"2.0","id":2,"method":"eth_chainId","params":[]}`) // from the cache
	c.call(`{"jsonrpc":"2.0","id":3,"method":"admin_peers","params":[]}`)
	c.call(`{"jsonrpc":"2.0","id":4,"method":"no_suchMethod","params":[]}`)
	c.subscribe("5", `["newHeads"]`)
	conn.WaitLiveSubs(t, 2)
	head := string(testnode.NewChain(0).Block(1).HeaderJSON())
	conn.PushAll(t, head) // muxd's subscription and the client's
	c.recv()
	testnode.Poll(t, "the head to reach the selector", func() bool { return h.headOf(0) == 1 })

	up := map[string]string{"upstream": "1"}
	tests := []struct {
		name   string
		labels map[string]string
		check  func(v float64) bool
		want   string
	}{
		{"muxd_request_duration_by_method_seconds", map[string]string{"method": "eth_chainId", "outcome": "result"}, eq(1), "1"},
		{"muxd_request_duration_by_method_seconds", map[string]string{"method": "eth_chainId", "outcome": "cache"}, eq(1), "1"},
		{"muxd_request_duration_by_method_seconds", map[string]string{"method": "other", "outcome": "refused"}, eq(1), "1 (admin_peers is no method muxd knows)"},
		{"muxd_request_duration_by_method_seconds", map[string]string{"method": "other", "outcome": "result"}, eq(1), "1 (an unknown method)"},
		{"muxd_request_duration_by_method_seconds", map[string]string{"method": "eth_subscribe", "outcome": "result"}, eq(1), "1"},
		{"muxd_request_duration_seconds", nil, eq(4), "4 (the old series, unchanged: muxd's own refusal is not in it)"},
		{"muxd_upstream_round_trip_seconds", up, atLeast(3), ">= 3 (two calls, the client's subscribe; muxd's health requests are not the core's)"},
		{"muxd_push_delivery_lag_seconds", nil, eq(1), "1"},
		{"muxd_upstream_node_head", up, eq(1), "1"},
		{"muxd_upstream_node_head_lag_blocks", up, eq(0), "0 (one upstream)"},
		{"muxd_upstream_node_head_lag_seconds", up, eq(0), "0"},
		{"muxd_upstream_node_head_age_seconds", up, func(v float64) bool { return v >= 0 && v < 60 }, "in [0, 60)"},
		{"muxd_upstream_send_queue_bytes", up, eq(0), "0"},
		{"muxd_outbound_queued_bytes", nil, atLeast(0), ">= 0"},
		{"muxd_outbound_queue_max_bytes", nil, atLeast(0), ">= 0"},
		{"muxd_fanout_queue_length", nil, eq(0), "0"},
		{"muxd_backfills_running", nil, eq(0), "0"},
		{"muxd_upstream_failovers_total", map[string]string{"reason": "lost"}, eq(0), "0, from the start, with one upstream too"},
		{"muxd_limit_exceeded_total", map[string]string{"limit": "in_flight"}, eq(0), "0, from the start"},
		{"muxd_backfill_gaps_total", map[string]string{"kind": "logs", "reason": "too_long"}, eq(0), "0, from the start"},
		{"muxd_coalesced_total", map[string]string{"method": "eth_call"}, eq(0), "0, from the start"},
		{"muxd_cache_evictions_total", map[string]string{"method": "eth_getLogs"}, eq(0), "0, from the start"},
	}
	for _, tt := range tests {
		v, ok := testnode.Series(t, reg, tt.name, tt.labels)
		if !ok {
			t.Errorf("no series %s%v", tt.name, tt.labels)
			continue
		}
		if !tt.check(v) {
			t.Errorf("%s%v = %v, want %s", tt.name, tt.labels, v, tt.want)
		}
	}
}

func eq(want float64) func(float64) bool      { return func(v float64) bool { return v == want } }
func atLeast(want float64) func(float64) bool { return func(v float64) bool { return v >= want } }

// TestHeadLagMetrics: with two upstreams, the one behind shows how many
// blocks and for how long; the one at the best head shows none.
func TestHeadLagMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	chain := testnode.NewChain(0)
	a, b := chain.NewNode(t, 0), chain.NewNode(t, 0)
	srv, err := New(Config{
		Upstreams:    []Upstream{{URL: a.URL}, {URL: b.URL}},
		PingInterval: -1,
		Logger:       testLogger(t),
		Registerer:   reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	runServer(t, srv, nil, nil)
	ca, cb := a.Conn(t, 1), b.Conn(t, 1)
	ca.WaitLiveSubs(t, 1)
	cb.WaitLiveSubs(t, 1)
	a.WaitAnswered(t, "eth_chainId", 1) // the pushes below come after
	b.WaitAnswered(t, "eth_chainId", 1)
	cb.PushAll(t, string(chain.Block(3).HeaderJSON()))
	ca.PushAll(t, string(chain.Block(5).HeaderJSON()))
	seen := time.Now() // block 5, the first above 3, came before this
	testnode.Poll(t, "both heads to reach the selector", func() bool {
		h1, _ := testnode.Series(t, reg, "muxd_upstream_node_head", map[string]string{"upstream": "1"})
		h2, _ := testnode.Series(t, reg, "muxd_upstream_node_head", map[string]string{"upstream": "2"})
		return h1 == 5 && h2 == 3
	})
	for _, tt := range []struct {
		name, upstream string
		check          func(float64) bool
		want           string
	}{
		{"muxd_upstream_node_head_lag_blocks", "1", eq(0), "0"},
		{"muxd_upstream_node_head_lag_blocks", "2", eq(2), "2"},
		{"muxd_upstream_node_head_lag_seconds", "1", eq(0), "0"},
		{"muxd_upstream_node_head_lag_seconds", "2", func(v float64) bool { return v > 0 && v <= time.Since(seen).Seconds()+60 }, "> 0"},
	} {
		v, ok := testnode.Series(t, reg, tt.name, map[string]string{"upstream": tt.upstream})
		if !ok || !tt.check(v) {
			t.Errorf("%s{upstream=%s} = %v (present %v), want %s", tt.name, tt.upstream, v, ok, tt.want)
		}
	}
	var text strings.Builder
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		text.WriteString(mf.String())
	}
	for _, secret := range []string{a.URL, b.URL} {
		if strings.Contains(text.String(), strings.TrimPrefix(secret, "ws://")) {
			t.Errorf("metrics name an upstream by its address %s", secret)
		}
	}
}
