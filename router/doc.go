// Package router is the protocol brain of muxd: it scans and validates JSON-RPC
// frames, splices ids, and keeps the two routing tables (pending requests by
// upstream id, subscriptions by subscription id).
//
// Nothing in this package does I/O or starts goroutines, and no type in it is
// safe for concurrent use: the caller (package mux) owns the state and guards
// it. That keeps every rule here testable exhaustively and fast.
//
// Messages are never decoded whole. The scanner walks a frame once, validating
// its JSON syntax and recording where the members that routing needs (id,
// method, params, params.subscription, result, error) sit, as byte spans into
// the frame. Routing then splices a different id into the frame; every other
// byte, results above all, passes through untouched.
package router
