package router

import (
	"slices"
	"strconv"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func pend(c ClientID, id string, deadline time.Duration) Pending {
	p := Pending{Client: c, ID: []byte(id), Method: "eth_call", Sent: t0}
	if deadline != 0 {
		p.Deadline = t0.Add(deadline)
	}
	return p
}

type expired struct {
	id uint64
	p  Pending
}

func collect(list *[]expired) func(uint64, Pending) {
	return func(id uint64, p Pending) { *list = append(*list, expired{id, p}) }
}

func ids(list []expired) []uint64 {
	out := make([]uint64, len(list))
	for i, e := range list {
		out[i] = e.id
	}
	return out
}

func TestRequestsNext(t *testing.T) {
	r := NewRequests()
	if got := r.Next(); got != 1 {
		t.Fatalf("first id = %d, want 1", got)
	}
	last := uint64(1)
	for i := 0; i < 1000; i++ {
		id := r.Next()
		if id <= last {
			t.Fatalf("id %d after %d", id, last)
		}
		last = id
		if i%3 == 0 {
			r.Add(id, pend(1, "1", time.Second))
		}
		if i%100 == 0 {
			r.Discard(nil)
			if r.Len() != 0 || r.InFlight(1) != 0 {
				t.Fatal("Discard left entries")
			}
		}
	}
}

func TestRequestsAddTake(t *testing.T) {
	r := NewRequests()
	a, b := r.Next(), r.Next()
	r.Add(a, pend(1, `"a"`, time.Second))
	r.Add(b, pend(2, `"b"`, 0))
	if r.Len() != 2 || r.InFlight(1) != 1 || r.InFlight(2) != 1 || r.InFlight(3) != 0 {
		t.Fatalf("Len %d InFlight %d %d", r.Len(), r.InFlight(1), r.InFlight(2))
	}
	p, ok := r.Take(a)
	if !ok || p.Client != 1 || string(p.ID) != `"a"` || !p.Deadline.Equal(t0.Add(time.Second)) {
		t.Fatalf("Take = %+v, %v", p, ok)
	}
	if _, ok := r.Take(a); ok {
		t.Fatal("second Take found the entry")
	}
	if _, ok := r.Take(12345); ok {
		t.Fatal("Take of unknown id")
	}
	if r.Len() != 1 || r.InFlight(1) != 0 || r.InFlight(2) != 1 {
		t.Fatalf("Len %d InFlight %d %d", r.Len(), r.InFlight(1), r.InFlight(2))
	}
	p, ok = r.Take(b)
	if !ok || string(p.ID) != `"b"` {
		t.Fatalf("Take b = %+v, %v", p, ok)
	}
	if r.Len() != 0 || r.InFlight(2) != 0 || len(r.perCli) != 0 {
		t.Fatalf("not empty: %d %v", r.Len(), r.perCli)
	}
}

func TestRequestsInFlight(t *testing.T) {
	r := NewRequests()
	var byClient = map[ClientID][]uint64{}
	for i := 0; i < 30; i++ {
		c := ClientID(i % 3)
		id := r.Next()
		r.Add(id, pend(c, strconv.Itoa(i), time.Duration(i+1)*time.Second))
		byClient[c] = append(byClient[c], id)
	}
	for c := ClientID(0); c < 3; c++ {
		if got := r.InFlight(c); got != 10 {
			t.Errorf("InFlight(%d) = %d", c, got)
		}
	}
	for _, id := range byClient[1][:4] {
		r.Take(id)
	}
	if r.InFlight(1) != 6 || r.Len() != 26 {
		t.Errorf("after Take: InFlight %d Len %d", r.InFlight(1), r.Len())
	}
	// Re-adding an id moves it to the new client's count.
	r.Add(byClient[2][0], pend(1, "moved", time.Hour))
	if r.InFlight(1) != 7 || r.InFlight(2) != 9 || r.Len() != 26 {
		t.Errorf("after re-Add: InFlight %d %d Len %d", r.InFlight(1), r.InFlight(2), r.Len())
	}
}

func TestRequestsExpire(t *testing.T) {
	r := NewRequests()
	// Deadlines out of order: id i expires at t0 + d[i-1] seconds.
	d := []int{5, 3, 9, 1, 7, 2, 8, 4, 6, 10}
	for i, s := range d {
		r.Add(uint64(i+1), pend(ClientID(i%2+1), strconv.Itoa(i+1), time.Duration(s)*time.Second))
	}
	r.Add(100, pend(1, "nodeadline", 0))
	// Answered before expiry: never reported.
	if _, ok := r.Take(2); !ok { // deadline 3s
		t.Fatal("Take 2")
	}
	if at, ok := r.NextDeadline(); !ok || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("NextDeadline = %v %v", at, ok)
	}

	var got []expired
	r.Expire(t0, collect(&got))
	if len(got) != 0 {
		t.Fatalf("expired at t0: %v", ids(got))
	}
	r.Expire(t0.Add(4*time.Second), collect(&got)) // deadline equal to now expires
	if want := []uint64{4, 6, 8}; !slices.Equal(ids(got), want) {
		t.Fatalf("expired %v, want %v", ids(got), want)
	}
	for _, e := range got {
		if e.p.Deadline.After(t0.Add(4 * time.Second)) {
			t.Errorf("id %d expired early", e.id)
		}
		if _, ok := r.Take(e.id); ok {
			t.Errorf("expired id %d still takeable", e.id)
		}
	}
	got = nil
	r.Expire(t0.Add(time.Hour), collect(&got))
	if want := []uint64{1, 9, 5, 7, 3, 10}; !slices.Equal(ids(got), want) {
		t.Fatalf("expired %v, want %v", ids(got), want)
	}
	if r.Len() != 1 || r.InFlight(1) != 1 || r.InFlight(2) != 0 {
		t.Fatalf("Len %d InFlight %d %d", r.Len(), r.InFlight(1), r.InFlight(2))
	}
	if _, ok := r.NextDeadline(); ok {
		t.Fatal("NextDeadline with no deadline left")
	}
	if _, ok := r.Take(100); !ok {
		t.Fatal("request without deadline expired")
	}
}

