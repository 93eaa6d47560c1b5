package core

import "testing"

// TestHeldTotalAfterSubscriberGone: the bytes held for all clients
// (c.held) must equal the sum of the clients' held after a client with a
// subscription leaves.
func TestHeldTotalAfterSubscriberGone(t *testing.T) {
	for _, answered := range []bool{true, false} {
		h := newHarness(t, nil)
		h.run([]step{{do: "join"}, {do: "join"}, {do: "connect"}})
		h.step(step{do: "c1", in: `{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["logs",{"address":"0x00000000000000000000000000000000000000aa"}]}`})
		if answered {
			h.step(step{do: "up", in: `{"jsonrpc":"2.0","id":1,"result":"0xabc"}`})
		}
		t.Logf("answered=%v before gone: c.held %d, sum %d", answered, h.c.held, heldSum(h))
		h.step(step{do: "gone c1"})
		if h.c.held != heldSum(h) {
			t.Errorf("answered=%v after gone: c.held %d, sum of clients' held %d", answered, h.c.held, heldSum(h))
		}
	}
}
