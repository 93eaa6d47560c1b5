// Package testnode is the test kit shared by muxd's tests: one scriptable
// fake Ethereum JSON-RPC WebSocket node ([Node]), a request holder that
// lets a test answer requests when it chooses ([Holder]), frame builders,
// a log buffer safe for concurrent writers ([LockedBuffer]) and the waits
// the tests share ([WaitConnected], [WaitGroup], [Poll]).
//
// It is an ordinary package under internal/ so that test files of every
// package (mux, cmd/muxd, integration/...) can import it; production code
// must not. Every wait is bounded by [Timeout] and waits on an event (a
// channel closed on change), except [Poll] and [PollWithin], which are for
// state that offers no event (a mux.Server's upstream seen from outside
// package mux: its Status).
//
// Concurrency: a Node's state is guarded by its mutex; every exported
// method is safe for concurrent use. Handlers run on the connection's
// reader goroutine, one message at a time, in arrival order.
package testnode
