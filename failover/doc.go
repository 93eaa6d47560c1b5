// Package failover decides which of several upstream nodes is active: the
// one that carries client traffic and client subscriptions.
//
// It is a pure state machine (sans I/O): no goroutines, no locks, no
// sockets and no clock. Its caller (the shell that owns the connections)
// reports what happened to each upstream, with the time it happened, and
// asks for a decision after every event and on a tick (about once a
// second):
//
//   - Connected(i): upstream i's connection is up. It is a new
//     connection: the chain id and head of any earlier one are forgotten.
//   - ChainID(i, id): i answered eth_chainId.
//   - Head(i, n): i pushed a newHeads head numbered n.
//   - HeadsUnknown(i): i's connection will push no heads.
//   - Lost(i): i's connection is gone, or the shell is draining it.
//   - Decide: returns a Switch when the active upstream must change. The
//     caller makes Switch.To active (To is -1 when the active was lost and
//     no upstream is eligible).
//
// Upstreams are named by index, 0 the most preferred. Rules:
//
//   - The reference chain id is the first one any upstream reports. Ids
//     are compared as hex quantities ("0x01" equals "0x1"; a JSON string's
//     quotes are allowed); an id that is not a hex quantity never matches.
//     An upstream whose id differs (ChainID returns false) is never
//     eligible while that connection lasts.
//   - eligible(i): connected, and its chain id was reported and matches the
//     reference. With a single upstream no chain id is needed: eligible is
//     connected.
//   - stalled(i): now - max(its last head's time, its connection time) >
//     Config.HeadTimeout. A new connection has HeadTimeout to push a head.
//   - best: the highest head among the eligible upstreams that reported
//     one. lagging(i): i has a head and best - head > Config.MaxHeadLag,
//     and has had since Config.LagGrace ago (evaluations track when it
//     fell behind; catching up resets it).
//   - healthy(i): eligible, not stalled and not lagging. With a single
//     upstream there is no chain id to compare and no other head to lag
//     behind: healthy is connected and not stalled. It is active whenever
//     it is connected, healthy or not (better a slow node than none);
//     /readyz follows healthy. HeadsUnknown(i) says a connection will show
//     no heads (the node refused the shell's newHeads subscription): a
//     single upstream is then healthy while connected; one of several
//     stalls as any upstream without heads does.
//   - healthySince(i): when i was last seen becoming healthy. Health is
//     evaluated at every event (just before applying it, at the event's
//     time, and just after) and at every Decide, and any evaluation that
//     finds i unhealthy or disconnected restarts it.
//   - choose(): among the healthy upstreams, the most preferred one at the
//     best head: it has no head yet (the benefit of the doubt, for at most
//     HeadTimeout) or its head is the highest head among the healthy. If
//     none is healthy: the most preferred eligible one (better a slow node
//     than none). If none is eligible: -1.
//
// Decide, in order:
//
//  1. No active: choose(); a result >= 0 is a Switch with reason first, or
//     lost when the last active was lost with nothing to replace it. At
//     start (no upstream ever active), for Config.StartWait from the first
//     event, the result waits while a more preferred upstream has not been
//     tried: its chain id judged, its connection lost, or a dial failed
//     (Unreachable).
//  2. The active is not eligible (lost, chain id mismatch): choose(),
//     reason lost. To may be -1.
//  3. The active is stalled or lagging and another upstream is healthy:
//     choose() (which then picks a healthy one), reason stalled (when
//     stalled) or lagging. If none is healthy the active stays.
//  4. The active is healthy: fail back when Config.FailbackAfter > 0 and
//     the most preferred healthy upstream p is more preferred than the
//     active, has been healthy for at least FailbackAfter without a break,
//     and both have a head with p's >= the active's, so a block a client
//     saw in newHeads can be read on p. Reason failback.
//
// A Switch never has From == To, and a Decide right after a Switch, at the
// same time, returns none: the decision is stable.
//
// A preferred upstream that keeps dropping (or falling behind, or
// stalling) never gets the traffic back: each break restarts its
// healthySince, and failback needs FailbackAfter of unbroken health.
//
// Switches to -1 and back count one failover, not two: a shell that counts
// failovers by reason should count only switches whose To is >= 0.
//
// Out-of-range indexes and events for an upstream that is not connected
// (Head, ChainID) are ignored. A Selector is not safe for concurrent use;
// its owner serializes the calls.
//
// # The upstream set
//
// Upstreams wraps the Selector of the list in force (a List; a reload
// brings another, Use) into the owner of every upstream connection, in the
// manner of raft's single Step: each event changes its state and fills an
// Effects, and it drives the core (Core: package core's upstream events).
// Its rules:
//
//   - Connected: a new Conn. Its health requests go in Effects.Send: with
//     more than one upstream eth_chainId (HealthChainID) and the newHeads
//     subscription (HealthHeadsID); with one, the subscription alone, or
//     nothing when ListConfig.WatchHeads is off (the upstream is then
//     HeadsUnknown).
//   - Frame: a lone, valid message of the frame that is muxd's own is
//     taken: an answer under ProbeID (keepalive's; nothing to do), under
//     HealthChainID (ChainID; a mismatch sets Effects.ChainMismatch and
//     notes an error), under HealthHeadsID (the subscription's id; an
//     error makes the connection HeadsUnknown), or a push of that
//     subscription (a head, see below). The health ids are taken only
//     where the list watches heads. Anything else is the core's
//     (core.UpstreamFrame), and a head the core routed to clients from the
//     active connection (core.Effects.Head) is a head of that connection.
//   - Heads: a connection's head comes from two streams, its health
//     subscription and the heads routed to clients, which a node pushes
//     each on its own. A head is taken when above the last taken, or below
//     the last of its own stream (that stream went back: a reorg to a
//     shorter branch, which the Selector takes as it is); one at or below
//     the last that its stream has not gone back from is the other
//     stream's late copy. Nothing of a demoted connection, or of one its
//     upstream replaced, is taken.
//   - Decide after every event the Selector saw (and on Tick, with more
//     than one upstream): a Switch to an upstream whose connection is up
//     gives that Conn the core's next number (Gen) and makes it active:
//     core.UpstreamConnected when none was, else core.UpstreamSwitch, the
//     old one demoted (Lost to its selector: it drains and is closed, then
//     dialled again as a standby). The switch is Counted as a failover when
//     another upstream of the same list takes over from the one last
//     active; Use starts a new count (the move to a new list is none).
//     After Stop nothing is made active.
//   - Lost: the Conn is gone; when it ever was active the core loses it
//     (core.UpstreamLost).
//   - TooLarge: an answer past the shell's read limit is the core's event
//     (core.UpstreamTooLarge) on that connection.
//
// Upstream request ids are one namespace: see Owner.
package failover
