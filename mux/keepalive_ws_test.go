package mux

import (
	"testing"
	"time"
)

// TestKeepaliveAlive: what counts as a sign of life from a WebSocket
// client between two checks, the ping's timing aside.
func TestKeepaliveAlive(t *testing.T) {
	const every = time.Second
	tests := []struct {
		name  string
		setup func(k *clientKeepalive)
		want  bool
	}{
		{"silent", func(*clientKeepalive) {}, false},
		{"sent a frame", func(k *clientKeepalive) { k.read() }, true},
		{"took a write", func(k *clientKeepalive) { k.c.writes.Add(1) }, true},
		{"a write under way, begun just now", func(k *clientKeepalive) {
			k.c.writeStarted.Store(time.Now().UnixNano())
		}, true},
		{"a write under way for three intervals", func(k *clientKeepalive) {
			k.c.writeStarted.Store(time.Now().Add(-3 * every).UnixNano())
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := &clientKeepalive{c: &Client{}, every: every}
			k.c.writes.Add(5)
			k.alive() // the check before: the period starts here
			tt.setup(k)
			if got := k.alive(); got != tt.want {
				t.Errorf("alive = %v, want %v", got, tt.want)
			}
			// A sign of life counts for one period only.
			if k.c.writeStarted.Load() == 0 && k.alive() {
				t.Error("alive again in the next period with nothing new")
			}
		})
	}
}