func TestRequestsRetryDeadline(t *testing.T) {
	r := NewRequests()
	id := r.Next()
	r.Add(id, pend(1, "1", time.Second))
	// Retried with a later deadline: the first heap item must not expire it.
	r.Add(id, pend(1, "1", time.Minute))
	if r.Len() != 1 || r.InFlight(1) != 1 {
		t.Fatalf("Len %d InFlight %d", r.Len(), r.InFlight(1))
	}
	var got []expired
	r.Expire(t0.Add(30*time.Second), collect(&got))
	if len(got) != 0 {
		t.Fatalf("expired by the old deadline: %v", ids(got))
	}
	r.Expire(t0.Add(time.Minute), collect(&got))
	if !slices.Equal(ids(got), []uint64{id}) {
		t.Fatalf("expired %v", ids(got))
	}
	// An earlier deadline on re-Add is honoured too.
	id = r.Next()
	r.Add(id, pend(1, "2", time.Hour))
	r.Add(id, pend(1, "2", 2*time.Minute))
	got = nil
	r.Expire(t0.Add(2*time.Minute), collect(&got))
	if !slices.Equal(ids(got), []uint64{id}) || string(got[0].p.ID) != "2" {
		t.Fatalf("expired %v", ids(got))
	}
	r.Expire(t0.Add(2*time.Hour), collect(&got))
	if len(got) != 1 {
		t.Fatalf("reported twice: %v", ids(got))
	}
	// Taken, then added again with the same deadline: expires once.
	id = r.Next()
	r.Add(id, pend(1, "3", time.Second))
	r.Take(id)
	r.Add(id, pend(1, "3", time.Second))
	got = nil
	r.Expire(t0.Add(time.Hour), collect(&got))
	if !slices.Equal(ids(got), []uint64{id}) {
		t.Fatalf("expired %v", ids(got))
	}
}

func TestRequestsDropClient(t *testing.T) {
	r := NewRequests()
	for i := 0; i < 20; i++ {
		r.Add(r.Next(), pend(ClientID(i%4), strconv.Itoa(i), time.Duration(i+1)*time.Second))
	}
	var got []expired
	r.DropClient(2, collect(&got))
	if len(got) != 5 {
		t.Fatalf("dropped %d", len(got))
	}
	for _, e := range got {
		if e.p.Client != 2 {
			t.Errorf("dropped client %d's id %d", e.p.Client, e.id)
		}
		if _, ok := r.Take(e.id); ok {
			t.Errorf("dropped id %d still there", e.id)
		}
	}
	if r.InFlight(2) != 0 || r.Len() != 15 || r.InFlight(1) != 5 || r.InFlight(3) != 5 || r.InFlight(0) != 5 {
		t.Fatalf("Len %d, InFlight %d %d %d %d", r.Len(), r.InFlight(0), r.InFlight(1), r.InFlight(2), r.InFlight(3))
	}
	r.DropClient(2, func(uint64, Pending) { t.Error("dropped twice") })
	r.DropClient(9, func(uint64, Pending) { t.Error("unknown client") })
	r.DropClient(3, nil) // nil callback is allowed
	if r.InFlight(3) != 0 || r.Len() != 10 {
		t.Fatalf("Len %d", r.Len())
	}
	// Dropped requests do not expire later.
	got = nil
	r.Expire(t0.Add(time.Hour), collect(&got))
	if len(got) != 10 {
		t.Fatalf("expired %d", len(got))
	}
	for _, e := range got {
		if e.p.Client == 2 || e.p.Client == 3 {
			t.Errorf("dropped request %d expired", e.id)
		}
	}
}

