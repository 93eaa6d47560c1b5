package testnode

import (
	"fmt"
	"sync"
	"testing"
)

// Holder is a Node handler that holds the requests of chosen methods
// unanswered until the test takes them (and answers them, or not); every
// other message gets the default answer. Install it with
// node.SetHandler(h.Handle).
type Holder struct {
	mu       sync.Mutex
	methods  map[string]bool
	held     []Held
	changed  chan struct{} // closed and replaced when a request is held
	released bool          // Release was called: nothing is held any more
}

// Held is one request a Holder holds and the connection it came on.
type Held struct {
	Conn *Conn
	Req  Req
}

// NewHolder returns a Holder for methods.
func NewHolder(methods ...string) *Holder {
	h := &Holder{methods: map[string]bool{}, changed: make(chan struct{})}
	for _, m := range methods {
		h.methods[m] = true
	}
	return h
}

// Handle is the Node handler.
func (h *Holder) Handle(fc *Conn, r Req) {
	h.mu.Lock()
	if h.methods[r.Method] && !h.released {
		h.held = append(h.held, Held{fc, r})
		close(h.changed)
		h.changed = make(chan struct{})
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	fc.Answer(r)
}

// TakeN waits until at least n requests are held, then takes them all, in
// arrival order.
func (h *Holder) TakeN(t testing.TB, n int) []Held {
	t.Helper()
	var out []Held
	Await(t, fmt.Sprintf("%d held requests", n), func() (bool, <-chan struct{}) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(h.held) < n {
			return false, h.changed
		}
		out, h.held = h.held, nil
		return true, nil
	})
	return out
}

// Take returns what is held and forgets it.
func (h *Holder) Take() []Held {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.held
	h.held = nil
	return out
}

// Release answers what is held with the default answer and holds nothing
// from then on.
func (h *Holder) Release() {
	h.mu.Lock()
	h.released = true
	held := h.held
	h.held = nil
	h.mu.Unlock()
	for _, l := range held {
		l.Conn.Answer(l.Req)
	}
}
