package chaos

import (
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stallMeter measures how long this test process was starved: ready to
// run but given no CPU. muxd runs in this process, so while the process is
// starved (the machine busy with other test packages, a geth) muxd's
// deadline sweeper, its writers and the clients' readers all stand still
// alike. TestChaos's lateness checks give a request that time back: a
// request is late when it stays unanswered for requestTimeout+slack of
// time the process could run.
//
// A goroutine wakes every period. A wake later than period+stallThreshold
// is credited its delay past period in the proportion the process did
// not get the CPUs it may use (GOMAXPROCS) since the last wake, from its
// CPU time (getrusage): a process kept busy by its own goroutines, muxd
// and the 200 clients, is late by its own doing and gets nothing back; a
// process that got no CPU at all gets the whole delay. So a muxd that
// answers late while the process has its CPUs (a sweeper that does not
// fire, a writer held by another client, or muxd grown costly enough to
// saturate them) is still caught. Jitter below stallThreshold is never
// counted.
type stallMeter struct {
	period time.Duration
	procs  int // CPUs the process may use at once

	mu      sync.Mutex
	last    time.Time     // the meter's last wake
	lastCPU time.Duration // the process's CPU time then
	stalled time.Duration // credited so far
}

// stallThreshold is how much later than due a wake must be to count. A
// 10 ms ticker on a loaded 2-core box under -race wakes within a few ms.
const stallThreshold = 50 * time.Millisecond

// startStallMeter runs a meter until the test ends.
func startStallMeter(t *testing.T, period time.Duration) *stallMeter {
	m := &stallMeter{period: period, procs: min(runtime.GOMAXPROCS(0), runtime.NumCPU()), last: time.Now(), lastCPU: processCPU()}
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
				m.observe(time.Now(), processCPU())
			}
		}
	}()
	return m
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	// RUSAGE_SELF into a valid Rusage: getrusage has no way to fail.
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// observe records a wake of the meter at now, with the process's CPU time
// cpu.
func (m *stallMeter) observe(now time.Time, cpu time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stalled += m.overdue(now, cpu)
	m.last, m.lastCPU = now, cpu
}

// overdue is what a wake at now, with CPU time cpu, credits. m.mu is held.
func (m *stallMeter) overdue(now time.Time, cpu time.Duration) time.Duration {
	elapsed := now.Sub(m.last)
	late := elapsed - m.period
	if late <= stallThreshold {
		return 0
	}
	could := elapsed * time.Duration(m.procs)
	used := max(0, min(cpu-m.lastCPU, could))
	// late × (could-used)/could, in floating point: could may be
	// seconds × procs in nanoseconds, and late as much again.
	return time.Duration(float64(late) * float64(could-used) / float64(could))
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
	now, cpu := time.Now(), processCPU()
	m.mu.Lock()
	defer m.mu.Unlock()
	return stamp{at: now, stalled: m.stalled + m.overdue(now, cpu)}
}

// ran is the time from s to now that the process could run.
func (now stamp) ran(s stamp) time.Duration {
	return now.at.Sub(s.at) - (now.stalled - s.stalled)
}

func TestStallMeterCreditsStarvedTime(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	ms := time.Millisecond
	type wake struct{ at, cpu time.Duration } // offsets from t0; the process's CPU time
	for _, tc := range []struct {
		name  string
		wakes []wake
		want  time.Duration
	}{
		{"on time", []wake{{10 * ms, 20 * ms}, {20 * ms, 40 * ms}, {30 * ms, 60 * ms}}, 0},
		{"jitter under the threshold, no CPU", []wake{{12 * ms, 0}, {29 * ms, 0}, {80 * ms, 0}}, 0},
		{"starved: no CPU while late", []wake{{10 * ms, 20 * ms}, {1510 * ms, 20 * ms}}, 1490 * ms},
		{"busy with its own work: both CPUs used", []wake{{10 * ms, 20 * ms}, {1510 * ms, 3020 * ms}}, 0},
		{"half starved: one CPU of two", []wake{{1000 * ms, 1000 * ms}}, 495 * ms},
		{"two stalls, starved", []wake{{300 * ms, 0}, {310 * ms, 0}, {1000 * ms, 0}}, 290*ms + 680*ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &stallMeter{period: 10 * ms, procs: 2, last: t0}
			for _, w := range tc.wakes {
				m.observe(t0.Add(w.at), w.cpu)
			}
			if d := m.stalled - tc.want; d < -time.Microsecond || d > time.Microsecond {
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