func TestRequestsDiscard(t *testing.T) {
	r := NewRequests()
	var want []uint64
	for i := 0; i < 50; i++ {
		id := r.Next()
		r.Add(id, pend(ClientID(i%3), strconv.Itoa(int(id)), time.Second))
		want = append(want, id)
	}
	r.Take(want[10])
	want = slices.Delete(want, 10, 11)
	last := want[len(want)-1]
	var got []expired
	r.Discard(collect(&got))
	if !slices.Equal(ids(got), want) {
		t.Fatalf("discarded %v\nwant %v", ids(got), want)
	}
	for _, e := range got {
		if string(e.p.ID) != strconv.Itoa(int(e.id)) {
			t.Errorf("id %d carries %q", e.id, e.p.ID)
		}
	}
	if r.Len() != 0 || r.InFlight(0) != 0 || r.InFlight(1) != 0 {
		t.Fatal("not empty")
	}
	if _, ok := r.NextDeadline(); ok {
		t.Fatal("deadline survived Discard")
	}
	for _, id := range want {
		if _, ok := r.Take(id); ok {
			t.Fatalf("id %d survived Discard", id)
		}
	}
	var exp []expired
	r.Expire(t0.Add(time.Hour), collect(&exp))
	if len(exp) != 0 {
		t.Fatalf("expired after Discard: %v", ids(exp))
	}
	if id := r.Next(); id <= last {
		t.Fatalf("Next after Discard = %d, want > %d", id, last)
	}
	// The table works normally afterwards, including retries of old ids.
	r.Add(want[0], pend(1, "retry", time.Minute))
	if p, ok := r.Take(want[0]); !ok || string(p.ID) != "retry" {
		t.Fatal("retry after Discard")
	}
	r.Discard(nil)
}

func TestRequestsHeapBounded(t *testing.T) {
	r := NewRequests()
	const live = 50
	var window []uint64
	bound := func() int { return 4*r.Len() + 1024 + 16 }
	for i := 0; i < 10000; i++ {
		id := r.Next()
		r.Add(id, pend(ClientID(i%7), "x", time.Duration(i+1)*time.Millisecond))
		window = append(window, id)
		if len(window) > live {
			if _, ok := r.Take(window[0]); !ok {
				t.Fatalf("Take %d", window[0])
			}
			window = window[1:]
		}
		if n := r.deadline.len(); n > bound() {
			t.Fatalf("cycle %d: heap %d items for %d live", i, n, r.Len())
		}
	}
	// The heap still works after all the compactions.
	var got []expired
	r.Expire(t0.Add(time.Hour), collect(&got))
	if !slices.Equal(ids(got), window) {
		t.Fatalf("expired %v\nwant %v", ids(got), window)
	}
	if r.Len() != 0 {
		t.Fatal("left over")
	}
}

// The same id taken and added again with the same deadline, over and over
// (as a retried request would be), must not grow the heap without bound.
func TestRequestsHeapBoundedSameID(t *testing.T) {
	r := NewRequests()
	other := r.Next()
	r.Add(other, pend(2, "other", time.Hour))
	id := r.Next()
	p := pend(1, "1", time.Second)
	for i := 0; i < 10000; i++ {
		r.Add(id, p)
		if i%2 == 0 {
			r.Take(id)
		}
		if n := r.deadline.len(); n > 4*r.Len()+1024+16 {
			t.Fatalf("cycle %d: heap %d items for %d live", i, n, r.Len())
		}
	}
	var got []expired
	r.Expire(t0.Add(2*time.Hour), collect(&got))
	if !slices.Equal(ids(got), []uint64{id, other}) {
		t.Fatalf("expired %v", ids(got))
	}
}

func TestRequestsSlotsReleased(t *testing.T) {
	r := NewRequests()
	for i := 0; i < 100; i++ {
		id := r.Next()
		r.Add(id, Pending{Client: 1, ID: []byte("1"), Frame: make([]byte, 10)})
		r.Take(id)
	}
	if len(r.slots) != 1 {
		t.Errorf("%d slots for one request at a time", len(r.slots))
	}
	for _, sl := range r.slots {
		if sl.p.Frame != nil || sl.p.ID != nil {
			t.Error("freed slot still holds the request")
		}
	}
}

