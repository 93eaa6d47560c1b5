package core

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/muxd/muxd/router"
)

// TestClientGoneWithManyWaiting checks the O(1) path of a client leaving
// with many requests waiting: its entries are not walked when it leaves,
// they are dropped when dead entries make up most of the queue (one
// compaction, amortized over the adds that made them), and the others keep
// their order.
func TestClientGoneWithManyWaiting(t *testing.T) {
	for _, n := range []int{10, 200} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.MaxWaiting, c.MaxInFlight, c.MaxHeldBytes = 1000, 1000, 1<<20 })
			c1, c2 := h.join(false), h.join(false)
			h.clientFrame(c2, req("1", "eth_call"))
			for i := range n {
				h.clientFrame(c1, req(strconv.Itoa(i), "eth_call"))
			}
			h.clientFrame(c2, req("2", "eth_call"))
			h.run([]step{{do: "gone c1"}})
			if got := h.c.Stats().Waiting; got != 2 {
				t.Errorf("waiting after c1 left: %d, want 2", got)
			}
			// Below the compaction threshold the dead entries stay, to be
			// skipped; above it they are gone.
			wantItems := n + 2
			if n > 64 {
				wantItems = 2
			}
			if got := len(h.c.waiting.items); got != wantItems {
				t.Errorf("queue holds %d entries, want %d", got, wantItems)
			}
			h.run([]step{{do: "connect", want: []string{
				"up> " + req("1", "eth_call"),
				fmt.Sprintf("up> "+req("%d", "eth_call"), n+2),
			}}})
			h.checkGauges()
		})
	}
}

// TestMemberLeavesKeyOfMany checks the O(1) removal of one member of a key
// of many (swap with the last): whichever member leaves, first, middle or
// last, every other one still gets each push exactly once, and every
// member's index is where it sits.
func TestMemberLeavesKeyOfMany(t *testing.T) {
	const n = 300
	h := newHarness(t, func(c *Config) { c.MaxClients = n })
	ids := make([]router.ClientID, n)
	for i := range ids {
		ids[i] = h.join(false)
	}
	h.connect()
	h.clientFrame(ids[0], sub("1", heads))
	h.upstreamFrame(0, res("1", `"0xaa"`), false)
	for _, id := range ids[1:] {
		h.clientFrame(id, sub("1", heads))
	}
	left := map[router.ClientID]bool{}
	for _, i := range []int{0, n / 2, n - 1, 1, n - 2} {
		h.c.ClientGone(&h.e, ids[i], h.now)
		left[ids[i]] = true
		sh := h.c.subs.byKey[headsKey]
		if len(sh.members) != n-len(left) {
			t.Fatalf("after %d left: %d members, want %d", len(left), len(sh.members), n-len(left))
		}
		for j, m := range sh.members {
			if m.idx != j {
				t.Fatalf("member of c%d at %d has idx %d", m.cl.id, j, m.idx)
			}
		}
		got := map[router.ClientID]int{}
		for _, line := range h.upstreamFrame(0, push(`"0xaa"`, strconv.Itoa(i)), false) {
			var c router.ClientID
			if _, err := fmt.Sscanf(line, "c%d<", &c); err != nil {
				t.Fatalf("unexpected effect %q", line)
			}
			got[c]++
		}
		for _, id := range ids {
			if want := map[bool]int{true: 0, false: 1}[left[id]]; got[id] != want {
				t.Fatalf("after %d left: c%d got the push %d times, want %d", len(left), id, got[id], want)
			}
		}
	}
	h.checkGauges()
}

// TestOrphanExpiry: orphans expire in deadline order whatever order they
// were recorded in, one answered meanwhile is not expired twice (nor is
// another recorded under its id later), and the expiry heap stays bounded
// by the table when calls are answered faster than they come due.
func TestOrphanExpiry(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var o orphanTable
	for _, e := range []struct {
		uid uint64
		due int
	}{{1, 30}, {2, 10}, {3, 20}, {4, 10}, {5, 40}} {
		o.add(e.uid, orphan{deadline: at(e.due)})
	}
	o.answered(3)
	steps := []struct {
		now  int
		left []uint64
	}{
		{9, []uint64{1, 2, 4, 5}},
		{10, []uint64{1, 5}},
		{25, []uint64{1, 5}},
		{30, []uint64{5}},
		{45, nil},
	}
	for _, s := range steps {
		o.expire(at(s.now))
		var left []uint64
		for uid := range o.calls {
			left = append(left, uid)
		}
		slices.Sort(left)
		if !slices.Equal(left, s.left) {
			t.Fatalf("at %ds: left %v, want %v", s.now, left, s.left)
		}
	}
	if len(o.byDeadline) != 0 {
		t.Fatalf("%d heap entries left with the table empty", len(o.byDeadline))
	}
	for uid := range uint64(5 * maxOrphans) {
		o.add(uid+100, orphan{deadline: at(60)})
		o.answered(uid + 100)
		if len(o.byDeadline) > 2*maxOrphans {
			t.Fatalf("heap holds %d entries for a table of %d", len(o.byDeadline), o.len())
		}
	}
	o.add(7, orphan{deadline: at(50)})
	o.forget()
	if o.len() != 0 || len(o.byDeadline) != 0 {
		t.Fatalf("after forget: %d entries, %d heap entries", o.len(), len(o.byDeadline))
	}
}

// TestOrphanTableBounded: a client that connects, sends and leaves in a
// loop cannot grow the orphan table past maxOrphans; what is past it is
// not tracked (its answer counts as an unknown id).
func TestOrphanTableBounded(t *testing.T) {
	var o orphanTable
	for uid := range uint64(maxOrphans + 10) {
		o.add(uid+1, orphan{deadline: t0})
	}
	if o.len() != maxOrphans {
		t.Fatalf("table holds %d, want %d", o.len(), maxOrphans)
	}
	if _, ok := o.answered(maxOrphans + 5); ok {
		t.Error("a call past the bound was tracked")
	}
	_, first := o.answered(1)
	_, again := o.answered(1)
	if !first || again {
		t.Error("a tracked call is not answered exactly once")
	}
	o.expire(t0)
	if o.len() != 0 {
		t.Errorf("%d left after expiring at their deadline", o.len())
	}
}
