package mux

import (
	"fmt"
	"strings"
	"testing"

	"github.com/muxd/muxd/internal/testnode"
)

// TestReloadUpstreams: a reload that changes the upstream list keeps a
// subscribed client streaming and its calls answered. Node 0 (A) is the
// one upstream at the start; the reload gives the list `to` (indexes of
// the fake nodes), A's connection carrying a transaction in flight. The
// new list is dialled, the traffic moves to it like a failover (the
// client's newHeads subscription is made again there, under the id the
// client has, and gap-filled), A answers the transaction on its old
// connection, which is then closed; a node dropped from the list is never
// dialled again. The subscriber gets every head exactly once, in order.
func TestReloadUpstreams(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		to   []int // the new list, by fake node
		// active is the fake node that carries the traffic after it.
		active int
	}{
		{name: "A removed, B added", to: []int{1}, active: 1},
		{name: "B added before A, several upstreams", to: []int{1, 0}, active: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFailNet(t, 2, func(c *Config) { c.Upstreams = c.Upstreams[:1] }, nil)
			f.start()
			cl := f.dial(t)
			sub := cl.subscribe(`["newHeads"]`)
			heads := func(fs []resp) []string { r, _ := pushed(fs, sub); return r }
			waitHead := func(h uint64) {
				t.Helper()
				cl.await(fmt.Sprintf("head %d", h), func(fs []resp) bool {
					r := heads(fs)
					return len(r) > 0 && strings.Contains(r[len(r)-1], fmt.Sprintf(`"number":"0x%x"`, h))
				}, func(fs []resp) string { return headSummary(heads(fs)) })
			}
			// The client's, and muxd's own newHeads health subscription.
			f.nodes[0].Conn(t, 1).WaitLiveSubs(t, 2)
			for h := uint64(startHead + 1); h <= startHead+2; h++ {
				f.advance(0, 1)
				waitHead(h)
			}
			held := f.holdOn(0, "eth_sendRawTransaction")
			cl.send(sendTx)
			hs := held.TakeN(t, 1)

			var ups []Upstream
			for _, i := range tt.to {
				ups = append(ups, Upstream{URL: f.nodes[i].URL})
			}
			cfg := f.srv.cfg
			cfg.Upstreams = ups
			if err := f.srv.Reconfigure(cfg); err != nil {
				t.Fatalf("Reconfigure: %v", err)
			}
			// The client's subscription is made on the new active node.
			n := f.nodes[tt.active]
			n.Wait(t, "the client's subscription on the new node", func() bool {
				if n.NumConns() == 0 {
					return false
				}
				for _, r := range n.Conn(t, n.NumConns()).Reqs() {
					if r.Method == "eth_subscribe" && string(r.ID) != healthSubscribe {
						return true
					}
				}
				return false
			})
			// A's old connection drains: the transaction stays with it.
			old := f.nodes[0].Conn(t, 1)
			if cl.answered(`"tx"`) || old.Closed() {
				t.Fatalf("transaction answered (%v) or A's connection closed (%v) before A answered it", cl.answered(`"tx"`), old.Closed())
			}
			answerTx(t, hs[0], 0)
			if r := cl.answer(`"tx"`); string(r.Result) != txHashOf(0) {
				t.Errorf("transaction: got %s, want A's answer", r.Raw)
			}
			testnode.Await(t, "A's drained connection closed", func() (bool, <-chan struct{}) {
				return old.Closed(), old.Done()
			})
			for i := range 3 {
				f.advance(0, 1)
				waitHead(n.Head())
				if r := cl.call(fmt.Sprintf(`"bn%d"`, i), "eth_blockNumber", `[]`); string(r.Result) != fmt.Sprintf(`"0x%x"`, n.Head()) {
					t.Errorf("eth_blockNumber after the reload = %s, want 0x%x", r.Raw, n.Head())
				}
			}
			last := n.Head()
			cl.barrier()
			cl.mu.Lock()
			got, other := pushed(cl.frames, sub)
			cl.mu.Unlock()
			checkSeq(t, "newHeads subscriber", got, wantHeads(f.chain, startHead+1, last), headSummary)
			if other > 0 {
				t.Errorf("the client got %d frames that were neither its pushes nor answers", other)
			}
			if len(tt.to) == 1 && f.nodes[0].NumConns() != 1 {
				t.Errorf("A, removed, was dialled %d times, want once", f.nodes[0].NumConns())
			}
			if a := f.srv.Active(); a != indexOf(tt.to, tt.active) {
				t.Errorf("active upstream %d, want %d", a, indexOf(tt.to, tt.active))
			}
		})
	}
}

func indexOf(s []int, v int) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// TestReloadRefused: a reload that asks what cannot change live, or has
// no upstream, returns an error and changes nothing: the same upstream
// connection serves, with the same limits.
func TestReloadRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"restart-only option", func(c *Config) { c.MaxMessageBytes = 1 << 10; c.MaxInFlight = 1 }, "MaxMessageBytes"},
		{"no upstream URL", func(c *Config) { c.Upstreams = []Upstream{{}}; c.MaxInFlight = 1 }, "no URL"},
	}
	f := newFailNet(t, 2, func(c *Config) { c.Upstreams = c.Upstreams[:1] }, nil)
	f.start()
	cl := f.dial(t)
	cl.barrier()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := f.srv.cfg
			cfg.Upstreams = []Upstream{{URL: f.nodes[1].URL}}
			tt.mod(&cfg)
			err := f.srv.Reconfigure(cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Reconfigure: %v, want an error naming %s", err, tt.want)
			}
			held := f.holdOn(0, "eth_sendRawTransaction")
			cl.send(strings.Replace(sendTx, `"tx"`, `"tx1"`, 1))
			held.TakeN(t, 1)
			// max_in_flight 1 would refuse this one.
			if r := cl.call(`"bn"`, "eth_blockNumber", `[]`); r.Error != nil {
				t.Errorf("a second request in flight: %s", r.Raw)
			}
			if f.nodes[1].NumConns() != 0 {
				t.Error("the refused list was dialled")
			}
		})
	}
}
