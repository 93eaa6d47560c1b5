package core

import (
	"errors"
	"testing"
)

// TestAccessors covers what the shell asks of the core between events.
func TestAccessors(t *testing.T) {
	h := newHarness(t, nil)
	id := h.join(false)
	if h.c.Connected() {
		t.Error("Connected before any connection")
	}
	frame := req("1", "eth_call")
	h.clientFrame(id, frame)
	if inflight, seq := h.c.Owed(id); inflight != 1 || seq != 0 {
		t.Errorf("Owed = %d, %d; want 1, 0", inflight, seq)
	}
	// What a request holds is its upstream frame: its bytes with upstream
	// id 1 in place of the client's 1.
	if got := h.c.Held(id); got != len(frame) {
		t.Errorf("Held = %d, want %d", got, len(frame))
	}
	h.connect()
	if !h.c.Connected() {
		t.Error("not Connected after UpstreamConnected")
	}
	h.upstreamFrame(0, res("1", "1"), false)
	if inflight, seq := h.c.Owed(id); inflight != 0 || seq != 1 {
		t.Errorf("Owed = %d, %d; want 0, 1", inflight, seq)
	}
	if h.c.Held(id) != 0 {
		t.Errorf("Held = %d after the answer, want 0", h.c.Held(id))
	}
	if inflight, seq := h.c.Owed(99); inflight != 0 || seq != 0 || h.c.Held(99) != 0 {
		t.Error("Owed/Held of an unknown client are not zero")
	}
	if _, err := h.c.Join(false); err != nil {
		t.Fatal(err)
	}
	if !h.c.BeginShutdown() {
		t.Error("BeginShutdown not idle with nothing owed")
	}
	if _, err := h.c.Join(false); !errors.Is(err, ErrClosed) {
		t.Errorf("Join after BeginShutdown: %v, want ErrClosed", err)
	}
}
