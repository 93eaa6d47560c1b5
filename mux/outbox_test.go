package mux

import (
	"fmt"
	"testing"
)

// TestOutboxOrderAndBound: messages are queued in their Seq order whatever
// order they are pushed in, and the bound counts what is queued or being
// written: a message parked while an earlier one is still being applied is
// not held against the client (which goroutine applied its effects first
// is not its doing), and the first message of an empty queue passes
// whatever its size. Answers may take the queue past the bound as far as
// the budget shared by all queues allows (the reader is held meanwhile,
// TestOutboxOverAndBudget: push reports the queue past its bound (what
// arms the stall check) exactly while it is; what it holds past the bound
// is charged to the shared budget and given back as it is written, and
// whole when the queue closes.
func TestOutboxOverAndBudget(t *testing.T) {
	b := &queueBudget{max: 1 << 40}
	q := newOutbox(1000, b)
	check := func(step string, wantUsed int64) {
		t.Helper()
		if got := b.used.Load(); got != wantUsed {
			t.Fatalf("%s: budget used %d, want %d", step, got, wantUsed)
		}
	}
	if _, over := newOutbox(1000, &queueBudget{max: 1 << 40}).push(1, outMsg{msg: make([]byte, 5000)}); over {
		t.Fatal("a large answer alone: reported over")
	}
	if _, over := q.push(1, outMsg{msg: make([]byte, 1000)}); over || q.over() {
		t.Fatal("a queue at its bound: reported over")
	}
	check("at the bound", 0)
	if _, over := q.push(2, outMsg{msg: make([]byte, 500), push: true}); !over || !q.over() {
		t.Fatal("past the bound: not reported over")
	}
	check("past the bound", 500)
	batch := q.take(nil)
	check("taken, not written", 500)
	q.done(batch[0].size(), 0)
	check("the answer written", 0)
	if q.over() {
		t.Fatal("back within the bound: reported over")
	}
	q.done(batch[1].size(), batch[1].size())
	if q.pushes != 0 || q.bytes != 0 {
		t.Fatalf("all written: bytes %d, pushes %d", q.bytes, q.pushes)
	}
	q.push(3, outMsg{msg: make([]byte, 800)})
	q.push(4, outMsg{msg: make([]byte, 800)})
	check("past the bound again", 600)
	q.close()
	check("closed", 0)
	if q.over() {
		t.Fatal("closed: reported over")
	}
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
