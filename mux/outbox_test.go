package mux

import "testing"

// TestOutboxOrderAndBound: messages are queued in their Seq order whatever
// order they are pushed in, and the bound counts what is queued or being
// written: a message parked while an earlier one is still being applied is
// not held against the client (which goroutine applied its effects first
// is not its doing), and the first message of an empty queue passes
// whatever its size.
func TestOutboxOrderAndBound(t *testing.T) {
	const limit = 1000
	type push struct {
		seq  uint64
		size int
		ok   bool
	}
	tests := []struct {
		name    string
		pushes  []push
		written int // messages taken and written before the pushes after the first
		want    []uint64
		closed  bool
	}{
		{"in order", []push{{1, 10, true}, {2, 20, true}, {3, 30, true}}, 0, []uint64{1, 2, 3}, false},
		{"out of order", []push{{3, 30, true}, {1, 10, true}, {2, 20, true}}, 0, []uint64{1, 2, 3}, false},
		{"large first in an empty queue", []push{{1, 5000, true}}, 0, []uint64{1}, false},
		{"large after a small one written", []push{{1, 10, true}, {2, 5000, true}}, 1, []uint64{1, 2}, false},
		{"large parked before a small earlier one", []push{{2, 5000, true}, {1, 10, true}}, 0, []uint64{1, 2}, false},
		{"past the bound in order", []push{{1, 600, true}, {2, 600, false}}, 0, nil, true},
		{"past the bound after a parked large one", []push{{2, 5000, true}, {1, 10, true}, {3, 10, false}}, 0, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := newOutbox(limit)
			for i, p := range tt.pushes {
				if i == 1 && tt.written > 0 {
					for _, m := range q.take(nil) {
						q.done(m.size())
					}
				}
				msg := make([]byte, p.size)
				msg[0] = byte(p.seq)
				if got := q.push(p.seq, outMsg{msg: msg}); got != p.ok {
					t.Fatalf("push %d (%d bytes) = %v, want %v", p.seq, p.size, got, p.ok)
				}
			}
			if q.closed != tt.closed {
				t.Fatalf("closed = %v, want %v", q.closed, tt.closed)
			}
			if tt.closed {
				return
			}
			var got []uint64
			if tt.written > 0 {
				got = append(got, 1)
			}
			for _, m := range q.take(nil) {
				got = append(got, uint64(m.msg[0]))
			}
			if len(got) != len(tt.want) {
				t.Fatalf("queued %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("queued %v, want %v", got, tt.want)
				}
			}
		})
	}
}

// TestOutboxCaughtUp: a session is caught up only once every message up to
// the core's count is queued and written; a parked one counts as pending.
func TestOutboxCaughtUp(t *testing.T) {
	q := newOutbox(1000)
	q.push(2, outMsg{msg: make([]byte, 20)})
	if q.caughtUp(2) || q.pending() != 20 {
		t.Fatalf("with 2 parked: caught up %v, pending %d", q.caughtUp(2), q.pending())
	}
	q.push(1, outMsg{msg: make([]byte, 10)})
	if q.caughtUp(2) {
		t.Fatal("caught up with both queued, none written")
	}
	for _, m := range q.take(nil) {
		q.done(m.size())
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