func TestRequestsHeapOrder(t *testing.T) {
	// Many random deadlines, some equal, expire in order.
	r := NewRequests()
	seed := uint64(1)
	for i := 0; i < 2000; i++ {
		seed = seed*6364136223846793005 + 1442695040888963407
		r.Add(r.Next(), pend(1, "x", time.Duration(seed>>54+1)*time.Millisecond))
	}
	var got []expired
	r.Expire(t0.Add(time.Hour), collect(&got))
	if len(got) != 2000 {
		t.Fatalf("expired %d", len(got))
	}
	if !slices.IsSortedFunc(got, func(a, b expired) int { return a.p.Deadline.Compare(b.p.Deadline) }) {
		t.Fatal("not in deadline order")
	}
}

// TestRequestsModel runs random Add (new and re-added ids), Take, DropClient
// and Expire against a plain map and checks after every step that both
// agree on what is pending, per client and in all, and that every client's
// slot list holds exactly that client's requests.
func TestRequestsModel(t *testing.T) {
	r := NewRequests()
	model := map[uint64]Pending{}
	seed := uint64(7)
	rnd := func(n int) int {
		seed = seed*6364136223846793005 + 1442695040888963407
		return int(seed>>33) % n
	}
	var ids []uint64
	for step := 0; step < 20000; step++ {
		switch op := rnd(10); {
		case op < 4: // a new request
			id := r.Next()
			p := pend(ClientID(rnd(5)), "x", time.Duration(rnd(50)+1)*time.Millisecond)
			r.Add(id, p)
			model[id] = p
			ids = append(ids, id)
		case op < 5 && len(ids) > 0: // an id added again (a retry), maybe for another client
			id := ids[rnd(len(ids))]
			p := pend(ClientID(rnd(5)), "y", time.Duration(rnd(50)+1)*time.Millisecond)
			r.Add(id, p)
			model[id] = p
		case op < 8 && len(ids) > 0:
			id := ids[rnd(len(ids))]
			p, ok := r.Take(id)
			mp, mok := model[id]
			if ok != mok || ok && (p.Client != mp.Client || string(p.ID) != string(mp.ID)) {
				t.Fatalf("step %d: Take(%d) = %v %v, model %v %v", step, id, p.Client, ok, mp.Client, mok)
			}
			delete(model, id)
		case op < 9:
			c := ClientID(rnd(5))
			r.DropClient(c, func(id uint64, p Pending) {
				if mp, ok := model[id]; !ok || mp.Client != c || p.Client != c {
					t.Fatalf("step %d: DropClient(%d) removed %d of client %d (model has %v)", step, c, id, p.Client, ok)
				}
				delete(model, id)
			})
		default:
			now := t0.Add(time.Duration(rnd(60)) * time.Millisecond)
			r.Expire(now, func(id uint64, p Pending) {
				if p.Deadline.After(now) {
					t.Fatalf("step %d: expired %d before its deadline", step, id)
				}
				delete(model, id)
			})
			for id, p := range model {
				if !p.Deadline.After(now) {
					t.Fatalf("step %d: %d past its deadline still pending", step, id)
				}
			}
		}
		if step%97 == 0 || step == 19999 {
			checkModel(t, r, model)
		}
	}
}

func checkModel(t *testing.T, r *Requests, model map[uint64]Pending) {
	t.Helper()
	if r.Len() != len(model) {
		t.Fatalf("Len %d, model %d", r.Len(), len(model))
	}
	per := map[ClientID]int{}
	for _, p := range model {
		per[p.Client]++
	}
	for c := ClientID(0); c < 5; c++ {
		if r.InFlight(c) != per[c] {
			t.Fatalf("InFlight(%d) = %d, model %d", c, r.InFlight(c), per[c])
		}
		n := 0
		prev := -1
		for i := r.perCli[c].head; r.perCli[c].n > 0 && i >= 0; i = r.slots[i].next {
			if r.slots[i].p.Client != c || r.slots[i].prev != prev {
				t.Fatalf("client %d's list is broken at slot %d", c, i)
			}
			if _, ok := model[r.slots[i].id]; !ok {
				t.Fatalf("client %d's list holds %d, which is not pending", c, r.slots[i].id)
			}
			prev = i
			n++
		}
		if n != per[c] {
			t.Fatalf("client %d's list has %d slots, model %d", c, n, per[c])
		}
	}
}
