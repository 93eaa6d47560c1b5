package router

import (
	"testing"
	"time"
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
func TestSubscriptionsAttempts(t *testing.T) {
	tab := NewSubscriptions()
	sh := tab.Attach("k", []byte(`["newHeads"]`), 1, `"0xa"`)
	sh.State, sh.Attempt = SubSubscribing, 7
	tab.Wait("k", Waiter{Member: Member{Client: 1, ID: `"0xa"`}, Request: Pending{Deadline: time.Now().Add(time.Hour)}})

	if w := tab.Failed("k", 6); w != nil || sh.State != SubSubscribing {
		t.Fatalf("a stale failure changed the key: waiters %v, state %v", w, sh.State)
	}
	if _, ok := tab.Subscribed("k", 6, `"0xold"`); ok {
		t.Fatal("a stale answer made the key live")
	}
	w, ok := tab.Subscribed("k", 7, `"0xup"`)
	if !ok || len(w) != 1 || sh.State != SubLive || tab.Push([]byte(`"0xup"`)) != sh {
		t.Fatalf("current answer: ok %v waiters %d state %v", ok, len(w), sh.State)
	}
	if _, ok := tab.Subscribed("k", 0, `"0xdup"`); ok {
		t.Fatal("a second answer for a live key was accepted")
	}
	tab.Lost()
	if sh.State != SubIdle || sh.Attempt != 0 || tab.Push([]byte(`"0xup"`)) != nil {
		t.Fatal("Lost kept upstream state")
	}
	if idle := tab.Idle(); len(idle) != 1 || idle[0] != sh {
		t.Fatalf("Idle = %v", idle)
	}
	_, last, unsub := tab.Detach(`"0xa"`)
	if !last || unsub != "" || tab.Key("k") != nil {
		t.Fatalf("Detach after loss: last %v unsub %q", last, unsub)
	}
}
