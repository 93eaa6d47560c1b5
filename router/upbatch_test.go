package router

import (
	"fmt"
	"strings"
	"testing"
)

// rearm marks every element as sent in one array and unanswered, for tests
// that route the same answer many times.
func (u *UpstreamBatch) rearm() {
	u.from, u.next, u.owed = 0, len(u.elems), len(u.calls)
	for i := range u.elems {
		u.elems[i].settled = false
	}
}

func TestUpstreamBatch(t *testing.T) {
	call := func(id string) []byte { return []byte(`{"id":` + id + `}`) }
	note := []byte(`{"n":1}`)
	// build makes a batch of calls (ids 1, 2, …) with a notification
	// wherever the layout says "n".
	build := func(layout string) *UpstreamBatch {
		u := new(UpstreamBatch)
		id := uint64(0)
		for _, c := range strings.Split(layout, ",") {
			if c == "n" {
				u.AddNotification(note)
				continue
			}
			id++
			u.AddCall(id, call(c))
		}
		return u
	}
	str := func(frames [][]byte) string {
		var parts []string
		for _, f := range frames {
			parts = append(parts, string(f))
		}
		return strings.Join(parts, " | ")
	}
	for _, tc := range []struct {
		name   string
		layout string
		max    int
		// maxBytes bounds an array's bytes (0: none).
		maxBytes int
		// steps: settle these ids before the next NextArrays; "" sends
		// the first array.
		settle [][]uint64
		want   []string // frames sent at each step
		next   []bool   // Settle's verdict for the last id of each step
	}{
		{
			name: "all in one", layout: "1,n,2,3", max: 0,
			want: []string{`[{"id":1},{"n":1},{"id":2},{"id":3}]`},
		},
		{
			name: "one call alone", layout: "1", max: 0,
			want: []string{`{"id":1}`},
		},
		{
			name: "chunks of two", layout: "1,2,3,4,5", max: 2,
			settle: [][]uint64{{2, 1}, {3, 4}},
			want:   []string{`[{"id":1},{"id":2}]`, `[{"id":3},{"id":4}]`, `{"id":5}`},
			next:   []bool{true, true},
		},
		{
			name: "an answer out of the array in flight changes nothing", layout: "1,2,3", max: 2,
			settle: [][]uint64{{3}, {1, 2}},
			// 3 settled before it was sent: left out, so nothing
			// follows the first array.
			want: []string{`[{"id":1},{"id":2}]`, ``, ``},
			next: []bool{false, true},
		},
		{
			name: "notifications only array is followed at once", layout: "n,n,1,2", max: 2,
			want: []string{`[{"n":1},{"n":1}] | [{"id":1},{"id":2}]`},
		},
		{
			name: "arrays cut at the byte bound", layout: "1,n,2,3", maxBytes: 30,
			settle: [][]uint64{{1, 2}},
			want:   []string{`[{"id":1},{"n":1},{"id":2}]`, `{"id":3}`},
			next:   []bool{true},
		},
		{
			name: "arrays at the byte bound exactly", layout: "1,2,3", maxBytes: 19,
			settle: [][]uint64{{1, 2}},
			want:   []string{`[{"id":1},{"id":2}]`, `{"id":3}`},
			next:   []bool{true},
		},
		{
			name: "the whole batch within the byte bound", layout: "1,2,3", maxBytes: 28,
			want: []string{`[{"id":1},{"id":2},{"id":3}]`},
		},
		{
			name: "an element past the byte bound goes alone", layout: "1,2", maxBytes: 5,
			settle: [][]uint64{{1}},
			want:   []string{`{"id":1}`, `{"id":2}`},
			next:   []bool{true},
		},
		{
			name: "count and byte bounds together", layout: "1,2,3,4,5", max: 2, maxBytes: 19,
			settle: [][]uint64{{1, 2}, {3, 4}},
			want:   []string{`[{"id":1},{"id":2}]`, `[{"id":3},{"id":4}]`, `{"id":5}`},
			next:   []bool{true, true},
		},
		{
			name: "settled while waiting is left out", layout: "1,2,3", max: 0,
			settle: nil,
			want:   []string{`[{"id":1},{"id":2},{"id":3}]`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := build(tc.layout)
			if got := str(u.NextArrays(nil, tc.max, tc.maxBytes)); got != tc.want[0] {
				t.Fatalf("first: %s, want %s", got, tc.want[0])
			}
			for i, ids := range tc.settle {
				var last bool
				for _, id := range ids {
					last = u.Settle(id)
				}
				if last != tc.next[i] {
					t.Errorf("step %d: Settle = %v, want %v", i, last, tc.next[i])
				}
				if got := str(u.NextArrays(nil, tc.max, tc.maxBytes)); got != tc.want[i+1] {
					t.Errorf("step %d: sent %s, want %s", i, got, tc.want[i+1])
				}
			}
		})
	}

	t.Run("settled before sending", func(t *testing.T) {
		u := build("1,2,3")
		u.Settle(2)
		if got := str(u.NextArrays(nil, 0, 0)); got != `[{"id":1},{"id":3}]` {
			t.Errorf("sent %s", got)
		}
		if !u.Sent(3) || u.Sent(9) {
			t.Errorf("Sent(3) = %v, Sent(9) = %v", u.Sent(3), u.Sent(9))
		}
	})

	t.Run("in flight", func(t *testing.T) {
		u := build("n,1,2,3,4")
		u.NextArrays(nil, 3, 0) // n, 1, 2
		if id, calls := u.FirstInFlight(); id != 1 || calls != 2 {
			t.Errorf("FirstInFlight = %d, %d; want 1, 2", id, calls)
		}
		u.Settle(1)
		if got := u.InFlight(nil); len(got) != 1 || got[0] != 2 {
			t.Errorf("InFlight = %v, want [2]", got)
		}
		if u.Sent(3) {
			t.Error("3 is not sent yet")
		}
		if u.Settle(1) {
			t.Error("settling twice counts twice")
		}
		if !u.Settle(2) {
			t.Error("the array in flight is settled whole: the next one is due")
		}
	})
}

