package mux

import "github.com/muxd/muxd/internal/testnode"

// The fake upstream these tests run against is the shared fake node; the
// short names keep the tests readable.

// testTimeout bounds every wait in these tests, so that a bug fails a test
// instead of hanging it.
const testTimeout = testnode.Timeout

type (
	fakeUpstream = testnode.Node
	fakeConn     = testnode.Conn
	fakeReq      = testnode.Req
	holder       = testnode.Holder
)

var (
	newFakeUpstream = testnode.New
	newHolder       = testnode.NewHolder
	waitGroup       = testnode.WaitGroup
	echo            = testnode.Echo
	resultFrame     = testnode.ResultFrame
	errorFrame      = testnode.ErrorFrame
	pushFrame       = testnode.PushFrame
	arrayFrame      = testnode.ArrayFrame
	// eventually polls; it is only for muxd's internal state (its tables,
	// its metrics, its sessions), which offers no event to wait on.
	eventually = testnode.Poll
)
