// Package core is muxd's routing core: every rule of the design (docs/
// DESIGN.md sections 1-5) as one state machine that takes events and returns
// effects, with no goroutines, no locks, no I/O and no clock of its own.
// Package mux is its shell: the sockets, goroutines and queues around it.
//
// The shape follows etcd-io/raft's Ready and quinn-proto: the caller feeds
// an event with the time it happened, the core changes its state, and the
// caller carries out what the core asks for (Effects). Events:
//
//   - Join, ClientGone: a session starts or ends.
//   - ClientFrame: a frame from a client, already scanned by
//     router.ScanClient (scanning needs no state, so the shell does it
//     outside its lock). Refuse: a frame the shell refused unscanned.
//   - UpstreamConnected, UpstreamFrame, UpstreamLost: the shared connection
//     comes, speaks (frames scanned by router.ScanUpstream, or
//     router.ScanResponseHead for a large answer), and goes.
//   - Tick: time passes (deadlines, waits for an upstream, backfill timers).
//   - Dialing, DialsFailed: a dial reaches a node, or every node not
//     connected has refused one: what a request waiting for an upstream
//     past UpstreamWait waits on (waiting.go).
//   - BeginShutdown, Shutdown: stop taking sessions; answer what is owed,
//     and from Shutdown on answer every request at once, forwarding none.
//
// Effects are deliveries to clients, each numbered in its client's
// sequence (Delivery.Seq), so that the effects of events applied by
// different goroutines still reach a client in the order the core decided;
// clients to cut as slow consumers; frames to write upstream; notes to log.
// Counters go through an Observer. A delivery may borrow from the event's
// frame, and a push fanned out to many subscribers is one shared message
// plus each holder's id: the copy and the splice are the shell's (or each
// client's writer's) to make, outside any lock.
//
// What the core owns: the pending table of the current upstream connection
// (router.Requests) and the upstream arrays of client batches
// (router.UpstreamBatch), the waiting queue (waiting.go), open batches
// (router.Batch), each client's counts and limits, the subscription table
// and its per-key state machine (subtable.go), and the gap-free
// subscription machine (package gapfill, glued in by backfill.go).
//
// Files: core.go (the Core, its clients, Stats), effects.go (Effects,
// Delivery, Observer), client_frame.go (admission: validation, policy,
// limits, id rewriting, batches), upstream_frame.go (layer 1: responses,
// upstream arrays), subscriptions.go and subtable.go (layer 2),
// connection.go (connect and loss), clock.go (Tick, ClientGone, shutdown),
// waiting.go, backfill.go, policy.go, methods.go, drops.go, coalesce.go,
// cache.go, heads.go (the head view), finalized.go (the node's finalized
// block, for the cache), fairshare.go (the bound on client calls at the
// node and its fair shares, ordered by package fairq), names.go (named
// clients' shares and limits).
//
// A Core is not safe for concurrent use: the shell makes one call at a time
// (mux holds Server.mu around each) and applies the effects after.
// TestSansIO keeps the package, router and gapfill free of goroutines,
// locks, I/O and clock reads.
package core
