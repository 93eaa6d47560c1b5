package router

import "time"

// Views of the tables that only the tests need.

// InFlight is the number of requests in flight for client c.
func (r *Requests) InFlight(c ClientID) int {
	n := 0
	for s := r.perCli[c].head; r.perCli[c].n > 0 && s >= 0; s = r.slots[s].next {
		if r.slots[s].up != nil {
			n += r.slots[s].live
		} else {
			n++
		}
	}
	return n
}

// NextDeadline returns the earliest deadline that may still be pending
// (possibly of a request answered since), or false if there is none.
func (r *Requests) NextDeadline() (time.Time, bool) {
	if r.deadline.len() == 0 {
		return time.Time{}, false
	}
	return r.deadline.peek().at, true
}

// Complete reports whether every expected answer is in.
func (b *Batch) Complete() bool { return b.filled >= b.want }
