package mux

import (
	"testing"
	"time"
)

// TestKeepaliveProbeAnswerGoesNowhere: with keepalive on, muxd's own
// eth_chainId goes to the node each round on an idle connection; its
// answers are hearing and reach no client, nor are they counted as
// answers to ids muxd never sent. The connection stays up.
func TestKeepaliveProbeAnswerGoesNowhere(t *testing.T) {
	h := newHarness(t, harnessOpts{cfg: func(c *Config) {
		c.PingInterval = 50 * time.Millisecond
		c.PingTimeout = time.Second
	}})
	c := h.dial(t)
	h.fake.WaitSeen(t, "eth_chainId", 3)
	var probes int
	for _, r := range h.fake.Received() {
		if r.Method == "eth_chainId" && string(r.ID) == `"muxd-keepalive"` {
			probes++
		}
	}
	if probes < 3 {
		t.Fatalf("%d probes with keepalive's id among the node's eth_chainId calls, want 3", probes)
	}
	if n := h.srv.metrics.DroppedCount(DropUnknownID); n != 0 {
		t.Errorf("%v probe answers counted as unknown ids", n)
	}
	if n := h.fake.NumConns(); n != 1 {
		t.Errorf("the node saw %d connections, want 1", n)
	}
	// The client got nothing but its own answer.
	c.barrier()
}
