package testnode

import (
	"sync"
	"testing"
	"time"
)

// Timeout bounds every wait in the tests, so that a bug fails a test
// instead of hanging it.
const Timeout = 15 * time.Second

// Connector is what WaitConnected watches: mux.Server's Connected, which
// returns the upstream state and a channel closed when it next changes.
type Connector interface {
	Connected() (bool, <-chan struct{})
}

// WaitConnected waits until srv's upstream state is want, failing the
// test after Timeout. It waits on srv's change channel, never by sleeping.
func WaitConnected(t testing.TB, srv Connector, want bool) {
	t.Helper()
	WaitConnectedWithin(t, srv, want, Timeout)
}

// WaitConnectedWithin is WaitConnected with a deadline of d instead of
// Timeout, for a real node that takes longer to start.
func WaitConnectedWithin(t testing.TB, srv Connector, want bool, d time.Duration) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		up, ch := srv.Connected()
		if up == want {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("upstream connected never became %v in %v", want, d)
		}
	}
}

// WaitGroup waits for wg, failing the test if it takes longer than
// Timeout.
func WaitGroup(t testing.TB, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(Timeout):
		t.Errorf("%s did not finish", what)
	}
}

// Poll checks cond every millisecond until it holds, failing the test
// after Timeout. It is only for state that offers no event to wait on
// (a server's internal tables, a metric, a log written by another
// process); whatever has an event waits on it instead.
func Poll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