// TestUpstreamBatchArena: elements built where Room points make up the
// array without a copy; anything else falls back to building it.
func TestUpstreamBatchArena(t *testing.T) {
	frame := `[{"id":"a"},{"n":1},{"id":"b"}]`
	t.Run("whole batch, no copy", func(t *testing.T) {
		u := NewUpstreamBatch(len(frame), 3, len(frame))
		u.AddCall(1, append(u.Room(), `{"id":1}`...))
		// A refused element leaves nothing behind: it is built in the
		// room and never added.
		_ = append(u.Room(), `{"id":"refused"}`...)
		u.AddNotification(append(u.Room(), `{"n":1}`...))
		u.AddCall(2, append(u.Room(), `{"id":2}`...))
		if id := u.KeepID([]byte(`"a"`)); string(id) != `"a"` {
			t.Fatalf("KeepID = %s", id)
		}
		out := u.NextArrays(nil, 0, 0)
		if len(out) != 1 || string(out[0]) != `[{"id":1},{"n":1},{"id":2}]` {
			t.Fatalf("sent %q", out)
		}
		if &out[0][0] != &u.arena[0] {
			t.Error("the array was copied")
		}
		if u.Settle(1) || u.Settle(2) {
			t.Error("settling the whole array leaves nothing to send")
		}
	})
	t.Run("settled before sending is copied without it", func(t *testing.T) {
		u := NewUpstreamBatch(len(frame), 3, len(frame))
		u.AddCall(1, append(u.Room(), `{"id":1}`...))
		u.AddCall(2, append(u.Room(), `{"id":2}`...))
		u.AddCall(3, append(u.Room(), `{"id":3}`...))
		u.Settle(2)
		if out := u.NextArrays(nil, 0, 0); len(out) != 1 || string(out[0]) != `[{"id":1},{"id":3}]` {
			t.Fatalf("sent %q", out)
		}
	})
	t.Run("an element built elsewhere", func(t *testing.T) {
		u := NewUpstreamBatch(len(frame), 3, len(frame))
		u.AddCall(1, append(u.Room(), `{"id":1}`...))
		u.AddCall(2, []byte(`{"id":2}`))
		u.AddCall(3, append(u.Room(), `{"id":3}`...))
		if out := u.NextArrays(nil, 0, 0); len(out) != 1 || string(out[0]) != `[{"id":1},{"id":2},{"id":3}]` {
			t.Fatalf("sent %q", out)
		}
	})
	t.Run("arena too small", func(t *testing.T) {
		u := NewUpstreamBatch(0, 0, 0) // room for "[" and "]" only
		u.AddCall(1, append(u.Room(), `{"id":1}`...))
		u.AddCall(2, append(u.Room(), `{"id":2}`...))
		if out := u.NextArrays(nil, 0, 0); len(out) != 1 || string(out[0]) != `[{"id":1},{"id":2}]` {
			t.Fatalf("sent %q", out)
		}
	})
	t.Run("chunks", func(t *testing.T) {
		u := NewUpstreamBatch(len(frame), 3, len(frame))
		for id := uint64(1); id <= 3; id++ {
			u.AddCall(id, append(u.Room(), fmt.Sprintf(`{"id":%d}`, id)...))
		}
		if out := u.NextArrays(nil, 2, 0); len(out) != 1 || string(out[0]) != `[{"id":1},{"id":2}]` {
			t.Fatalf("sent %q", out)
		}
	})
}

