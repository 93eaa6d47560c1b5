package router

// Batch re-assembles the answers to one client batch. Each id-bearing
// element is sent upstream on its own; its answer (or muxd's own error for
// it) is added here as it comes, in whatever order, and the array is
// complete when every expected answer is in.
type Batch struct {
	Client ClientID
	// Subs are client subscription ids created by eth_subscribe elements
	// of the batch; they start receiving pushes once the array is sent.
	Subs  []string
	want  int
	parts [][]byte
	size  int
}

// NewBatch returns a batch expecting want answers.
func NewBatch(c ClientID, want int) *Batch {
	// parts is made on the first Add: a batch answered whole by the
	// node (core's wholeBatch) never needs it.
	return &Batch{Client: c, want: want}
}

// Add records one answer and reports whether this answer completed the
// batch: it returns true exactly once, so that of several parties adding
// answers exactly one sends the array. Answers beyond the expected count are
// ignored.
func (b *Batch) Add(resp []byte) (completed bool) {
	if len(b.parts) >= b.want {
		return false
	}
	if b.parts == nil {
		b.parts = make([][]byte, 0, b.want)
	}
	b.parts = append(b.parts, resp)
	b.size += len(resp) + 1
	return len(b.parts) == b.want
}

// Untouched reports whether no answer has been added yet.
func (b *Batch) Untouched() bool { return len(b.parts) == 0 }

// Close marks the batch complete without its parts, for a caller that
// answered it whole some other way; later answers are ignored.
func (b *Batch) Close() {
	b.parts = b.parts[:0]
	b.want = 0
}

// Want is the number of answers the batch expects in all.
func (b *Batch) Want() int { return b.want }

// Encode returns the JSON array of the answers. Call it once, when the
// batch is complete.
func (b *Batch) Encode() []byte {
	out := make([]byte, 0, b.size+2)
	out = append(out, '[')
	for i, p := range b.parts {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, p...)
	}
	// Let the answers go, but keep the count: an answer that still comes
	// must be ignored, not start a second array.
	clear(b.parts)
	return append(out, ']')
}
