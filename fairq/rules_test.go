package fairq

import (
	"fmt"
	"strings"
	"testing"
)

// TestLongFlowRules: a flow with a long backlog that is served and pushed
// to at once (its queue's front reused once most of it is taken) stays a
// FIFO, and FlowLen counts what each flow has queued throughout.
func TestLongFlowRules(t *testing.T) {
	for _, tt := range []struct {
		name        string
		first, take int // a's items pushed, then popped
		more        int // a's items pushed after
	}{
		{name: "short backlog", first: 10, take: 5, more: 3},
		{name: "most of a long backlog taken", first: 200, take: 150, more: 40},
		{name: "half of a long backlog taken", first: 256, take: 128, more: 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var q Queue[string]
			for _, p := range pushes('a', tt.first, 1, 1) {
				q.Push(flowOf(p.item), p.weight, p.item, p.cost)
			}
			q.Push('b', 1, "b1", 1)
			if got := q.FlowLen('a'); got != tt.first {
				t.Fatalf("FlowLen(a) %d, want %d", got, tt.first)
			}
			// a and b alternate; b's one item goes second.
			got := strings.Fields(popAll(t, &q, tt.take))
			if got[1] != "b1" {
				t.Fatalf("popped %v: b1 not second", got[:2])
			}
			takenA := tt.take - 1
			if q.FlowLen('a') != tt.first-takenA || q.FlowLen('b') != 0 {
				t.Fatalf("FlowLen a %d b %d, want %d 0", q.FlowLen('a'), q.FlowLen('b'), tt.first-takenA)
			}
			for i := range tt.more {
				q.Push('a', 1, fmt.Sprintf("a%d", tt.first+i+1), 1)
			}
			rest := strings.Fields(popAll(t, &q, -1))
			all := append(got[:1:1], got[2:]...)
			all = append(all, rest...)
			if len(all) != tt.first+tt.more {
				t.Fatalf("popped %d of a, want %d", len(all), tt.first+tt.more)
			}
			for i, item := range all {
				if want := fmt.Sprintf("a%d", i+1); item != want {
					t.Fatalf("a's item %d popped is %s, want %s: not FIFO", i+1, item, want)
				}
			}
		})
	}
}

// TestRetiredFlowMemory: a flow that empties keeps its buffer for the next
// flow, unless it held a flood's backlog (more than 1024 items' room),
// which is let go.
func TestRetiredFlowMemory(t *testing.T) {
	for _, tt := range []struct {
		name string
		n    int
		kept bool
	}{
		{name: "small backlog kept", n: 100, kept: true},
		{name: "flood backlog let go", n: 2000, kept: false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var q Queue[string]
			for _, p := range pushes('f', tt.n, 1, 1) {
				q.Push(flowOf(p.item), p.weight, p.item, p.cost)
			}
			q.Drop('f', nil)
			if len(q.spare) != 1 {
				t.Fatalf("%d spare flows, want 1", len(q.spare))
			}
			if kept := cap(q.spare[0].items) > 0; kept != tt.kept {
				t.Fatalf("buffer of cap %d kept %v, want %v", cap(q.spare[0].items), kept, tt.kept)
			}
			// The next flow reuses it and is served as any.
			q.Push('g', 1, "g1", 1)
			if got := popAll(t, &q, -1); got != "g1" || q.Len() != 0 {
				t.Fatalf("after reuse popped %q, Len %d", got, q.Len())
			}
		})
	}
}
