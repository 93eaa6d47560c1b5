// Package mux is the muxd daemon: it shares one upstream WebSocket to an
// Ethereum JSON-RPC node among many local clients.
//
// A request travels through the package in file order:
//
//   - ingress_ws.go (and ingress_http.go, ingress_ipc.go) accepts a client
//     and runs its session (client.go): one reader goroutine that feeds
//     every frame to the dispatcher, and a writer goroutine, started while
//     there is something to write, that drains the client's bounded
//     outbound queue (outbox.go). Whatever the writer finds queued goes
//     out in one system call (cork.go); buffers.go is how readers and
//     writers reuse their buffers from one message to the next.
//     http_server.go serves the --listen address with every connection
//     bounded in time and, through conn_limit.go, in number.
//   - dispatch.go validates the frame with package router, answers what
//     muxd answers itself (parse errors, invalid requests, policy, limits),
//     splits batches, rewrites each id to a fresh upstream id and records the
//     request in the pending table.
//   - upstream.go owns the shared connection: exactly one goroutine reads it
//     and routes every message in arrival order, restoring the client's id;
//     when the connection is lost its pending table is discarded whole. A
//     large answer is routed by its head and handed to its client in the
//     buffer it was read into, its id spliced in place; the buffer comes
//     back to a pool (buffers.go) once written.
//   - timeouts.go answers requests whose deadline passed.
//   - subscriptions.go is the second routing layer (eth_subscribe).
//   - backfill.go is the thin layer to package gapfill, the pure state
//     machine that makes newHeads and logs subscriptions gap-free: it feeds
//     it pushes, subscribe answers, answers to its own requests, ticks and
//     connection loss, and carries out its effects under Server.mu.
//
// Server.mu guards all routing state (the pending table, the subscription
// table, the client set, the waiting queue). It is never held during I/O:
// writes to the upstream happen after it is released, and what is done for
// a client under it is only ever a non-blocking push onto that client's
// queue, so no client can stall the upstream reader or another client.
package mux
