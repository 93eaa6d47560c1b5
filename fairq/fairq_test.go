package fairq

import (
	"fmt"
	"strings"
	"testing"
)

// push is one Push of a table row: item name (its flow is the name's
// first letter), weight and cost.
type push struct {
	item   string
	weight int
	cost   int
}

func flowOf(item string) uint64 { return uint64(item[0]) }

// pushes returns n items of flow letter, each of cost cost and weight w.
func pushes(letter byte, n, w, cost int) []push {
	out := make([]push, n)
	for i := range out {
		out[i] = push{fmt.Sprintf("%c%d", letter, i+1), w, cost}
	}
	return out
}

func cat(ps ...[]push) []push {
	var out []push
	for _, p := range ps {
		out = append(out, p...)
	}
	return out
}

// popAll pops n items (all, when n < 0) and renders them.
func popAll(t *testing.T, q *Queue[string], n int) string {
	t.Helper()
	var got []string
	for n != 0 {
		item, id, ok := q.Pop()
		if !ok {
			break
		}
		if id != flowOf(item) {
			t.Fatalf("Pop returned %s with flow %c", item, byte(id))
		}
		got = append(got, item)
		n--
	}
	return strings.Join(got, " ")
}

func TestOrder(t *testing.T) {
	rows := []struct {
		name   string
		pushes []push
		take   int // items to pop first (-1: all)
		later  []push
		// laterTake is how many to pop after later's pushes (0: all).
		laterTake int
		want      string
	}{
		{name: "empty", take: -1, want: ""},
		{name: "one_flow_is_fifo", pushes: pushes('a', 4, 1, 1), take: -1, want: "a1 a2 a3 a4"},
		{
			// The case: a flood queued, then one call: the call
			// goes after at most one of the flood's.
			name:   "a_flood_delays_a_single_item_by_one",
			pushes: cat(pushes('f', 2000, 1, 1), pushes('v', 1, 1, 1)),
			take:   3,
			want:   "f1 v1 f2",
		},
		{
			name:      "a_single_item_pushed_mid_flood",
			pushes:    pushes('f', 2000, 1, 1),
			take:      5,
			later:     pushes('v', 1, 1, 1),
			laterTake: 3,
			// f5 spent the flood's credit for its visit: v1 is next.
			want: "f1 f2 f3 f4 f5 | v1 f6 f7",
		},
		{
			name:   "equal_flows_alternate",
			pushes: cat(pushes('a', 3, 1, 1), pushes('b', 3, 1, 1)),
			take:   -1,
			want:   "a1 b1 a2 b2 a3 b3",
		},
		{
			name:   "weights_share_in_proportion",
			pushes: cat(pushes('a', 6, 3, 1), pushes('b', 3, 1, 1)),
			take:   -1,
			want:   "a1 a2 a3 b1 a4 a5 a6 b2 b3",
		},
		{
			// A batch of 4 costs four rounds' credit: the single
			// calls beside it go first, one per round.
			name:   "a_costly_item_waits_for_its_credit",
			pushes: cat(pushes('b', 1, 1, 4), pushes('s', 6, 1, 1)),
			take:   -1,
			want:   "s1 s2 s3 b1 s4 s5 s6",
		},
		{
			// Alone, a costly item goes at once: rounds with nothing
			// else to serve are credited in one step.
			name:   "a_costly_item_alone",
			pushes: pushes('b', 2, 1, 1000),
			take:   -1,
			want:   "b1 b2",
		},
		{
			name:   "an_idle_flow_banks_no_credit",
			pushes: cat(pushes('a', 1, 1, 1), pushes('b', 3, 1, 1)),
			take:   -1,
			later:  pushes('a', 2, 1, 1),
			want:   "a1 b1 b2 b3 | a1 a2",
		},
		{
			name:   "a_late_flow_joins_at_the_end_of_the_round",
			pushes: cat(pushes('a', 3, 1, 1), pushes('b', 3, 1, 1)),
			take:   1,
			later:  pushes('c', 2, 1, 1),
			// a spent its visit's credit on a1; c comes after b.
			want: "a1 | b1 c1 a2 b2 c2 a3 b3",
		},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			var q Queue[string]
			for _, p := range row.pushes {
				q.Push(flowOf(p.item), p.weight, p.item, p.cost)
			}
			got := popAll(t, &q, row.take)
			if row.later != nil {
				for _, p := range row.later {
					q.Push(flowOf(p.item), p.weight, p.item, p.cost)
				}
				n := row.laterTake
				if n == 0 {
					n = -1
				}
				got += " | " + popAll(t, &q, n)
			}
			if got != row.want {
				t.Errorf("popped %q, want %q", got, row.want)
			}
		})
	}
}

