// Package router is muxd's protocol layer: it scans and validates JSON-RPC
// frames, splices ids, and provides the data structures of the first
// routing layer (the pending table by upstream id, client batches and
// their upstream arrays) and the subscription key.
//
// Nothing in this package does I/O or starts goroutines, and no type in it is
// safe for concurrent use: package core owns the state and its rules, and
// its caller serializes the calls. That keeps every rule here testable
// exhaustively and fast.
//
// Messages are never decoded whole. The scanner walks a frame once, validating
// its JSON syntax and recording where the members that routing needs (id,
// method, params, params.subscription, result, error) sit, as byte spans into
// the frame. Routing then splices a different id into the frame; every other
// byte, results above all, passes through untouched.
package router
