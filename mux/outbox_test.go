package mux

import (
	"fmt"
	"slices"
	"testing"
)

// TestOutboxOrderAndBound: messages are queued in their Seq order whatever
// order they are pushed in, and the bound counts what is queued or being
// written: a message parked while an earlier one is still being applied is
// not held against the client (which goroutine applied its effects first
// is not its doing), and the first message of an empty queue passes
// whatever its size, charging nothing to the shared budget. Answers may
// take the queue past the bound as far as the budget shared by all queues
// allows; pushes only up to the bound, counting the pushes queued, and
// behind answers past it also within the budget.
func TestOutboxOrderAndBound(t *testing.T) {
	const limit = 1000
	type msg struct {
		seq  uint64
		size int
		push bool
		ok   bool
	}
	tests := []struct {
		name     string
		budget   int64 // the shared budget; 0: plenty
		msgs     []msg
		written  int // messages taken and written before the pushes after the first
		want     []uint64
		closed   bool
		wantUsed int64 // of the budget, when not closed
	}{
		{"in order", 0, []msg{{1, 10, false, true}, {2, 20, true, true}, {3, 30, false, true}}, 0, []uint64{1, 2, 3}, false, 0},
		{"out of order", 0, []msg{{3, 30, false, true}, {1, 10, false, true}, {2, 20, false, true}}, 0, []uint64{1, 2, 3}, false, 0},
		{"large first in an empty queue", 0, []msg{{1, 5000, false, true}}, 0, []uint64{1}, false, 0},
		{"large push first in an empty queue", 0, []msg{{1, 5000, true, true}}, 0, []uint64{1}, false, 0},
		{"large first, with no budget", 1, []msg{{1, 5000, false, true}}, 0, []uint64{1}, false, 0},
		{"behind a large first, within the bound", 1, []msg{{1, 5000, false, true}, {2, 1000, true, true}}, 0, []uint64{1, 2}, false, 0},
		{"behind a large first, past the bound", 1, []msg{{1, 5000, false, true}, {2, 1002, false, false}}, 0, nil, true, 0},
		{"large after a small one written", 0, []msg{{1, 10, false, true}, {2, 5000, false, true}}, 1, []uint64{1, 2}, false, 0},
		{"large parked before a small earlier one", 0, []msg{{2, 5000, false, true}, {1, 10, false, true}}, 0, []uint64{1, 2}, false, 4000},
		{"answers far past the bound", 0, []msg{{1, 600, false, true}, {2, 600, false, true}, {3, 20000, false, true}}, 0, []uint64{1, 2, 3}, false, 19600},
		{"answers up to the budget", 2000, []msg{{1, 600, false, true}, {2, 600, false, true}, {3, 2400, false, true}}, 0, []uint64{1, 2, 3}, false, 2000},
		{"answers past the budget", 2000, []msg{{1, 600, false, true}, {2, 600, false, true}, {3, 2401, false, false}}, 0, nil, true, 0},
		{"answers within the bound, no budget", 1, []msg{{1, 600, false, true}, {2, 1000, false, true}}, 0, []uint64{1, 2}, false, 0},
		{"pushes past the bound", 0, []msg{{1, 600, true, true}, {2, 600, true, true}, {3, 1000, true, false}}, 0, nil, true, 0},
		{"a push behind answers past the bound", 0, []msg{{1, 500, false, true}, {2, 1500, false, true}, {3, 600, true, true}, {4, 400, true, true}}, 0, []uint64{1, 2, 3, 4}, false, 1500},
		{"pushes behind answers, past the bound", 0, []msg{{1, 500, false, true}, {2, 1500, false, true}, {3, 600, true, true}, {4, 401, true, false}}, 0, nil, true, 0},
		{"a push behind answers, past the budget", 600, []msg{{1, 500, false, true}, {2, 1500, false, true}, {3, 201, true, false}}, 0, nil, true, 0},
		{"past the budget after a parked large one", 4005, []msg{{2, 5000, false, true}, {1, 10, false, true}, {3, 10, false, false}}, 0, nil, true, 0},
		{"a push after a parked large answer", 0, []msg{{2, 3000, false, true}, {1, 10, false, true}, {3, 900, true, true}}, 0, []uint64{1, 2, 3}, false, 2900},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &queueBudget{max: 1 << 40}
			if tt.budget > 0 {
				b.max = tt.budget
			}
			q := newOutbox(limit, b)
			for i, p := range tt.msgs {
				if i == 1 && tt.written > 0 {
					batch := q.take(nil)
					for _, m := range batch {
						q.done(m.size(), 0)
					}
				}
				msg := make([]byte, p.size)
				msg[0] = byte(p.seq)
				if got, _ := q.push(p.seq, outMsg{msg: msg, push: p.push}); got != p.ok {
					t.Fatalf("push %d (%d bytes, push %v) = %v, want %v", p.seq, p.size, p.push, got, p.ok)
				}
			}
			if q.closed != tt.closed {
				t.Fatalf("closed = %v, want %v", q.closed, tt.closed)
			}
			if got := b.used.Load(); tt.closed && got != 0 || !tt.closed && got != tt.wantUsed {
				t.Fatalf("budget used %d, want %d (closed %v)", got, tt.wantUsed, tt.closed)
			}
			if tt.closed {
				return
			}
			var got []uint64
			if tt.written > 0 {
				got = append(got, 1)
			}
			for {
				batch := q.take(nil)
				if len(batch) == 0 {
					break
				}
				for _, m := range batch {
					got = append(got, uint64(m.msg[0]))
					q.done(m.size(), 0)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("queued %v, want %v", got, tt.want)
			}
		})
	}
}

