// Package muxtest holds test helpers that read a running mux.Server from
// outside package mux (the integration tests). It is apart from
// internal/testnode, which package mux's own tests import.
package muxtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/muxd/muxd/internal/testnode"
	"github.com/muxd/muxd/mux"
)

// ActiveUpstream is the index of srv's active upstream, -1 while none is,
// as its status shows: outside package mux the change offers no event.
func ActiveUpstream(srv *mux.Server) int {
	for i, u := range srv.Status().Upstreams {
		if u.Active {
			return i
		}
	}
	return -1
}

// WaitConnected polls srv's status until it has an active upstream (want
// true) or none, failing the test after d.
func WaitConnected(t testing.TB, srv *mux.Server, want bool, d time.Duration) {
	t.Helper()
	testnode.PollWithin(t, fmt.Sprintf("upstream connected to become %v", want), d, func() bool {
		return (ActiveUpstream(srv) >= 0) == want
	})
}
