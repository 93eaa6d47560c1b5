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
package failover