// TestOutboxOverAndBudget: push reports the queue past its bound (what
// arms the stall check) exactly while it is; what it holds past the bound
// is charged to the shared budget and given back as it is written, and
// whole when the queue closes.
func TestOutboxOverAndBudget(t *testing.T) {
	b := &queueBudget{max: 1 << 40}
	q := newOutbox(1000, b)
	check := func(step string, wantUsed int64, wantOver bool) {
		t.Helper()
		if got := b.used.Load(); got != wantUsed {
			t.Fatalf("%s: budget used %d, want %d", step, got, wantUsed)
		}
		if q.over() != wantOver {
			t.Fatalf("%s: over %v, want %v", step, q.over(), wantOver)
		}
	}
	if _, over := newOutbox(1000, &queueBudget{max: 1 << 40}).push(1, outMsg{msg: make([]byte, 5000)}); over {
		t.Fatal("a large answer alone: reported over")
	}
	q.push(1, outMsg{msg: make([]byte, 100)}) // accepted into an empty queue: exempt
	if _, over := q.push(2, outMsg{msg: make([]byte, 1000)}); over {
		t.Fatal("at the bound, the first message aside: reported over")
	}
	check("at the bound", 0, false)
	if _, over := q.push(3, outMsg{msg: make([]byte, 500), push: true}); !over {
		t.Fatal("past the bound: not reported over")
	}
	check("past the bound", 500, true)
	// Past the bound, one message per take: each write shows progress.
	first := q.take(nil)
	if len(first) != 1 {
		t.Fatalf("past the bound, a take of %d messages", len(first))
	}
	check("taken, not written", 500, true)
	q.done(first[0].size(), 0) // the exempt one written: the rest counts whole
	check("the first written", 500, true)
	second := q.take(nil)
	q.done(second[0].size(), 0)
	check("the second written", 0, false)
	third := q.take(nil)
	q.done(third[0].size(), third[0].size())
	if q.pushes != 0 || q.bytes != 0 {
		t.Fatalf("all written: bytes %d, pushes %d", q.bytes, q.pushes)
	}
	q.push(4, outMsg{msg: make([]byte, 800)})
	q.push(5, outMsg{msg: make([]byte, 800)})
	q.push(6, outMsg{msg: make([]byte, 800)})
	check("past the bound again", 600, true)
	q.close()
	check("closed", 0, false)
}

// TestOutboxTakeBounded: a take returns the oldest messages up to maxTake
// bytes, or the first alone whatever its size, so that a writer's write
// ends while more is queued behind.
func TestOutboxTakeBounded(t *testing.T) {
	q := newOutbox(1<<30, &queueBudget{max: 1 << 40})
	for i, size := range []int{maxTake / 4, maxTake / 4, maxTake / 2, 1, 3 * maxTake, 10, 20} {
		b := make([]byte, size)
		b[0] = byte(i)
		q.push(uint64(i+1), outMsg{msg: b})
	}
	var got [][]byte
	var batch []outMsg
	for {
		batch = q.take(batch)
		if len(batch) == 0 {
			break
		}
		var firsts []byte
		for _, m := range batch {
			firsts = append(firsts, m.msg[0])
		}
		got = append(got, firsts)
	}
	want := [][]byte{{0, 1, 2}, {3}, {4}, {5, 6}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("takes %v, want %v", got, want)
	}
	if q.hasQueued() {
		t.Fatal("all taken: still queued")
	}
}

// TestOutboxCaughtUp: a session is caught up only once every message up to
// the core's count is queued and written; a parked one counts as pending.
func TestOutboxCaughtUp(t *testing.T) {
	q := newOutbox(1000, &queueBudget{max: 1 << 40})
	q.push(2, outMsg{msg: make([]byte, 20)})
	if q.caughtUp(2) || q.pending() != 20 {
		t.Fatalf("with 2 parked: caught up %v, pending %d", q.caughtUp(2), q.pending())
	}
	q.push(1, outMsg{msg: make([]byte, 10)})
	if q.caughtUp(2) {
		t.Fatal("caught up with both queued, none written")
	}
	for _, m := range q.take(nil) {
		q.done(m.size(), 0)
	}
	if !q.caughtUp(2) || q.caughtUp(3) || q.pending() != 0 {
		t.Fatalf("after writing both: caught up to 2 %v, to 3 %v, pending %d", q.caughtUp(2), q.caughtUp(3), q.pending())
	}
}

// pending is the number of bytes queued, parked or being written.
func (q *outbox) pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.bytes + q.held
}
