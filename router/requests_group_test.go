package router

import (
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestRequestsGroupsModel runs random operations on a table holding both
// single requests and the calls of upstream arrays (groups) against a
// plain map: new singles and batches, re-adds (retries) of either, Take,
// DropClient, Expire with calls of one group on different deadlines, and
// now and then a Discard, which must hand everything over in id order.
// After every step both must agree on what is pending, per client and in
// all, and on what Peek and Group see.
func TestRequestsGroupsModel(t *testing.T) {
	r := NewRequests()
	model := map[uint64]Pending{}
	seed := uint64(11)
	rnd := func(n int) int {
		seed = seed*6364136223846793005 + 1442695040888963407
		return int(seed>>33) % n
	}
	var all []uint64
	deadline := func() time.Duration {
		if rnd(8) == 0 {
			return 0 // none
		}
		return time.Duration(rnd(50)+1) * time.Millisecond
	}
	for step := 0; step < 30000; step++ {
		switch op := rnd(20); {
		case op < 4: // a single request
			id := r.Next()
			p := pend(ClientID(rnd(5)), "s"+strconv.Itoa(int(id)), deadline())
			r.Add(id, p)
			model[id] = p
			all = append(all, id)
		case op < 7: // a client batch: its calls join one group
			c := ClientID(rnd(5))
			u := new(UpstreamBatch)
			d := deadline()
			for n := rnd(12) + 1; n > 0; n-- {
				if rnd(5) == 0 {
					r.Next() // an id the batch skips (an eth_subscribe element)
				}
				id := r.Next()
				u.AddCall(id, []byte("x"))
				p := pend(c, "b"+strconv.Itoa(int(id)), d)
				if rnd(6) == 0 {
					p.Deadline = p.Deadline.Add(time.Duration(rnd(20)) * time.Millisecond)
				}
				p.Up = u
				r.Add(id, p)
				model[id] = p
				all = append(all, id)
			}
		case op < 8 && len(all) > 0: // an id added again, as a retry: same request, maybe a new deadline
			id := all[rnd(len(all))]
			if p, ok := model[id]; ok {
				p.Deadline = t0.Add(deadline())
				r.Add(id, p)
				model[id] = p
			}
		case op < 14 && len(all) > 0:
			id := all[rnd(len(all))]
			p, ok := r.Take(id)
			mp, mok := model[id]
			if ok != mok || ok && (p.Client != mp.Client || string(p.ID) != string(mp.ID) || p.Up != mp.Up) {
				t.Fatalf("step %d: Take(%d) = %v %q %v, model %v %q %v", step, id, p.Client, p.ID, ok, mp.Client, mp.ID, mok)
			}
			delete(model, id)
		case op < 15 && len(all) > 0: // one answer settles a whole group
			id := all[rnd(len(all))]
			var u *UpstreamBatch
			g, n := r.Group(id)
			if g != nil {
				u = g.Up
			}
			if got := r.TakeGroup(id); got != n {
				t.Fatalf("step %d: TakeGroup(%d) = %d, Group said %d", step, id, got, n)
			}
			for mid, p := range model {
				if u != nil && p.Up == u {
					delete(model, mid)
					n--
				}
			}
			if n != 0 {
				t.Fatalf("step %d: TakeGroup(%d) took %d calls too few", step, id, n)
			}
		case op < 16:
			c := ClientID(rnd(5))
			r.DropClient(c, func(id uint64, p Pending) {
				if mp, ok := model[id]; !ok || mp.Client != c || p.Client != c || string(p.ID) != string(mp.ID) {
					t.Fatalf("step %d: DropClient(%d) removed %d of client %d (model has %v)", step, c, id, p.Client, ok)
				}
				delete(model, id)
			})
		case op < 19:
			now := t0.Add(time.Duration(rnd(70)) * time.Millisecond)
			var last time.Time
			r.Expire(now, func(id uint64, p Pending) {
				mp, ok := model[id]
				if !ok || string(p.ID) != string(mp.ID) || p.Deadline.IsZero() || p.Deadline.After(now) {
					t.Fatalf("step %d: expired %d (deadline %v, pending %v) at %v", step, id, p.Deadline, ok, now)
				}
				// Singles in deadline order (a group's calls that are
				// due go together, with the group's earliest).
				if p.Up == nil {
					if p.Deadline.Before(last) {
						t.Fatalf("step %d: %d expired after a later deadline", step, id)
					}
					last = p.Deadline
				}
				delete(model, id)
			})
			for id, p := range model {
				if !p.Deadline.IsZero() && !p.Deadline.After(now) {
					t.Fatalf("step %d: %d past its deadline still pending", step, id)
				}
			}
		default:
			if rnd(10) != 0 {
				break
			}
			var want []uint64
			for id := range model {
				want = append(want, id)
			}
			slices.Sort(want)
			var got []expired
			r.Discard(collect(&got))
			if !slices.Equal(ids(got), want) {
				t.Fatalf("step %d: Discard handed over %v\nwant %v", step, ids(got), want)
			}
			for _, e := range got {
				if string(e.p.ID) != string(model[e.id].ID) {
					t.Fatalf("step %d: Discard gave %d as %q", step, e.id, e.p.ID)
				}
			}
			clear(model)
		}
		checkGroupsModel(t, step, r, model)
	}
}

func checkGroupsModel(t *testing.T, step int, r *Requests, model map[uint64]Pending) {
	t.Helper()
	if r.Len() != len(model) {
		t.Fatalf("step %d: Len %d, model %d", step, r.Len(), len(model))
	}
	per := map[ClientID]int{}
	live := map[*UpstreamBatch]int{}
	for id, p := range model {
		per[p.Client]++
		if p.Up != nil {
			live[p.Up]++
		}
		q, ok := r.Peek(id)
		if !ok || string(q.ID) != string(p.ID) || !q.Deadline.Equal(p.Deadline) {
			t.Fatalf("step %d: Peek(%d) = %v, model %q", step, id, ok, p.ID)
		}
	}
	for id, p := range model {
		g, n := r.Group(id)
		if p.Up != nil && (g == nil || g.Up != p.Up || g.Client != p.Client || n != live[p.Up]) {
			t.Fatalf("step %d: Group(%d) = %v %d, model %p %d", step, id, g, n, p.Up, live[p.Up])
		}
	}
	for c := ClientID(0); c < 5; c++ {
		if r.InFlight(c) != per[c] {
			t.Fatalf("step %d: InFlight(%d) = %d, model %d", step, c, r.InFlight(c), per[c])
		}
	}
	if n := r.deadline.len(); n > 4*r.Len()+1024+16 {
		t.Fatalf("step %d: heap %d items for %d live", step, n, r.Len())
	}
}

// TestRequestsIndexWindow drives the id index through its edges: an id
// left behind while maxWindow later ones come and go (it moves to the
// map), ids far ahead, and old ids added again after the window emptied.
func TestRequestsIndexWindow(t *testing.T) {
	r := NewRequests()
	straggler := r.Next()
	r.Add(straggler, pend(1, "straggler", time.Hour))
	for i := 0; i < 3*maxWindow; i++ {
		id := r.Next()
		r.Add(id, pend(2, "x", time.Hour))
		if _, ok := r.Take(id); !ok {
			t.Fatalf("Take %d", id)
		}
	}
	if span := len(r.ids.buf) - r.ids.off; span > maxWindow {
		t.Fatalf("window spans %d ids", span)
	}
	if p, ok := r.Take(straggler); !ok || string(p.ID) != "straggler" {
		t.Fatal("the straggler was lost")
	}
	// Far ahead, then an old id retried with the window empty, then one
	// between them.
	far := r.Next() + 10*maxWindow
	r.Add(far, pend(1, "far", time.Hour))
	r.Take(far)
	for _, id := range []uint64{far, straggler, far - 5, far + 3} {
		r.Add(id, pend(1, strconv.Itoa(int(id)), time.Hour))
	}
	for _, id := range []uint64{straggler, far - 5, far, far + 3} {
		if p, ok := r.Take(id); !ok || string(p.ID) != strconv.Itoa(int(id)) {
			t.Fatalf("Take(%d) = %q %v", id, p.ID, ok)
		}
	}
	if r.Len() != 0 || len(r.ids.old) != 0 {
		t.Fatalf("Len %d, %d ids in the map", r.Len(), len(r.ids.old))
	}
}

// TestRequestsGroupDeadlines: the calls of one group expire each at its
// own deadline, whatever the order they were added in.
func TestRequestsGroupDeadlines(t *testing.T) {
	r := NewRequests()
	u := new(UpstreamBatch)
	d := []time.Duration{3, 1, 2, 0, 1} // seconds; 0: none
	for i, s := range d {
		id := uint64(i + 1)
		u.AddCall(id, []byte("x"))
		p := pend(1, strconv.Itoa(i+1), s*time.Second)
		p.Up = u
		r.Add(id, p)
	}
	for _, step := range []struct {
		at   time.Duration
		want []uint64
	}{{0, nil}, {time.Second, []uint64{2, 5}}, {2 * time.Second, []uint64{3}}, {time.Hour, []uint64{1}}} {
		var got []expired
		r.Expire(t0.Add(step.at), collect(&got))
		if !slices.Equal(ids(got), step.want) {
			t.Fatalf("at %v: expired %v, want %v", step.at, ids(got), step.want)
		}
	}
	if r.Len() != 1 {
		t.Fatalf("Len %d", r.Len())
	}
	// A call added back with an earlier deadline than the group's.
	p := pend(1, "2", time.Minute)
	p.Up = u
	r.Add(2, p)
	var got []expired
	r.Expire(t0.Add(2*time.Hour), collect(&got))
	if !slices.Equal(ids(got), []uint64{2}) {
		t.Fatalf("expired %v", ids(got))
	}
	if q, ok := r.Take(4); !ok || string(q.ID) != "4" {
		t.Fatal("the call with no deadline")
	}
}
