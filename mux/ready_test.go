package mux

import (
	"strings"
	"testing"
	"time"

	"github.com/muxd/muxd/internal/testnode"
)

// headOf is upstream i's last head as the selector knows it.
func (h *harness) headOf(i int) uint64 {
	var head uint64
	h.locked(func() { head = h.srv.set.sel.Status(i, time.Now()).Head })
	return head
}

// TestReadinessFollowsHeads: with one upstream, muxd holds a newHeads
// subscription of its own (no client subscribes here) and is ready only
// while the node has pushed a head within head_timeout; a node that
// refuses the subscription is ready while connected. Readiness is asked at
// chosen times (readyAt), so no test waits for a clock.
func TestReadinessFollowsHeads(t *testing.T) {
	const timeout = time.Minute
	chain := testnode.NewChain(0)
	tests := []struct {
		name  string
		heads int  // heads the node pushes, then it stops
		deaf  bool // the node refuses eth_subscribe
		// want: ready one second before and after head_timeout has
		// passed since the last head (or the connection).
		before, after bool
	}{
		{"no head ever", 0, false, true, false},
		{"heads, then they stop", 3, false, true, false},
		{"subscription refused: ready while connected", 0, true, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now() // the connection comes after
			h := newHarness(t, harnessOpts{
				cfg: func(c *Config) { c.HeadTimeout, c.noHealthHeads = timeout, false },
				fake: func(f *fakeUpstream) {
					f.SetHandler(func(fc *testnode.Conn, r testnode.Req) {
						if r.Method == "eth_subscribe" && tt.deaf {
							fc.Send(testnode.ErrorFrame(r.ID, -32601, "notifications not supported"))
							return
						}
						fc.Answer(r)
					})
				},
			})
			conn := h.fake.Conn(t, 1)
			if !tt.deaf {
				conn.WaitLiveSubs(t, 1)
			} else {
				// The refusal has no event of muxd's own to wait on.
				testnode.Poll(t, "muxd to take the refusal", func() bool {
					ok, _ := h.srv.readyAt(time.Now().Add(2 * timeout))
					return ok
				})
			}
			last := start
			for n := 1; n <= tt.heads; n++ {
				last = time.Now()
				conn.PushAll(t, string(chain.Block(uint64(n)).HeaderJSON()))
				testnode.Poll(t, "the head to reach the selector", func() bool { return h.headOf(0) == uint64(n) })
			}
			done := time.Now()
			var subscribes []string
			for _, r := range h.fake.Received() {
				if r.Method == "eth_subscribe" {
					subscribes = append(subscribes, string(r.ID)+" "+string(r.Params))
				}
			}
			if want := []string{healthSubscribe + ` ["newHeads"]`}; strings.Join(subscribes, ";") != strings.Join(want, ";") {
				t.Errorf("the node got subscriptions %q, want only muxd's own %q", subscribes, want)
			}
			// The last head (or the connection) came between last and
			// done: one second short of head_timeout after last it is
			// fresh, one second past it after done it is not.
			if ok, why := h.srv.readyAt(last.Add(timeout - time.Second)); ok != tt.before {
				t.Errorf("ready within head_timeout = %v (%q), want %v", ok, why, tt.before)
			}
			ok, why := h.srv.readyAt(done.Add(timeout + time.Second))
			if ok != tt.after {
				t.Errorf("ready past head_timeout = %v (%q), want %v", ok, why, tt.after)
			}
			if !ok && !strings.Contains(why, "no new head") {
				t.Errorf("reason %q, want it to name the missing head", why)
			}
			if !h.srv.Ready() {
				t.Error("Ready() false now, within head_timeout")
			}
		})
	}
}

// TestReadinessNoUpstream: not ready before the upstream is ever up, and
// the reason says so.
func TestReadinessNoUpstream(t *testing.T) {
	h := newHarness(t, harnessOpts{fake: func(f *fakeUpstream) { f.Refuse(true) }, noWaitUp: true})
	ok, why := h.srv.Readiness()
	if ok || why != "no upstream connected" {
		t.Fatalf("Readiness() = %v, %q; want false, no upstream connected", ok, why)
	}
}

// TestHeadReorgToShorterBranch: a node's health subscription pushing a
// lower head than before (a reorg to a shorter branch) lowers the head the
// selector knows, as the selector documents, instead of being ignored
// until the chain passes the old head again.
func TestHeadReorgToShorterBranch(t *testing.T) {
	chain := testnode.NewChain(0)
	h := newHarness(t, harnessOpts{cfg: func(c *Config) { c.noHealthHeads = false }})
	conn := h.fake.Conn(t, 1)
	conn.WaitLiveSubs(t, 1)
	for _, n := range []uint64{5, 6, 7, 5, 6} {
		conn.PushAll(t, string(chain.Block(n).HeaderJSON()))
		testnode.Poll(t, "the head to reach the selector", func() bool { return h.headOf(0) == n })
	}
}
