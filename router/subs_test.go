package router

import (
	"testing"
)

func TestSubscriptionKey(t *testing.T) {
	tests := []struct {
		a, b string
		same bool
	}{
		{`["newHeads"]`, `[ "newHeads" ]`, true},
		{`["logs",{"address":"0xAB","topics":["0xCD"]}]`, `["logs",{"topics":["0xcd"],"address":"0xab"}]`, true},
		{`["logs",{"address":"0xab"}]`, `["logs",{"address":"0xac"}]`, false},
		{`["newPendingTransactions",true]`, `["newPendingTransactions"]`, false},
		{`["newHeads"]`, `["newheads"]`, false},                   // names are compared exactly
		{`["x",{"data":"0xAB"}]`, `["x",{"data":"0xab"}]`, false}, // hex is folded only for logs filters
	}
	for _, tt := range tests {
		ka, err := SubscriptionKey([]byte(tt.a))
		if err != nil {
			t.Fatalf("%s: %v", tt.a, err)
		}
		kb, err := SubscriptionKey([]byte(tt.b))
		if err != nil {
			t.Fatalf("%s: %v", tt.b, err)
		}
		if (ka == kb) != tt.same {
			t.Errorf("%s vs %s: same=%v, want %v (%s / %s)", tt.a, tt.b, ka == kb, tt.same, ka, kb)
		}
	}
	for _, bad := range []string{`[]`, `[1]`, `{}`, `"newHeads"`, `[""]`, `[`} {
		if _, err := SubscriptionKey([]byte(bad)); err == nil {
			t.Errorf("SubscriptionKey(%s) accepted", bad)
		}
	}
}

// TestSubscriptionsAttempts: only the answer to the eth_subscribe in flight
// for a key can make it live or fail it.