// TestUpstreamBatchAnswerRoom: the arena is handed out for the answer only
// once every element is sent and every call settled, and an answer that
// outgrows it leaves the clients' ids alone.
func TestUpstreamBatchAnswerRoom(t *testing.T) {
	frame := `[{"id":"a"},{"n":1},{"id":"b"}]`
	u := NewUpstreamBatch(len(frame), 3, 6)
	a := u.KeepID([]byte(`"a"`))
	u.AddCall(1, append(u.Room(), `{"id":1}`...))
	u.AddNotification(append(u.Room(), `{"n":1}`...))
	b := u.KeepID([]byte(`"b"`))
	u.AddCall(2, append(u.Room(), `{"id":2}`...))
	if u.AnswerRoom(1) != nil {
		t.Fatal("room before the array was sent")
	}
	u.NextArrays(nil, 0, 0)
	u.Settle(1)
	if u.AnswerRoom(1) != nil {
		t.Fatal("room with a call unsettled")
	}
	u.Settle(2)
	if u.AnswerRoom(cap(u.arena)+1) != nil {
		t.Fatal("room for more than the arena holds")
	}
	out := u.AnswerRoom(8)
	if out == nil || len(out) != 0 || &out[:1][0] != &u.arena[:1][0] {
		t.Fatal("no room in the arena once everything is settled")
	}
	for range 10 {
		out = append(out, frame...)
	}
	if string(a) != `"a"` || string(b) != `"b"` {
		t.Fatalf("ids overwritten: %s %s", a, b)
	}
}

// The free list hands a batch back clean, and never the memory of an
// answer laid out in a batch's arena (AnswerRoom): that answer is a
// client's until written.
func TestUpstreamBatchesReuse(t *testing.T) {
	var l UpstreamBatches
	frame := func(u *UpstreamBatch, id string) []byte {
		return append(u.Room(), `{"jsonrpc":"2.0","id":`+id+`,"method":"eth_call"}`...)
	}
	a := l.New(200, 2, 4)
	a.AddCall(1, frame(a, "1"))
	a.AddCall(2, frame(a, "2"))
	if got := string(a.NextArrays(nil, 0, 0)[0]); got != `[{"jsonrpc":"2.0","id":1,"method":"eth_call"},{"jsonrpc":"2.0","id":2,"method":"eth_call"}]` {
		t.Fatalf("first batch's array: %s", got)
	}
	a.Settle(1)
	a.Settle(2)
	answer := append(a.AnswerRoom(60), `[{"id":"a"},{"id":"b"}]`...)
	if answer == nil {
		t.Fatal("no answer room in a settled batch")
	}
	l.Put(a)

	b := l.New(200, 1, 4)
	if b != a {
		t.Fatal("New did not reuse the batch put back")
	}
	if b.Len() != 0 || b.Started() || b.slot != 0 {
		t.Fatalf("reused batch not clean: len %d started %v slot %d", b.Len(), b.Started(), b.slot)
	}
	b.AddCall(7, frame(b, "7"))
	if got := string(b.NextArrays(nil, 0, 0)[0]); got != `{"jsonrpc":"2.0","id":7,"method":"eth_call"}` {
		t.Fatalf("reused batch's frame: %s", got)
	}
	if got := string(answer); got != `[{"id":"a"},{"id":"b"}]` {
		t.Fatalf("the answer laid out in the first batch's arena changed to %s", got)
	}

	// A batch too large to keep is not kept.
	big := NewUpstreamBatch(10, maxFreeBatchSize+1, 0)
	l.Put(big)
	if c := l.New(10, 1, 0); c == big {
		t.Fatal("a batch over maxFreeBatchSize was kept")
	}
}
