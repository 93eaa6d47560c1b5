// Package mux is the muxd daemon: it shares one upstream WebSocket to an
// Ethereum JSON-RPC node among many local clients. It is the shell around
// package core, the sans-I/O state machine that holds every routing rule and
// table: mux owns the sockets, goroutines and queues, and nothing else.
//
// A request travels through the package in file order:
//
//   - ingress_ws.go (and ingress_http.go, ingress_ipc.go) accepts a client
//     and runs its session (client.go): one reader goroutine that feeds
//     every frame to dispatch, and a writer goroutine, started while there
//     is something to write, that drains the client's bounded outbound
//     queue (outbox.go). Whatever the writer finds queued goes out in one
//     system call (cork.go); buffers.go is how readers and writers reuse
//     their buffers from one message to the next. http_server.go serves the
//     --listen address with every connection bounded in time and, through
//     conn_limit.go, in number.
//   - dispatch.go scans the frame (package router) and hands it to the core
//     (core.ClientFrame), which answers what muxd answers itself, rewrites
//     each id to a fresh upstream id, records the request in the pending
//     table and says which frames go upstream.
//   - upstream.go owns the shared connection: exactly one goroutine reads
//     it, scans each message and hands it, in arrival order, to the
//     upstream set (failover.Upstreams.Frame): that takes muxd's own
//     messages (health answers and pushes, keepalive's probe answer) and
//     gives the rest to the core (core.UpstreamFrame), which finds the
//     pending request or the subscription and says which clients get what.
//     An answer past the read limit is a core event of its own
//     (core.UpstreamTooLarge). When the connection is lost the core
//     discards its pending table whole.
//   - failover.go runs one such connection per configured upstream, each
//     with its own supervisor, and shows their gauges; failover.Upstreams
//     picks the active one from their health (chain id, heads) and moves
//     the traffic in the core when it changes (core.UpstreamSwitch). With
//     one upstream it is simply active whenever connected.
//   - apply.go carries out what the core decided (core.Effects): answers
//     get their client's id spliced in, a large answer is handed to its
//     client in the buffer it was read into (buffers.go's framePool), a
//     push fanned out is copied once and each subscriber's writer splices
//     its own subscription id in, a whole batch's answer comes back in the
//     buffer its request array was laid out in, which returns to
//     arenas.go's pool once written; frames for the node are copied into
//     the connection's send queue (upstream_send.go), whose one writer
//     goroutine, started while there is something to write, writes them
//     in the order they queued; notes are logged.
//   - timeouts.go ticks the core's clock (deadlines, backfill timers),
//     and while requests wait for an upstream hurries the dials of those
//     not connected (failover.go's hurryDialsLocked); each dial's outcome
//     goes to the core (dialFailed, dialReached).
//
// Locking: Server.mu is held around each core call (or call of
// failover.Upstreams, which makes the core's upstream events) and nothing
// else: no copy, splice, system call or log line happens under it; notes
// are collected in effects and logged after it is released. Each client's
// outbox has its own lock and queues deliveries in the core's order
// (core.Delivery.Seq), whichever goroutine applies them. The session map
// for deliveries (Server.peers) has its own read-mostly lock. docs/DESIGN.md
// §6 lists every goroutine, what it owns, which lock guards what, and the
// lock order.
package mux
