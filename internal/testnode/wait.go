package testnode

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// Timeout bounds every wait in the tests, so that a bug fails a test
// instead of hanging it.
const Timeout = 15 * time.Second

// Connector is what WaitConnected watches: mux.Server's Connected (in
// package mux's own tests, export_test.go), which returns the upstream
// state and a channel closed when it next changes. From outside package
// mux, where that state offers no event, poll mux.Server.Status instead
// (PollWithin).
type Connector interface {
	Connected() (bool, <-chan struct{})
}

// Await waits until state reports done, failing the test with what after
// Timeout. state returns whether the wait is over and, when it is not, a
// channel closed on the next change (read in the same step, so that no
// change is missed); Await never sleeps.
func Await(t testing.TB, what string, state func() (done bool, changed <-chan struct{})) {
	t.Helper()
	AwaitWithin(t, what, Timeout, state)
}

// AwaitWithin is Await with a deadline of d instead of Timeout.
func AwaitWithin(t testing.TB, what string, d time.Duration, state func() (done bool, changed <-chan struct{})) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		done, ch := state()
		if done {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
	}
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
	AwaitWithin(t, fmt.Sprintf("upstream connected to become %v", want), d, func() (bool, <-chan struct{}) {
		up, ch := srv.Connected()
		return up == want, ch
	})
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
	PollWithin(t, what, Timeout, cond)
}

// PollWithin is Poll with a deadline of d instead of Timeout.
func PollWithin(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
