// Package gapfill makes subscriptions gap-free: every head and every
// matching log reaches a subscription key exactly once, in chain order,
// across upstream reconnects, node catch-up jumps and reorgs.
//
// It is a pure state machine (sans I/O): no goroutines, no locks, no
// sockets and no clock. The caller feeds it events and carries out the
// effects it returns:
//
//   - Live: a subscription key became live upstream (its eth_subscribe
//     was answered), the first time or again after a reconnect.
//   - Push: the node pushed params for a key; the machine decides whether
//     the push is delivered now, held (a backfill is running), dropped (a
//     duplicate) or starts a backfill.
//   - Answer: the node answered one of the machine's own requests.
//   - Tick: time passed (request timeouts, retries, job deadlines).
//   - Disconnected: the upstream connection is gone, and with it every
//     request in flight.
//   - Forget: nobody holds the key any more.
//
// Effects (Effects) are requests to send upstream (Send), pushes to deliver to the key's subscribers in order
// (Delivery: either "the push just given, as it came" or a result the
// machine built), and counters (backfilled heads and logs, gaps that could
// not be closed, backfill durations).
//
// Rules, each covered by a test in heads_test.go or logs_test.go:
//
//   - newHeads: the last delivered head (number, hash) and the hashes of
//     the last Config.Blocks delivered heads and the one below them are
//     kept per key. A head that
//     is the child of the last one is delivered. A head already delivered
//     (same number and hash) is dropped. A key live again (Live) that
//     gets no push within Config.HeadWait asks for the node's head
//     (eth_getBlockByNumber("latest", false)) and takes the answer as if
//     it had been pushed, when it is above the last delivered head and no
//     job has started meanwhile (Tick sends it; Push or Disconnected
//     first cancels it). Any other head starts a job: the
//     missing numbers are fetched with eth_getBlockByNumber(n, false),
//     lowest first (at most Config.MaxInFlight at a time), then the chain
//     is walked down from the new head by parent hash until a delivered hash is met (the
//     fork point); a block the by-number answers do not cover on that walk
//     (a reorg while fetching) is fetched with eth_getBlockByHash. A
//     fetched block that continues the delivered chain (the child of the
//     last delivered head) below the walk is delivered at once, ahead of
//     the walk, which then stops on it. When the walk finds a delivered
//     head replaced (a reorg of heads already delivered), it asks for the
//     block it needs by hash and, at once, for the reorgWindow numbers
//     below by number, so the walk to the fork point costs one round trip
//     rather than one per replaced head. The
//     blocks above the fork point are delivered in ascending order,
//     converted to exactly the object geth pushes for newHeads
//     (types.Header's JSON: every header field in struct order, absent
//     optional fields as null, hash last), then the new head, then the
//     pushes held meanwhile. A walk longer than Config.Blocks stops there:
//     delivery starts at head - Blocks and the gap is counted (too_long).
//   - logs: per key, the logs delivered for the last Config.Blocks blocks
//     are kept (block number, hash, raw logs), and the highest block known
//     to be fully delivered (covered). When the key becomes live again
//     after a reconnect a job asks for the head block
//     (eth_getBlockByNumber("latest", false): its number, and the hashes
//     of it and its parent) and, at the same time,
//     checks the remembered blocks from the highest down with
//     eth_getBlockByNumber (a few ahead of the answers) until one still
//     has its hash (blocks whose hash changed were replaced by a
//     reorg: their logs are delivered again with "removed": true, as geth
//     does), then fetches the key's own filter over (covered, head] and
//     delivers the logs in (block, log index) order, skipping those
//     already delivered. At most ByHashBlocks (4) blocks are fetched
//     block by block with eth_getLogs {blockHash}, so that each answer
//     belongs to exactly the block named, reorg or not (a hash the job
//     does not know from the head or the checks costs an
//     eth_getBlockByNumber first; an answer holding another block's logs
//     counts as a failed request); more are fetched by range, in chunks of
//     Config.LogsChunk blocks.
//     Live pushes are de-duplicated by (block hash, log index) always.
//     A log held while the job ran whose removal (removed: true) was held
//     after it is dropped with its removal: a reorg the node pushed
//     meanwhile orphaned it, and the job delivered the chain as it is now
//     (where its block may have no matching log at all). So is a held
//     or live log of a block below one whose logs were delivered and not
//     removed: a backfill delivered the later block first (a reorg whose
//     answers overtook its pushes orphaned this one, or the job's range
//     chunks straddled a reorg): it is not delivered and the gap is
//     counted (late); its removal, if it comes, is dropped (never sent).
//   - logs on a live connection: the machine follows the node's head
//     through the heads it pushes to any newHeads key on the connection.
//     A head more than one block above the last (a catch-up jump: geth
//     then announces only the new head) makes every logs key fetch the
//     logs of the blocks skipped and of the new head, as above, from
//     above the key's start; a key whose job is running fetches them when
//     it ends, before what it held. A fetched log that would go out
//     before a log already delivered (the node pushed the new head's logs
//     before the head that showed the jump, and skipped the others) is
//     not delivered and the gap is counted (late). With no newHeads key
//     live, a live connection's jumps are not seen.
//   - logs on a connection where a newHeads key is live: a live log is
//     placed against the heads before it goes out (place). It goes out
//     when the heads name its block, its branch (by parent hash through
//     the headers seen) runs through the key's highest block known by
//     hash, and no block of the key's lies above it. A log whose block
//     the heads have not reached waits for the head that names it
//     (Config.HeadWait; then a backfill places it); any other starts a
//     backfill that finds the fork point (checks by number against the
//     key's branch, followed below its remembered blocks through the
//     same headers: branchOf), sends the replaced blocks' logs removed,
//     fetches the new branch's from the fork point, then runs the held
//     pushes. Removals of a replaced block thus go out before any log of
//     its replacement, whichever of the node's feeds comes first; a log
//     below a key's block on its own branch is counted late with its
//     block named. A log held before the answer that covered its block
//     came in, and not in it, is stale and dropped (dropFetchedStale); so
//     is one held before an answer named another block at its number.
//     A backfill whose answers name two branches (a fetched log under
//     another hash than the head or a check named, a header whose parent
//     is not the hash named below it) starts over (forkMoved); past
//     MaxForkRestarts each round waits RetryDelay; at its deadline it
//     delivers nothing it fetched and states the blocks. A
//     key is kept on one branch: quietCovered does not move it onto a
//     branch the heads name that replaced its highest block known by
//     hash (a backfill finds the fork).
//   - Past the bound: hashes are kept for memory() numbers (Blocks and
//     UnknownForkDepth more): a newHeads key's delivered heads, the heads
//     pushed on the connection, the headers seen (pushed or fetched); a
//     logs key keeps the logs of its last Blocks+1 numbers and, of the
//     blocks it forgot, their hash and how many logs the node has not
//     removed. A reorg deeper than a backfill delivers still has its fork
//     point found (a newHeads walk below its floor goes on by number
//     against the key's hashes: searchFork), and each key it touches
//     gets one Gap naming its exact blocks: heads not delivered, blocks
//     whose logs may be stale (forgotten, never sent removed) or missing
//     (below the floor). A log of a block such a gap named that cannot go
//     out in order is part of it; a removal the node pushes of a
//     forgotten block's log is passed on.
//   - A new logs key asks for the node's head when its eth_subscribe is
//     sent (Expect), not once it is live: its start is known even when
//     the connection is lost right after the node answered the
//     subscription (asked again on the next connection if that one was
//     lost before the answer).
//   - History subscriptions (history.go, tests in history_test.go): a
//     logs key started by History is owed every log from a block on: it
//     starts as a key live again after an outage that began the block
//     before, so its first job fetches [from, head] (or [from, to]) with
//     the rules above, in chunks of Config.HistoryChunk, halving a range
//     the node says is too large (AnswerError), with no Blocks floor
//     until the history is delivered. A newHeads key started by
//     HistoryHeads reads its start block's hash first (holding pushes),
//     then backfills the heads above it with no floor; it does not
//     follow the node's head for the logs keys.
//   - Other kinds (newPendingTransactions, node-specific ones) cannot be
//     backfilled: becoming live again counts a gap (not_backfillable).
//   - A push that does not parse as a head or a log is delivered as it
//     came (held, in order, while a job runs), and never tracked.
//   - A newHeads walk's block asked by hash that the node answers null
//     for twice is gone: the head the walk started from was orphaned.
//     The job ends without it (headOrphaned), no gap counted; the held
//     heads run, then the node's head is asked for (as after Live).
//   - The node answering null for a block it has not got yet is asked
//     again after Config.RetryDelay, at most Config.NullRetries times; an
//     error or a timeout (Config.RequestTimeout) is retried at most
//     Config.Attempts times in all; a job runs at most Config.JobTimeout
//     and holds at most Config.MaxHeld pushes. Past any bound the job
//     delivers what it has, in order, then what it held, and counts the
//     gap (failed, unavailable, timeout, too_many_held).
//   - On Disconnected every job is abandoned without delivering: what it
//     would have delivered is delivered by the job the next connection
//     starts (its blocks are still missing). A newHeads job's fetched
//     headers are kept (by hash, which names a header for good): the
//     next job takes them instead of asking again, so a connection that
//     drops before any backfill can finish still moves it on. That
//     includes headers at or below the last delivered head that are not
//     the delivered ones (the branch of a reorg, met on the walk down):
//     a walk below the last head that no single connection finishes
//     still ends, one connection at a time. They are only ever taken by
//     the walk from the new head, by parent hash, so a header orphaned
//     since cannot replace a canonical head.
//
// A Machine is not safe for concurrent use; its owner serializes events.
package gapfill
