package core

import (
	"testing"
	"time"

	"github.com/muxd/muxd/router"
)

// TestSubTableAttempts: only the answer to a key's current eth_subscribe
// attempt counts; a stale failure or answer changes nothing, a second
// answer for a live key is refused, and a lost connection forgets the
// node's ids.
func TestSubTableAttempts(t *testing.T) {
	tab := newSubTable()
	cl := &client{id: 1}
	m := tab.attach("k", []byte(`["newHeads"]`), cl, `"0xa"`)
	sh := m.sh
	tab.wait(m, router.Pending{Deadline: time.Unix(1e9, 0)})
	tab.subscribing(sh, 7)
	if sh.state != keySubscribing {
		t.Fatalf("state %v after subscribing, want subscribing", sh.state)
	}
	if w := tab.failed("k", 6); w != nil || sh.state != keySubscribing {
		t.Fatalf("a stale failure changed the key: waiters %v, state %v", w, sh.state)
	}
	if got := tab.subscribed("k", 6, `"0xold"`); got != nil {
		t.Fatal("a stale answer made the key live")
	}
	if got := tab.subscribed("k", 7, `"0xup"`); got != sh || sh.state != keyLive || tab.byUpstream[`"0xup"`] != sh {
		t.Fatalf("current answer: state %v", sh.state)
	}
	if got := tab.subscribed("k", 0, `"0xdup"`); got != nil {
		t.Fatal("a second answer for a live key was accepted")
	}
	tab.lost()
	if sh.state != keyIdle || sh.attempt != 0 || tab.byUpstream[`"0xup"`] != nil {
		t.Fatal("lost kept upstream state")
	}
	if idle := tab.idle(); len(idle) != 1 || idle[0] != sh {
		t.Fatalf("idle = %v", idle)
	}
	_, last, unsub := tab.detach(`"0xa"`)
	if !last || unsub != "" || tab.byKey["k"] != nil {
		t.Fatalf("detach after loss: last %v unsub %q", last, unsub)
	}
}
