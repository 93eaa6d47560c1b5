package mux

import (
	"runtime/debug"
	"sync"
	"time"
)

// Memory that muxd lets go of is garbage until the next GC, and returned to
// the operating system only later still, a little at a time: a daemon that
// is idle after a client held 60 MiB of requests, or after a burst of 100 MB
// answers, would keep that RSS for minutes. reclaimer hands large releases
// back at once (debug.FreeOSMemory: a GC and a scavenge), at most once per
// reclaimMinGap, so that a busy daemon never pays for it often.
const (
	// reclaimThreshold is how much must be released, in one go or added
	// up, before a reclaim is worth its GC.
	reclaimThreshold = 32 << 20
	// reclaimDelay lets a burst of releases (a client's requests, then
	// its buffers) end before the reclaim.
	reclaimDelay = 500 * time.Millisecond
	// reclaimMinGap bounds how often a reclaim runs.
	reclaimMinGap = 10 * time.Second
)

// reclaimer counts released bytes and schedules a reclaim past the
// threshold. Any goroutine may call released; the reclaim runs on a timer's
// goroutine, never under a caller's lock.
type reclaimer struct {
	mu      sync.Mutex
	pending int       // bytes released since the last reclaim
	armed   bool      // a reclaim is scheduled
	last    time.Time // when the last one ran
	runs    func()    // counts a run (the metric); nil in tests that do not care
}

// released records n bytes let go of.
func (r *reclaimer) released(n int) {
	if n <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending += n
	if r.armed || r.pending < reclaimThreshold {
		return
	}
	r.armed = true
	wait := reclaimDelay
	if since := time.Since(r.last); since < reclaimMinGap {
		wait = max(wait, reclaimMinGap-since)
	}
	time.AfterFunc(wait, r.run)
}

func (r *reclaimer) run() {
	r.mu.Lock()
	r.pending, r.armed, r.last = 0, false, time.Now()
	r.mu.Unlock()
	debug.FreeOSMemory()
	if r.runs != nil {
		r.runs()
	}
}
