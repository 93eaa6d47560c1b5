package chaos

import (
	"sync"
	"testing"
	"time"
)

// stallMeter measures how long this test process could not run its
// goroutines when due: a goroutine wakes every period, and a wake later
// than period+stallThreshold adds its whole delay past period to the
// stalled total. muxd runs in this process, so while the process is
// starved (the machine busy with other test packages, a geth, a long
// stop-the-world pause) muxd's deadline sweeper, its writers and the
// clients' readers all stand still alike. TestChaos's lateness checks give
// a request that time back: a request is late when it stays unanswered for
// requestTimeout+slack of time the process could run. A muxd that answers
// late while the process runs freely (a sweeper that does not fire, a
// writer held by another client) is still caught, because the meter's own
// goroutine keeps waking on time then.
//
// Jitter below stallThreshold is not counted, so a run on a quiet machine
// measures zero and the check is exactly requestTimeout+slack.
type stallMeter struct {
	period time.Duration

	mu      sync.Mutex
	last    time.Time     // the meter's last wake
	stalled time.Duration // total delay of late wakes past period
}

// stallThreshold is how much later than due a wake must be to count. A
// 10 ms ticker on a loaded 2-core box under -race wakes within a few ms.
const stallThreshold = 50 * time.Millisecond

// startStallMeter runs a meter until the test ends.
func startStallMeter(t *testing.T, period time.Duration) *stallMeter {
	m := &stallMeter{period: period, last: time.Now()}
	done := make(chan struct{})
	stopped := make(chan struct{})
	t.Cleanup(func() { close(done); <-stopped })
	go func() {
		defer close(stopped)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				// Not the tick's time, which is when it was due: when
				// this goroutine got to run.
				m.observe(time.Now())
			}
		}
	}()
	return m
}

// observe records a wake of the meter at now.
func (m *stallMeter) observe(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stalled += m.overdue(now)
	m.last = now
}

// overdue is how much of now-last counts as stalled. m.mu is held.
func (m *stallMeter) overdue(now time.Time) time.Duration {
	if late := now.Sub(m.last) - m.period; late > stallThreshold {
		return late
	}
	return 0
}

// stamp is a moment with the stalled total at it.
type stamp struct {
	at      time.Time
	stalled time.Duration
}

// now returns the current moment. It counts a stall still under way (the
// meter not yet awake again) as well, so a checker that wakes after a
// stall before the meter does sees it.
func (m *stallMeter) now() stamp {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	return stamp{at: now, stalled: m.stalled + m.overdue(now)}
}

// ran is the time from s to now that the process could run.
func (now stamp) ran(s stamp) time.Duration {
	return now.at.Sub(s.at) - (now.stalled - s.stalled)
}

func TestStallMeterCountsOnlyLateWakes(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	ms := time.Millisecond
	for _, tc := range []struct {
		name  string
		wakes []time.Duration // offsets from t0 of the meter's wakes
		want  time.Duration
	}{
		{"on time", []time.Duration{10 * ms, 20 * ms, 30 * ms}, 0},
		{"jitter under the threshold", []time.Duration{12 * ms, 29 * ms, 80 * ms}, 0},
		{"one stall", []time.Duration{10 * ms, 1510 * ms, 1520 * ms}, 1490 * ms},
		{"two stalls", []time.Duration{300 * ms, 310 * ms, 1000 * ms}, 290*ms + 680*ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &stallMeter{period: 10 * ms, last: t0}
			for _, w := range tc.wakes {
				m.observe(t0.Add(w))
			}
			if m.stalled != tc.want {
				t.Errorf("stalled %v, want %v", m.stalled, tc.want)
			}
		})
	}
}

func TestStampRanDiscountsStalls(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	sent := stamp{at: t0, stalled: 200 * time.Millisecond}
	now := stamp{at: t0.Add(5 * time.Second), stalled: 1700 * time.Millisecond}
	if got, want := now.ran(sent), 3500*time.Millisecond; got != want {
		t.Errorf("ran %v, want %v", got, want)
	}
}