func TestDrop(t *testing.T) {
	var q Queue[string]
	for _, p := range cat(pushes('a', 3, 1, 1), pushes('b', 2, 1, 5), pushes('c', 2, 1, 1)) {
		q.Push(flowOf(p.item), p.weight, p.item, p.cost)
	}
	if got := popAll(t, &q, 1); got != "a1" {
		t.Fatalf("first pop %q", got)
	}
	var dropped []string
	if n := q.Drop('b', func(s string) { dropped = append(dropped, s) }); n != 2 || strings.Join(dropped, " ") != "b1 b2" {
		t.Fatalf("Drop: %d, %q", n, dropped)
	}
	if q.Drop('b', nil) != 0 || q.FlowLen('b') != 0 {
		t.Fatal("a dropped flow still has items")
	}
	if q.Len() != 4 || q.Cost() != 4 || q.Flows() != 2 {
		t.Fatalf("after Drop: Len %d Cost %d Flows %d, want 4 4 2", q.Len(), q.Cost(), q.Flows())
	}
	// The flow the round is at may be dropped too.
	q.Drop('a', nil)
	if got := popAll(t, &q, -1); got != "c1 c2" {
		t.Fatalf("after dropping a and b: %q", got)
	}
	q.Push('d', 1, "d1", 1)
	q.Clear(nil)
	if _, _, ok := q.Pop(); ok || q.Len() != 0 || q.Cost() != 0 || q.Flows() != 0 {
		t.Fatal("Clear left items")
	}
}

// TestShares checks the fairness bound on many random-ish flows: over any
// prefix of the pops while all flows stay backlogged, each flow's served
// cost is within one maximum item cost plus its quantum of its weighted
// share.
func TestShares(t *testing.T) {
	var q Queue[string]
	weights := []int{1, 2, 3, 5}
	costs := []int{1, 7, 2, 3}
	for i, w := range weights {
		letter := byte('a' + i)
		for _, p := range pushes(letter, 2000, w, costs[i]) {
			q.Push(flowOf(p.item), p.weight, p.item, p.cost)
		}
	}
	served := map[byte]int{}
	total := 0
	for range 1000 {
		item, _, ok := q.Pop()
		if !ok {
			t.Fatal("ran dry")
		}
		letter := item[0]
		c := costs[letter-'a']
		served[letter] += c
		total += c
	}
	sumW := 0
	for _, w := range weights {
		sumW += w
	}
	for i, w := range weights {
		letter := byte('a' + i)
		share := float64(total) * float64(w) / float64(sumW)
		if d := float64(served[letter]) - share; d > float64(7+w)*2 || d < -float64(7+w)*2 {
			t.Errorf("flow %c (weight %d) served %d of %d, share %.0f", letter, w, served[letter], total, share)
		}
	}
}

func BenchmarkPushPop(b *testing.B) {
	for _, flows := range []int{1, 16, 1024} {
		b.Run(fmt.Sprintf("flows=%d", flows), func(b *testing.B) {
			var q Queue[uint64]
			// A backlog of 4 items per flow, kept as the loop runs.
			for i := range 4 * flows {
				q.Push(uint64(i%flows), 1, uint64(i), 1)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				_, id, _ := q.Pop()
				q.Push(id, 1, uint64(i), 1)
			}
		})
	}
}
