package mux

import (
	"testing"
	"time"

	"github.com/muxd/muxd/core"
)

// TestLineLimiter: one line per kind per second; the next line let through
// says how many were left out; kinds are limited apart.
func TestLineLimiter(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	ms := time.Millisecond
	const a, b = core.LimitedSubscriptionRefused, core.NotLimited // two kinds
	var l lineLimiter[core.LimitedNote]
	for i, c := range []struct {
		kind       core.LimitedNote
		at         time.Duration
		ok         bool
		suppressed int
	}{
		{a, 0, true, 0},
		{a, 1 * ms, false, 0},
		{b, 2 * ms, true, 0}, // another kind: its own budget
		{a, 999 * ms, false, 0},
		{a, 1000 * ms, true, 2},
		{a, 1500 * ms, false, 0},
		{b, 1500 * ms, true, 0},
		{a, 5000 * ms, true, 1},
		{a, 6000 * ms, true, 0},
	} {
		ok, suppressed := l.allow(c.kind, t0.Add(c.at))
		if ok != c.ok || suppressed != c.suppressed {
			t.Errorf("line %d (kind %d at %v): allow = %v, %d; want %v, %d", i, c.kind, c.at, ok, suppressed, c.ok, c.suppressed)
		}
	}
}
