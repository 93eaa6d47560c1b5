package router

// Batch re-assembles the answers to one client batch in the order of the
// client's request elements. Every element that gets an answer (one with
// an id, or an invalid one, answered under id null) has a slot, numbered
// from 0 in request order. Answers are added to their slots as they come,
// from the node, the cache or muxd itself, in whatever order; the array is
// complete when every slot is filled, and is encoded slot by slot.
//
// Order matters to clients although JSON-RPC allows any: ethers 5's
// JsonRpcBatchProvider and web3.js 4's BatchRequest pair answers by
// position, and geth answers a batch in request order.
type Batch struct {
	Client ClientID
	// Subs are client subscription ids created by eth_subscribe elements
	// of the batch; they start receiving pushes once the array is sent.
	Subs   []string
	want   int
	filled int
	parts  [][]byte // by slot; nil until its answer is in
	size   int
}

// NewBatch returns a batch expecting want answers, in slots 0 to want-1.
func NewBatch(c ClientID, want int) *Batch {
	// parts is made on the first Add: a batch answered whole by the
	// node (core's wholeBatch) never needs it.
	return &Batch{Client: c, want: want}
}

// Add records the answer of slot and reports whether it completed the
// batch: it returns true exactly once, so that of several parties adding
// answers exactly one sends the array. A second answer to a filled slot, a
// slot out of range, and answers after the batch completed are ignored.
func (b *Batch) Add(slot int, resp []byte) (completed bool) {
	if b.filled >= b.want || slot < 0 || slot >= b.want {
		return false
	}
	if b.parts == nil {
		b.parts = make([][]byte, b.want)
	}
	if b.parts[slot] != nil {
		return false
	}
	if resp == nil {
		resp = []byte{}
	}
	b.parts[slot] = resp
	b.filled++
	b.size += len(resp) + 1
	return b.filled == b.want
}

// Untouched reports whether no answer has been added yet.
func (b *Batch) Untouched() bool { return b.filled == 0 }

// Close marks the batch complete without its parts, for a caller that
// answered it whole some other way; later answers are ignored.
func (b *Batch) Close() {
	clear(b.parts)
	b.filled, b.want = 0, 0
}

// Want is the number of answers the batch expects in all.
func (b *Batch) Want() int { return b.want }

// Encode returns the JSON array of the answers, in slot order. Call it
// once, when the batch is complete.
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
