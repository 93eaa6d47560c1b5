package mux

import (
	"sync"
	"time"

	"github.com/muxd/muxd/core"
)

// fanoutHandoff is the most deliveries the upstream reader applies itself.
// An event with more (a push to many subscribers) is handed to the fan-out
// goroutine, so that the reader goes on to the next frame, often an answer
// someone is waiting for, instead of queueing thousands of pushes first.
// Each client still gets everything in the core's order (Delivery.Seq).
const fanoutHandoff = 64

// fanoutQueue bounds the events waiting for the fan-out goroutine; past
// it the reader waits, as it would applying them itself. It is small: a
// subscriber's answers queue behind its pushes (a client gets everything
// in the order the node sent it), so a long backlog of fan-outs would
// delay them.
const fanoutQueue = 2

// fanoutJob is one event's effects, applied by the fan-out goroutine.
// buf is the frame buffer its deliveries borrow from: the job owns it.
type fanoutJob struct {
	eff *core.Effects
	up  *upstreamConn
	buf []byte
	// pushRead is when the push it fans out was read (zero: not a push),
	// for muxd_push_delivery_lag_seconds.
	pushRead time.Time
}

// fanouts is the hand-off from the upstream reader to the fan-out
// goroutine. The reader sends; fanoutLoop receives.
type fanouts struct {
	jobs  chan fanoutJob
	spare sync.Pool // of *core.Effects
}

// startFanout runs the fan-out goroutine until stop is called, which
// waits for the jobs queued to be applied.
func (s *Server) startFanout() (stop func()) {
	s.fanout.jobs = make(chan fanoutJob, fanoutQueue)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for j := range s.fanout.jobs {
			if !s.apply(j.eff, j.up, j.buf) {
				s.frames.put(j.buf)
			}
			s.pushDelivered(j.pushRead)
			j.eff.Reset() // let go of what it referenced
			s.fanout.spare.Put(j.eff)
		}
	}()
	return func() {
		close(s.fanout.jobs)
		<-done
	}
}

// handOff gives the reader's effects, when they hold many deliveries, to
// the fan-out goroutine, with buf, and gives the reader a fresh Effects.
// It reports whether it did; the reader then no longer owns buf.
func (s *Server) handOff(u, cur *upstreamConn, buf []byte, pushRead time.Time) bool {
	if len(u.eff.Deliveries) <= fanoutHandoff || s.fanout.jobs == nil {
		return false
	}
	next, _ := s.fanout.spare.Get().(*core.Effects)
	if next == nil {
		next = new(core.Effects)
	}
	s.fanout.jobs <- fanoutJob{u.eff, cur, buf, pushRead}
	u.eff = next
	return true
}
