package mux

import (
	"testing"
	"time"
)

// TestWaitingRequestsHurryTheRedial: while a request waits for an upstream,
// muxd dials every reconnect.DefaultHurryInterval after a failed dial
// whatever its backoff (here 3 s: the pause after the lost connection keeps
// it, the next one is cut short), so a node back within upstream_wait gets
// the request well before the backoff's next dial; one still away fails it
// only once upstream_wait has passed and a dial has failed since (DESIGN §3).
func TestWaitingRequestsHurryTheRedial(t *testing.T) {
	const (
		wait    = 5 * time.Second
		backoff = 3 * time.Second
	)
	tests := []struct {
		name string
		back bool // the node comes back once a dial has failed while the request waits
	}{
		{"node back within upstream_wait", true},
		{"node still away", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, g := gatedHarness(t, true, func(c *Config) {
				c.UpstreamWait = wait
				c.ReconnectInitial, c.ReconnectMax = backoff, backoff
			})
			c := h.dial(t)
			c.barrier()
			g.set(false)
			h.fake.Conn(t, 1).Drop()
			h.waitUp(t, false)
			sent := time.Now()
			c.send(`{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[1]}`)
			eventually(t, "request waiting", func() bool { return h.waitingLen() == 1 })
			g.mu.Lock()
			fails := g.fails
			g.mu.Unlock()
			// The first dial after the loss, at the backoff's pace.
			g.waitFails(t, fails+1)
			failed := time.Now()
			if tt.back {
				g.set(true)
				wantEcho(t, parseResp(t, c.recv()), `1`, "eth_blockNumber", `[1]`)
				// Hurried: the next dial came long before the backoff's.
				if took := time.Since(failed); took >= backoff {
					t.Errorf("answered %v after the failed dial: no hurried redial (backoff %v)", took, backoff)
				}
				return
			}
			r := parseResp(t, c.recv())
			wantError(t, r, `1`, -32002, "upstream unavailable")
			if got := r.reason(); got != "no upstream connected" {
				t.Errorf("reason %q, want \"no upstream connected\"", got)
			}
			if waited := time.Since(sent); waited < wait {
				t.Errorf("gave up after %v, before upstream_wait %v", waited, wait)
			}
		})
	}
}
