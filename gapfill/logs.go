package gapfill

import (
	"cmp"
	"encoding/json"
	"slices"
	"strconv"
	"time"
)

// onLog applies the logs rules to log l (no job running). live says l is
// the push just handed to Push; otherwise l.raw is a held copy. fresh says
// l is placed as a live push is (place): it is the push just given, or was
// held only while the key waited (see runHeld).
func (m *Machine) onLog(k *keyState, l logEntry, live, fresh bool, now time.Time) {
	if l.removed {
		// A live reorg: the node says it itself; the log is not
		// delivered any more. The new branch's logs from this block on
		// are still to come: a reconnect before they do must fetch
		// them. A removal of a log this key was never sent (it was
		// replaced before it could be: a backfill already delivered the
		// new branch) tells the subscribers nothing.
		m.uncover(k, l.block)
		if !seen(k, l) {
			if f, ok := k.forgotten[l.block]; ok && fresh && f.hash == l.hash {
				// Of a block whose logs the key was delivered and no
				// longer remembers (a reorg deeper than Blocks): as far
				// as muxd can tell, the subscriber holds it.
				if f.logs--; f.logs <= 0 {
					delete(k.forgotten, l.block)
				} else {
					k.forgotten[l.block] = f
				}
				m.deliver(k, live, l.raw)
			}
			return
		}
		b := k.blocks[l.block]
		b.logs = slices.DeleteFunc(b.logs, func(x logEntry) bool { return x.index == l.index })
		if len(b.logs) == 0 {
			delete(k.blocks, l.block)
		}
		m.deliver(k, live, l.raw)
		return
	}
	if seen(k, l) {
		return
	}
	if fresh && m.headsLive() {
		switch m.place(k, l) {
		case placeWait:
			m.waitForHeads(k, l, now)
			// Held behind a backfill that found where the key stands,
			// and above the head it fetched to: no head in time makes
			// it go through the rules for held pushes, not another
			// such backfill (the same answers, round after round).
			k.job.noFork = m.heldAbove
			return
		case placeFork:
			m.findForkFor(k, now)
			m.hold(k, l.raw, now)
			return
		case placeLate:
			m.gapBlocks(k, "late", l.block, l.block)
			return
		}
	}
	if n, ok := m.replacedBy(k, l, fresh); ok {
		if !fresh {
			// Delivered under another hash, and not removed: a push
			// held while a backfill delivered the block as it now is
			// is stale.
			return
		}
		// Pushed live: a reorg whose removals the node has not sent
		// yet (geth's filter system reads removed and new logs from two
		// channels, in no set order). What was delivered of the
		// replaced blocks goes out removed first, as a backfill would
		// send it; the node's own removals then match nothing. When
		// the fork may lie lower still, a backfill finds it first.
		if m.forkUnknown(k, n) {
			m.findForkFor(k, now)
			m.hold(k, l.raw, now)
			return
		}
		m.removeFrom(k, n)
	}
	if f, ok := k.forgotten[l.block]; ok && !fresh && f.hash == l.hash {
		// Held, of a block whose logs the key no longer remembers: it
		// cannot go out in order, and was most likely delivered (by the
		// backfill that ran while it was held).
		return
	}
	if laterDelivered(k, l.block) {
		// A log of a later block was delivered and stands (not
		// removed): a backfill delivered it first. Either this block
		// was orphaned by a reorg whose answers overtook its pushes
		// (its removal, never sent either, is dropped above), or the
		// backfill's range answers straddled a reorg and delivered
		// another branch's block here. Delivered now it would break the
		// order; it is counted as late, as a fetched one is.
		m.gapBlocks(k, "late", l.block, l.block)
		return
	}
	if live {
		l.raw = append([]byte(nil), l.raw...)
	}
	if k.haveCovered && l.block < k.covered {
		// A log of a block below the one the key had covered: another
		// branch's (a reorg the key saw no removal of, its old blocks
		// holding no log of the key), whose later blocks' logs are
		// still to come. (A log of the covered block itself is usually
		// one pushed late: the margin quietCovered leaves, or the block
		// the key started at.)
		m.uncover(k, l.block)
	}
	m.remember(k, l)
	m.deliver(k, live, l.raw)
	// Every block below a log's was delivered whole: the node pushes in
	// chain order.
	if l.block > 0 && (!k.haveCovered || l.block-1 > k.covered) {
		if !k.haveCovered {
			k.start = l.block - 1
		}
		// Its hash is l's block's parent: known when the heads pushed
		// on this connection named l's block; else l's block is
		// remembered, and checked, above it.
		k.covered, k.coveredHash, k.haveCovered = l.block-1, "", true
		if m.nodeHashes[l.block] == l.hash {
			k.coveredHash = m.nodeHashes[l.block-1]
		}
	}
}

// removals maps each log that held pushes say was removed (logID) to the
// index of its last removal among them.
func removals(held [][]byte) map[string]int {
	var at map[string]int
	for i, res := range held {
		if l, ok := parseLog(res); ok && l.removed {
			if at == nil {
				at = map[string]int{}
			}
			at[logID(l)] = i
		}
	}
	return at
}

func logID(l logEntry) string { return l.hash + "/" + strconv.FormatUint(l.index, 10) }

// logPos is a log's place in chain order.
type logPos struct{ block, index uint64 }

func (p logPos) before(q logPos) bool {
	return p.block < q.block || (p.block == q.block && p.index < q.index)
}

// topDelivered returns the place of the last log delivered to k that
// stands (not removed): a log delivered now before it would break the
// chain order.
func topDelivered(k *keyState) (logPos, bool) {
	var top logPos
	have := false
	for n, b := range k.blocks {
		if have && n < top.block {
			continue
		}
		for _, l := range b.logs {
			if p := (logPos{l.block, l.index}); !have || top.before(p) {
				top, have = p, true
			}
		}
	}
	return top, have
}

// laterDelivered reports whether a log of a block above n was delivered
// to k and not removed since.
func laterDelivered(k *keyState, n uint64) bool {
	for b := range k.blocks {
		if b > n {
			return true
		}
	}
	return false
}

func seen(k *keyState, l logEntry) bool {
	b := k.blocks[l.block]
	if b == nil || b.hash != l.hash {
		return false
	}
	for _, x := range b.logs {
		if x.index == l.index {
			return true
		}
	}
	return false
}

// remember records l as delivered, keeping the blocks of the last Blocks
// numbers and the one below them (what one backfill delivers: head-Blocks
// to head).
func (m *Machine) remember(k *keyState, l logEntry) {
	b := k.blocks[l.block]
	if b == nil || b.hash != l.hash {
		b = &logBlock{hash: l.hash}
		k.blocks[l.block] = b
	}
	b.logs = append(b.logs, l)
	if len(k.blocks) > m.cfg.Blocks {
		var top uint64
		for n := range k.blocks {
			top = max(top, n)
		}
		for n := range k.blocks {
			if n+uint64(m.cfg.Blocks) < top {
				if k.forgotten == nil {
					k.forgotten = map[uint64]forgottenBlock{}
				}
				k.forgotten[n] = forgottenBlock{hash: k.blocks[n].hash, logs: len(k.blocks[n].logs)}
				delete(k.blocks, n)
			}
		}
		for n := range k.forgotten {
			if n+m.memory() < top {
				delete(k.forgotten, n)
			}
		}
	}
}

// logsAnswered moves a logs job on with the node's answer to r.
func (m *Machine) logsAnswered(k *keyState, r *request, result []byte, now time.Time) {
	j := k.job
	switch r.purpose {
	case purposeHeadNumber:
		h, ok := parseHeader(result)
		if !ok {
			m.failed(k, r, now)
			return
		}
		m.noteHeader(h)
		j.head, j.haveHead = h.num, true
		j.know(h.num, h.hash, len(k.held))
		if h.num > 0 {
			j.know(h.num-1, h.parent, len(k.held))
		}
		m.resolveChecks(k, now)
	case purposeCheckBlock, purposeLogsBlock:
		h, ok := parseHeader(result)
		if !ok || h.num != r.num {
			m.failed(k, r, now)
			return
		}
		m.noteHeader(h)
		j.know(r.num, h.hash, len(k.held))
		if r.purpose == purposeCheckBlock {
			m.resolveChecks(k, now)
		} else {
			m.enqueue(k, logsByHash(k, r.num, h.hash), now)
		}
	case purposeLogsHeader:
		if h, ok := parseHeader(result); ok && h.hash == r.hash && h.num == r.num {
			m.noteHeader(h)
		}
		j.chunks--
		m.afterChunk(k, now)
	case purposeGetLogs, purposeLogsByHash:
		var entries []json.RawMessage
		if json.Unmarshal(result, &entries) != nil {
			m.failed(k, r, now)
			return
		}
		var logs []logEntry
		for _, e := range entries {
			l, ok := parseLog(e)
			if !ok || l.removed {
				continue
			}
			if r.purpose == purposeLogsByHash && (l.block != r.num || l.hash != r.hash) {
				// Not the block asked for: a node that ignored
				// blockHash.
				m.failed(k, r, now)
				return
			}
			logs = append(logs, l)
		}
		j.fetched = append(j.fetched, logs...)
		a := logsAnswer{from: r.num, to: r.to, held: len(k.held)}
		if r.purpose == purposeLogsByHash {
			a.to, a.hash = r.num, r.hash
		}
		j.answers = append(j.answers, a)
		j.chunks--
		m.afterChunk(k, now)
	}
}

// know records that the node answered hash for block n when the key held
// `held` pushes: those it pushed before that answer.
func (j *job) know(n uint64, hash string, held int) {
	j.checked[n] = hash
	if j.checkedAt == nil {
		j.checkedAt = map[uint64]int{}
	}
	j.checkedAt[n] = held
}

// logsByHash asks eth_getLogs for the key's filter in block hash (number
// n): the answer belongs to exactly that block, whatever reorg happens
// meanwhile.
func logsByHash(k *keyState, n uint64, hash string) *request {
	return &request{method: "eth_getLogs", params: getLogsByHashParams(k.filter, hash),
		purpose: purposeLogsByHash, num: n, hash: hash}
}

// checkWindow is how many remembered blocks a logs job asks about ahead
// of the answers: usually the highest keeps its hash and one is enough, but
// after a reorg each replaced block would cost a round trip of its own.
const checkWindow = 3

// findFork starts logs job j's first round: the node's head and the
// canonical hashes of the remembered blocks, from the highest down, to
// find the fork point (resolveChecks).
func (m *Machine) findFork(k *keyState, j *job, now time.Time) {
	j.branch = m.branchOf(k)
	j.checked = map[uint64]string{}
	j.heldFrom = len(k.held)
	for n := range k.blocks {
		j.checks = append(j.checks, n)
	}
	if _, ok := k.blocks[k.covered]; !ok && k.coveredHash != "" {
		// The covered block too: a reorg may have replaced it, and the
		// blocks below it, where no log of the key was.
		j.checks = append(j.checks, k.covered)
	}
	slices.Sort(j.checks)
	slices.Reverse(j.checks)
	// The head and the first checks go together: neither waits for the
	// other (each round trip counts on a connection that may not last).
	m.enqueue(k, latestBlock(purposeHeadNumber), now)
	m.askChecks(k, now)
}

// MaxForkRestarts is how often one logs job starts over at once because a
// reorg moved its fork point while it ran (forkMoved); past it each round
// waits Config.RetryDelay first (restartChecks).
const MaxForkRestarts = 3

// forkMoved reports whether what logs job j learned after its checks says
// that a remembered block it took as kept was replaced meanwhile: a
// reorg at or below the fork point while the job ran. The node's later
// answers name another hash for it (a head's parent, a jump's blocks), or
// the node pushed the removal of one of its logs (a push held since the
// checks were asked: the node pushes a reorg's removals to every live
// subscription). Fetched from above the old fork point and delivered, the
// new branch's logs would follow the old branch's without their removal,
// and the new branch's logs below it would be skipped.
func (m *Machine) forkMoved(k *keyState, j *job) bool {
	for n, b := range k.blocks {
		if h, ok := j.checked[n]; ok && h != b.hash && !slices.Contains(j.replaced, n) {
			return true
		}
	}
	if _, logged := k.blocks[k.covered]; !logged {
		// The covered block, where the key had no log (one where it had
		// is compared above, by the hash its logs name, as
		// resolveChecks compares it).
		if h, ok := j.checked[k.covered]; ok && k.coveredHash != "" && h != k.coveredHash && !slices.Contains(j.replaced, k.covered) {
			return true
		}
	}
	view := map[uint64]string{} // the node's chain as the job's answers name it
	for n, h := range j.checked {
		view[n] = h
	}
	for _, f := range j.fetched {
		// A fetched log of a block the job knows under another hash (the
		// head's answer, a check): its range answer came after a reorg
		// the job's checks did not see.
		if h, ok := view[f.block]; ok && h != f.hash {
			return true
		}
		view[f.block] = f.hash
	}
	for n, h := range view {
		// Two answers of different branches: a block whose parent (a
		// header seen) is not what another answer named below it.
		if hd, ok := m.headers[h]; ok && n > 0 && hd.num == n {
			if below, ok := view[n-1]; ok && below != hd.parent {
				return true
			}
		}
	}
	for _, res := range k.held[min(j.heldFrom, len(k.held)):] {
		l, ok := parseLog(res)
		if !ok {
			continue
		}
		if !l.removed {
			// A pushed log of a block the job fetched under another
			// hash: its answers straddled a reorg.
			for _, f := range j.fetched {
				if f.block == l.block && f.hash != l.hash {
					return true
				}
			}
			continue
		}
		if seen(k, l) && !slices.Contains(j.replaced, l.block) {
			return true
		}
		// A log the job fetched: its answers straddled the reorg, and
		// the new branch's logs of that block may be missing from them.
		for _, f := range j.fetched {
			if f.block == l.block && f.hash == l.hash && f.index == l.index {
				return true
			}
		}
	}
	return false
}

// restartChecks starts logs job j over from its checks, forgetting what it
// asked and fetched: the fork point it found is no longer one. The pushes
// it holds stay held; its deadline stands. Past MaxForkRestarts each new
// round waits Config.RetryDelay first (Tick), for the node's chain to
// settle: what the job fetched is never delivered on answers that
// disagree, and the job's deadline bounds the rounds (giveUp).
func (m *Machine) restartChecks(k *keyState, j *job, now time.Time) {
	m.dropRequests(k.key)
	*j = job{started: j.started, deadline: j.deadline, restarts: j.restarts + 1, forLog: j.forLog,
		owedHead: max(j.owedHead, j.head)}
	if j.restarts > MaxForkRestarts {
		j.resumeAt = now.Add(m.cfg.RetryDelay)
		return
	}
	m.findFork(k, j, now)
}

// resume starts logs job j's next round once its pause is over
// (restartChecks).
func (m *Machine) resume(k *keyState, j *job, now time.Time) bool {
	if j.resumeAt.IsZero() || now.Before(j.resumeAt) {
		return false
	}
	j.resumeAt = time.Time{}
	m.findFork(k, j, now)
	return true
}

// checkBranchBelow adds block n-1 to logs job j's checks when n, a block
// the key knew, was replaced and nothing the key remembers lies below it,
// but the branch the key was delivered (j.branch) names n-1: the fork
// point is looked for there, where the key had no log, rather than
// guessed.
func (m *Machine) checkBranchBelow(k *keyState, j *job, n uint64) {
	if n == 0 || n-1 < k.start || len(j.checks) > 0 {
		return
	}
	if _, ok := j.branch[n-1]; ok {
		j.checks = append(j.checks, n-1)
	}
}

// askChecks asks for the canonical hash of the highest remembered blocks
// not asked for yet, keeping checkWindow ahead of the answers.
func (m *Machine) askChecks(k *keyState, now time.Time) {
	j := k.job
	for j.asked < len(j.checks) && j.asked < checkWindow {
		n := j.checks[j.asked]
		j.asked++
		m.enqueue(k, blockByNumber(n, purposeCheckBlock), now)
	}
}

// resolveChecks takes the answered checks from the highest down: a block
// whose hash changed was replaced; the first that kept it is the fork
// point. Once that is known (or no remembered block is left) and the head
// is known, it fetches.
func (m *Machine) resolveChecks(k *keyState, now time.Time) {
	j := k.job
	for len(j.checks) > 0 && !j.forkOK {
		n := j.checks[0]
		hash, ok := j.checked[n]
		if !ok {
			m.askChecks(k, now)
			return
		}
		j.checks = j.checks[1:]
		if j.asked > 0 {
			j.asked--
		}
		if was, ok := rememberedHash(k, n); ok && was != hash {
			j.replaced = append(j.replaced, n)
			m.checkBranchBelow(k, j, n)
			continue
		}
		if was, ok := j.branch[n]; ok && was != hash && !j.forkOK {
			j.replaced = append(j.replaced, n)
			m.checkBranchBelow(k, j, n)
			continue
		}
		j.forkOK, j.forkAt = true, n
	}
	if !j.haveHead {
		return
	}
	if m.forkMoved(k, j) {
		m.restartChecks(k, j, now)
		return
	}
	// Checks still asked for are not needed any more.
	j.queue = slices.DeleteFunc(j.queue, func(r *request) bool { return r.purpose == purposeCheckBlock })
	for id, r := range m.reqs {
		if r.key == k.key && r.purpose == purposeCheckBlock {
			delete(m.reqs, id)
			j.inflight--
		}
	}
	m.fetch(k, now)
}

// fetch asks eth_getLogs for the key's filter over the blocks that may
// hold logs not delivered: above covered, and above the fork point when
// remembered blocks were replaced; at most Blocks below the head.
func (m *Machine) fetch(k *keyState, now time.Time) {
	j := k.job
	from := k.covered + 1
	if len(j.replaced) == 0 {
		m.fetchRange(k, from, true, now)
		return
	}
	// A reorg replaced blocks the key knew, from above the fork point
	// (or, when no block the key knows kept its hash, from at most the
	// lowest replaced one; a block at or below where the key started is
	// not its concern).
	low := j.replaced[len(j.replaced)-1]
	forkKnown := j.forkOK || low <= k.start+1
	replacedFrom := low
	if j.forkOK {
		replacedFrom = j.forkAt + 1
	} else if forkKnown {
		replacedFrom = max(low, k.start+1)
	}
	from = min(from, replacedFrom)
	if gapFrom, gapTo, deep := m.deepReorg(k, j, replacedFrom, forkKnown, from); deep {
		m.gapBlocks(k, "reorg_too_deep", gapFrom, gapTo)
		m.fetchRange(k, from, false, now)
		return
	}
	m.fetchRange(k, from, true, now)
}

// deepReorg tells whether a reorg that replaced logs key k's blocks from
// replacedFrom on (fork not known: at most from there) reaches past what
// job j can make good, and which blocks' logs may then be stale or
// missing: those the key was delivered and forgot (it cannot send them
// removed), those below the job's floor (not fetched), and with the fork
// not known, every block from above where the key started.
func (m *Machine) deepReorg(k *keyState, j *job, replacedFrom uint64, forkKnown bool, from uint64) (gapFrom, gapTo uint64, deep bool) {
	gapFrom = replacedFrom
	if lo, hi, ok := k.stale(replacedFrom); ok {
		gapFrom, gapTo, deep = lo, hi, true
	}
	if floor := m.floor(k, j.head); from < floor {
		gapFrom, gapTo, deep = min(gapFrom, from), max(gapTo, floor-1), true
	}
	if !forkKnown {
		gapFrom, gapTo, deep = k.start+1, max(gapTo, replacedFrom-1), true
	}
	return gapFrom, gapTo, deep
}

// quietCovered moves on what the live logs keys with no job running have
// covered, to two blocks below head, the next head pushed on the current
// connection: the node pushes a block's logs when it takes the block, so
// by the time it announces head it has pushed every log of the blocks
// before it (one block is left as margin for pushes still on their way).
// Without this, a key whose filter matched nothing for a while would
// still be covered only up to its last log, and the next reconnect would
// fetch, or count as a too_long gap, every block since.
//
// A key whose highest block known by hash the heads' branch names under
// another hash is not moved: a reorg replaced that block and the node
// pushed no removal (anvil never does). Moved, its covered block would be
// of the new branch and its old logs would stand below it, never checked
// again; instead a backfill finds the fork, and the replaced logs go out
// removed before any of the new branch's.
func (m *Machine) quietCovered(head uint64, now time.Time) {
	if head < 2 {
		return
	}
	for _, key := range m.sortedKeys() {
		k := m.keys[key]
		if k.kind != kindLogs || !k.live || k.job != nil || !k.haveCovered || head-2 <= k.covered {
			continue
		}
		if m.offBranch(k, head-2) {
			m.findFork(k, m.startJob(k, now), now)
			continue
		}
		k.covered, k.coveredHash = head-2, m.nodeHashes[head-2]
	}
}

// offBranch reports whether the branch the heads pushed on the connection
// name at number top (followed down by parent hash through the headers
// seen) names logs key k's highest block known by hash under another hash.
func (m *Machine) offBranch(k *keyState, top uint64) bool {
	at, hash, ok := k.covered, k.coveredHash, k.coveredHash != ""
	for b, blk := range k.blocks {
		if b <= top && (!ok || b > at) {
			at, hash, ok = b, blk.hash, true
		}
	}
	if !ok || at > top {
		return false
	}
	h, named := m.nodeHashes[top]
	if !named {
		return false
	}
	got, linked := m.linked(top, h, at)
	return linked && got != hash
}

// uncover lowers what logs key k has covered to below block n, whose
// block a reorg replaced: the new branch's logs there are not delivered
// yet.
// The reorg may reach below n, through blocks where the key had no log:
// the block covered is lowered to is one whose hash the next backfill
// checks (resolveChecks), so that it finds such a fork point: block n-1
// when the heads pushed on this connection named it (and the key covered
// that branch), else the highest block below n whose logs the key was
// delivered, else (nothing known) UnknownForkDepth blocks further down,
// unchecked: a reorg that deep is not expected, and the next backfill
// fetches those blocks again (what the key was delivered of them is
// remembered, and not sent twice).
func (m *Machine) uncover(k *keyState, n uint64) {
	if !k.haveCovered || n == 0 || k.covered+1 < n {
		return
	}
	c, hash := n-1, ""
	if k.coveredHash != "" && m.nodeHashes[k.covered] == k.coveredHash {
		// The key covered the branch the connection's heads name: their
		// hash of block n-1 is one of the blocks it covered.
		hash = m.nodeHashes[n-1]
	}
	if hash == "" {
		for b := range k.blocks {
			if b < n && (hash == "" || b > c) {
				c, hash = b, k.blocks[b].hash
			}
		}
	}
	if hash == "" {
		c = max(k.start, n-1-min(n-1, UnknownForkDepth))
	}
	if c < k.covered || (c == k.covered && k.coveredHash == "") {
		k.covered, k.coveredHash = c, hash
	}
}

// replacedBy returns the lowest block whose delivered logs new log l shows
// replaced: its own block, delivered under another hash, or (live, when
// the heads pushed on this connection name l's block) a block they name
// under another hash than the key's. A held push (not live) is checked
// only against its own block.
func (m *Machine) replacedBy(k *keyState, l logEntry, live bool) (uint64, bool) {
	n, found := l.block, false
	if b := k.blocks[l.block]; b != nil && b.hash != l.hash {
		found = true
	}
	if !live || m.nodeHashes[l.block] != l.hash {
		return n, found
	}
	for b, blk := range k.blocks {
		if h, ok := m.nodeHashes[b]; ok && b <= l.block && h != blk.hash && (!found || b < n) {
			n, found = b, true
		}
	}
	return n, found
}

// holdsBelow reports whether logs key k remembers a block below n.
func holdsBelow(k *keyState, n uint64) bool {
	for b := range k.blocks {
		if b < n {
			return true
		}
	}
	return false
}

// forkUnknown reports whether logs key k holds a block below n (which a
// reorg replaced) that the heads pushed on this connection do not name:
// the reorg may have replaced it too, and only a backfill can tell.
func (m *Machine) forkUnknown(k *keyState, n uint64) bool {
	for b, blk := range k.blocks {
		if b < n && m.nodeHashes[b] != blk.hash {
			return true
		}
	}
	return false
}

// findForkFor starts a backfill that finds where a live log belongs (as
// after a reconnect), or turns k's wait for heads into one; the caller
// holds the log behind it. The replaced blocks' logs go out removed, then
// the new branch, then what is held (the log is seen by then, or run
// through the rules for held pushes).
func (m *Machine) findForkFor(k *keyState, now time.Time) {
	j := m.startJob(k, now)
	j.forLog = true
	m.findFork(k, j, now)
	j.heldFrom = 0
}

// waitForHeads holds live log l, whose block the heads pushed on the
// connection have not named yet, until one does (noteHead) or HeadWait
// passes (Tick: then a backfill finds where it belongs).
func (m *Machine) waitForHeads(k *keyState, l logEntry, now time.Time) {
	j := m.startJob(k, now)
	j.wait, j.waitUntil = true, now.Add(m.cfg.HeadWait)
	m.hold(k, l.raw, now)
}

// Where a live log stands against what its key was delivered (place).
const (
	placeOK   = iota // on the branch the heads name, as far as the key's blocks go: the usual rules
	placeWait        // its block is above the heads pushed yet: wait for them
	placeFork        // its branch is not known: a backfill finds the fork first
	placeLate        // a later block's logs, on its branch, went out first
)

// place tells where live log l stands, on a connection where a newHeads
// key is live. A log continues what its key was delivered only when the
// heads pushed name its block (its hash at its number) and its branch, by
// parent hash through the headers seen, runs through the key's highest
// block known by hash (its last log's, or the one it covered), with no
// block of the key's above it: the node's log and head feeds are separate,
// and a reorg's new logs may come before its new heads, so a log is never
// taken on trust against them. Until the heads reach its block it waits;
// below them on a branch they do not name, or one not known to run through
// the key's blocks, a backfill finds the fork point; removals of the
// blocks it replaced then go out before it.
func (m *Machine) place(k *keyState, l logEntry) int {
	if !m.haveNodeHead || (m.nodeHashes[l.block] != l.hash && l.block > m.nodeHead) {
		for b, blk := range k.blocks {
			if b > l.block || (b == l.block && blk.hash != l.hash) {
				return placeFork
			}
		}
		return placeWait
	}
	if m.nodeHashes[l.block] != l.hash {
		return placeFork
	}
	// The key's highest block known by hash at or below l's: l's branch
	// must run through it.
	var at uint64
	var atHash string
	have, above, offHeads := false, false, false
	for b, blk := range k.blocks {
		if b > l.block {
			// A block of the key's above l: late when every such block
			// is on the heads' branch, else a reorg (whatever order the
			// map gives them in).
			above = true
			if h, named := m.nodeHashes[b]; !named || h != blk.hash {
				offHeads = true
			}
			continue
		}
		if !have || b > at {
			at, atHash, have = b, blk.hash, true
		}
	}
	switch {
	case offHeads:
		return placeFork
	case above:
		return placeLate
	}
	if k.haveCovered && k.coveredHash != "" {
		if k.covered > l.block {
			// A block the key covered: l's only if it is on that
			// branch (a log the node pushed late).
			if h, ok := m.linked(k.covered, k.coveredHash, l.block); !ok || h != l.hash {
				return placeFork
			}
		} else if !have || k.covered > at {
			at, atHash, have = k.covered, k.coveredHash, true
		}
	}
	if have {
		if h, ok := m.linked(l.block, l.hash, at); !ok || h != atHash {
			return placeFork
		}
	}
	return placeOK
}

// linked returns the hash at number to on the branch of block (num, hash),
// followed by parent hash through the headers seen; false when they do
// not reach.
func (m *Machine) linked(num uint64, hash string, to uint64) (string, bool) {
	for num > to {
		h, ok := m.headers[hash]
		if !ok || h.num != num {
			return "", false
		}
		num, hash = num-1, h.parent
	}
	return hash, true
}

// headsLive reports whether a newHeads key is live on the connection: the
// node will push heads, which place a log.
func (m *Machine) headsLive() bool {
	for _, k := range m.keys {
		if k.kind == kindHeads && k.live {
			return true
		}
	}
	return false
}

// branchOf returns the branch logs key k was delivered (number -> hash)
// as far as the headers the machine has seen tell it: from each block the
// key knows by hash (those whose logs it remembers, its covered block),
// highest first, down by parent hash. It names the blocks where the key
// had no log, which a reorg may have replaced too.
func (m *Machine) branchOf(k *keyState) map[uint64]string {
	type anchor struct {
		num  uint64
		hash string
	}
	var anchors []anchor
	for b, blk := range k.blocks {
		anchors = append(anchors, anchor{b, blk.hash})
	}
	if k.haveCovered && k.coveredHash != "" {
		anchors = append(anchors, anchor{k.covered, k.coveredHash})
	}
	slices.SortFunc(anchors, func(x, y anchor) int { return cmp.Compare(y.num, x.num) })
	branch := map[uint64]string{}
	for _, a := range anchors {
		num, hash := a.num, a.hash
		for {
			if _, ok := branch[num]; ok {
				break
			}
			branch[num] = hash
			h, ok := m.headers[hash]
			if !ok || num == 0 || h.num != num {
				break
			}
			num, hash = num-1, h.parent
		}
	}
	return branch
}

// stale returns the blocks from `from` on whose logs logs key k was
// delivered, forgot and the node has not removed (lowest, highest), and
// forgets them: a reorg replaced them, and the gap stated names them.
func (k *keyState) stale(from uint64) (lo, hi uint64, ok bool) {
	for n := range k.forgotten {
		if n < from {
			continue
		}
		if !ok || n < lo {
			lo = n
		}
		if !ok || n > hi {
			hi = n
		}
		ok = true
		delete(k.forgotten, n)
	}
	return lo, hi, ok
}

// offHeads reports whether logs key k covered a block the heads pushed on
// the connection name under another hash: a backfill took it past them,
// onto the node's branch as it answered.
func (m *Machine) offHeads(k *keyState) bool {
	h, ok := m.nodeHashes[k.covered]
	return ok && k.coveredHash != "" && h != k.coveredHash
}

// noteHeader remembers block h's number and parent hash (a hash names one
// header for good), for branchOf; those more than memory below the
// highest are forgotten.
func (m *Machine) noteHeader(h header) {
	if m.headers == nil {
		m.headers = map[string]header{}
	}
	m.headers[h.hash] = header{num: h.num, hash: h.hash, parent: h.parent}
	m.topHeader = max(m.topHeader, h.num)
	if uint64(len(m.headers)) > 4*(m.memory()+2) {
		for hash, x := range m.headers {
			if x.num+m.memory() < m.topHeader {
				delete(m.headers, hash)
			}
		}
	}
}

// removeFrom sends the logs key k was delivered of blocks n and above
// again with removed:true, in chain order, and forgets them: a reorg
// replaced those blocks.
func (m *Machine) removeFrom(k *keyState, n uint64) {
	m.removeBlocks(k, n, func(uint64, string) bool { return true })
}

// removeBlocks is removeFrom for the blocks from n on that replaced
// reports as replaced (by number and the hash the key knows them by).
func (m *Machine) removeBlocks(k *keyState, n uint64, replaced func(num uint64, hash string) bool) {
	var nums []uint64
	for b, blk := range k.blocks {
		if b >= n && replaced(b, blk.hash) {
			nums = append(nums, b)
		}
	}
	if len(nums) == 0 {
		m.uncover(k, n)
		return
	}
	slices.Sort(nums)
	for _, b := range nums {
		m.removeBlock(k, b)
	}
	m.uncover(k, nums[0])
}

// removeBlock sends the logs key k was delivered of block n again with
// removed:true, in log index order, and forgets them.
func (m *Machine) removeBlock(k *keyState, n uint64) {
	b := k.blocks[n]
	if b == nil {
		return
	}
	logs := slices.SortedFunc(slices.Values(b.logs), func(x, y logEntry) int { return cmp.Compare(x.index, y.index) })
	for _, l := range logs {
		m.deliver(k, false, asRemoved(l.raw))
		m.countLog(k)
	}
	delete(k.blocks, n)
}

// UnknownForkDepth is how far below a replaced block a logs key's covered
// block is lowered when nothing tells where the fork is (uncover): 64
// blocks, two epochs, past which a post-merge chain is final.
const UnknownForkDepth = 64

// rememberedHash returns the hash logs key k knows block n by: a block
// whose logs it was delivered, or its covered block.
func rememberedHash(k *keyState, n uint64) (string, bool) {
	if b := k.blocks[n]; b != nil {
		return b.hash, true
	}
	if n == k.covered && k.coveredHash != "" {
		return k.coveredHash, true
	}
	return "", false
}

// ByHashBlocks is the most blocks a logs job fetches block by block, with
// eth_getLogs {blockHash}, instead of by range: a few blocks missed (a
// short cut, a small head jump) are fetched by the hash of each, so that
// every answer belongs to exactly the block named, reorg or not. A block
// whose hash the job does not know yet costs one eth_getBlockByNumber
// first. More blocks than this are fetched by range, in chunks of
// Config.LogsChunk (fewer requests).
const ByHashBlocks = 4

// fetchRange asks for the key's logs in blocks [from, j.head] (at most
// Blocks below the head: the blocks below are counted too_long when count
// says so) and delivers once every answer is in.
func (m *Machine) fetchRange(k *keyState, from uint64, count bool, now time.Time) {
	j := k.job
	j.fetching = true
	if floor := m.floor(k, j.head); from < floor {
		if count {
			m.gapBlocks(k, "too_long", from, floor-1)
		}
		from = floor
	}
	if from <= j.head && j.head-from < ByHashBlocks {
		for n := from; n <= j.head; n++ {
			j.chunks++
			if hash, ok := j.checked[n]; ok {
				j.queue = append(j.queue, logsByHash(k, n, hash))
				if hd := m.headers[hash]; n > from && (hd.hash != hash || hd.num != n) {
					// A hash known only as a parent (the head's): its
					// header too, at the same time, so that the blocks
					// fetched are checked to be one chain (forkMoved):
					// the block below it may be asked for by number,
					// after a reorg.
					j.chunks++
					j.queue = append(j.queue, &request{method: "eth_getBlockByHash", params: []byte(`["` + hash + `",false]`),
						purpose: purposeLogsHeader, num: n, hash: hash})
				}
				continue
			}
			j.queue = append(j.queue, blockByNumber(n, purposeLogsBlock))
		}
	} else {
		chunk := m.chunk(k)
		for a := from; a <= j.head; a += chunk {
			b := min(a+chunk-1, j.head)
			j.chunks++
			j.queue = append(j.queue, &request{method: "eth_getLogs", params: getLogsParams(k.filter, a, b),
				purpose: purposeGetLogs, num: a, to: b})
		}
	}
	m.pump(k, now)
	m.afterChunk(k, now)
}

// noteHead follows the node's head through what it pushes to newHeads
// keys on the current connection. A head more than one block above the
// last is a jump: the node announced none of the blocks between (geth
// sends only the new head when it catches up) and may not have pushed
// their logs either, so every logs key fetches the logs of those blocks
// and of the new head, as after a reconnect (a key with a job running
// fetches them when it ends).
func (m *Machine) noteHead(h header, now time.Time) {
	m.noteHeader(h)
	prev, had := m.nodeHead, m.haveNodeHead
	m.nodeHead, m.haveNodeHead = h.num, true
	// A reorg: a head not above the last, or one whose parent is not the
	// block the heads named at its number (geth after the merge pushes
	// only a reorg's new head).
	old, ok := m.nodeHashes[h.num-1]
	parentMoved := ok && h.num > 0 && old != h.parent
	if had && (h.num <= prev || parentMoved) && h.num > 0 {
		// Blocks from h.num (from its parent when that moved) on are
		// another branch's, whose logs the node pushes around this
		// head. Every logs key owes them until a later head shows they
		// came (quietCovered), or a backfill fetches them after a
		// reconnect. What a live key with no backfill running was
		// delivered of the replaced blocks goes out removed now, if the
		// node has not removed it yet (its removals may come after the
		// new branch's logs: another feed in geth): every block above
		// the new head, and the head's number and its parent's when the
		// key has them under other hashes. (Logs the node pushed of the
		// new branch before this head stay.) All this before h's hashes
		// are noted: the block covered is lowered to is named by the
		// branch the key was delivered.
		from := h.num
		if parentMoved {
			from = h.num - 1
		}
		fresh := m.nodeHashes[h.num] != h.hash // not a head pushed again
		for _, key := range m.sortedKeys() {
			k := m.keys[key]
			if k.kind != kindLogs {
				continue
			}
			if m.branchOf(k)[h.num] == h.hash || m.offHeads(k) {
				// The key is on h's branch already, or on another one
				// than the heads named so far (a backfill delivered it
				// before the heads came): the blocks h replaces are not
				// the key's. Its logs of h's branch are placed as they
				// come.
				continue
			}
			forkJob := false
			if k.live && (k.job == nil || k.job.wait) {
				m.removeBlocks(k, from, func(num uint64, hash string) bool {
					switch num {
					case h.num - 1:
						return hash != h.parent
					case h.num:
						return hash != h.hash
					}
					return num > h.num && m.nodeHashes[num] == hash
				})
				if parentMoved && holdsBelow(k, from) {
					// The fork may be below the blocks the head
					// names: find it as after a reconnect (the pushes
					// wait behind the job), below the blocks the key
					// remembers along the branch the heads named so
					// far.
					m.findFork(k, m.startJob(k, now), now)
					forkJob = true
				}
			}
			if lo, hi, ok := k.stale(from); ok && fresh && !forkJob {
				// Blocks from `from` on were replaced, and the key was
				// delivered logs there that it no longer remembers: they
				// stand, stale. (A backfill finding the fork states its
				// own range.)
				m.gapBlocks(k, "reorg_too_deep", lo, hi)
			}
			m.uncover(k, from)
		}
	}
	m.noteHashes(h, parentMoved)
	if had && h.num == prev+1 && !parentMoved {
		m.quietCovered(h.num, now)
	}
	if !had || h.num <= prev+1 {
		m.releaseWaits(now)
		return
	}
	for _, key := range m.sortedKeys() {
		k := m.keys[key]
		if k.kind != kindLogs || !k.haveCovered {
			continue
		}
		from := max(prev, k.start) + 1
		if from > h.num {
			continue
		}
		if k.job != nil && !k.job.wait {
			if k.owedTo == 0 || from < k.owedFrom {
				k.owedFrom = from
			}
			k.owedTo = max(k.owedTo, h.num)
			continue
		}
		m.startJump(k, from, h.num, map[uint64]string{h.num: h.hash, h.num - 1: h.parent}, now) // h.num > prev+1 > 0
	}
	m.releaseWaits(now)
}

// releaseWaits runs again the logs each key held while it waited for the
// heads (waitForHeads), now that a head came: those whose block it named
// go out, after any removal it caused.
func (m *Machine) releaseWaits(now time.Time) {
	for _, key := range m.sortedKeys() {
		k := m.keys[key]
		if k.job != nil && k.job.wait {
			k.job = nil
			m.runHeld(k, true, noBlock, now)
		}
	}
}

// noteHashes records the hashes head h names (its own and its parent's)
// and forgets those above it (another branch's, after a reorg) and those
// more than Blocks below it; all of them when h's parent moved (a reorg
// below h: the blocks noted below are not known to be its ancestors).
func (m *Machine) noteHashes(h header, parentMoved bool) {
	if parentMoved {
		clear(m.nodeHashes)
	}
	for n := range m.nodeHashes {
		if n > h.num || n+m.memory() < h.num {
			delete(m.nodeHashes, n)
		}
	}
	m.nodeHashes[h.num] = h.hash
	if h.num > 0 {
		m.nodeHashes[h.num-1] = h.parent
	}
}

// startJump starts a logs job that fetches blocks [from, to] (known:
// canonical hashes the job may use) and delivers them as a reconnect's
// job does; what k holds stays held behind it.
func (m *Machine) startJump(k *keyState, from, to uint64, known map[uint64]string, now time.Time) {
	j := m.startJob(k, now)
	j.head, j.haveHead = to, true
	j.checked = known
	if j.checked == nil {
		j.checked = map[uint64]string{}
	}
	m.fetchRange(k, from, true, now)
}

// afterChunk delivers once every chunk is in, unless the fork point
// moved under the job: then it starts over (restartChecks).
func (m *Machine) afterChunk(k *keyState, now time.Time) {
	j := k.job
	if j == nil || !j.fetching || j.chunks != 0 {
		return
	}
	if m.forkMoved(k, j) {
		m.restartChecks(k, j, now)
		return
	}
	m.deliverLogs(k, now)
}

// dropFetchedStale returns held without the logs logs job j shows stale:
// held before the answer that covered their block came in (a range, or
// their very block by hash), and not among what it fetched. The node pushed them before it answered, so their
// block was no longer on its chain when it did: a reorg orphaned them
// while the job ran (a node that pushes no removals, or whose removals
// come later, which then match nothing). Delivered after the job, they
// would stand beside the branch it delivered.
func dropFetchedStale(held [][]byte, j *job) [][]byte {
	if len(j.answers) == 0 {
		return held
	}
	fetched := map[string]bool{}
	for _, f := range j.fetched {
		fetched[logID(f)] = true
	}
	out := held[:0:0]
	for i, res := range held {
		if l, ok := parseLog(res); ok && !l.removed && !fetched[logID(l)] {
			stale := false
			for _, a := range j.answers {
				// A range answer speaks for the node's chain at those
				// numbers; one by hash only for that block.
				if a.from <= l.block && l.block <= a.to && i < a.held && (a.hash == "" || a.hash == l.hash) {
					stale = true
				}
			}
			if h, ok := j.checked[l.block]; ok && h != l.hash && i < j.checkedAt[l.block] {
				// The node named another block at its number (the head's
				// answer, a check) after it pushed it.
				stale = true
			}
			if stale {
				continue
			}
		}
		out = append(out, res)
	}
	return out
}

// markLate notes that a fetched log of block n is not delivered: it
// would go after a later one.
func (j *job) markLate(n uint64) {
	if !j.late || n < j.lateFrom {
		j.lateFrom = n
	}
	if !j.late || n > j.lateTo {
		j.lateTo = n
	}
	j.late = true
}

// deliverLogs ends a logs job: the logs of replaced blocks again with
// removed:true, then the fetched logs not delivered before in (block, log
// index) order, then what was held.
func (m *Machine) deliverLogs(k *keyState, now time.Time) {
	j := k.job
	for i := len(j.replaced) - 1; i >= 0; i-- {
		m.removeBlock(k, j.replaced[i])
	}
	if len(j.replaced) > 0 {
		// Not covered any more (a job given up before it fetched leaves
		// them owed to the next one).
		m.uncover(k, j.replaced[len(j.replaced)-1])
	}
	slices.SortStableFunc(j.fetched, func(x, y logEntry) int {
		if c := cmp.Compare(x.block, y.block); c != 0 {
			return c
		}
		return cmp.Compare(x.index, y.index)
	})
	top, haveTop := topDelivered(k)
	gone := removals(k.held)
	for _, l := range j.fetched {
		if seen(k, l) {
			continue
		}
		if _, ok := gone[logID(l)]; ok {
			// Orphaned by a reorg the node pushed while the job ran
			// (its answers straddled it): the subscriber need not get
			// a log only to be told it is gone, next to another
			// branch's. Its held removal is then dropped by onLog.
			continue
		}
		if haveTop && (logPos{l.block, l.index}).before(top) {
			// A later log went out first (the node pushed a later
			// block's logs before the head that showed the jump):
			// delivered now, it would break the order.
			j.markLate(l.block)
			continue
		}
		m.remember(k, l)
		m.deliver(k, false, l.raw)
		top, haveTop = logPos{l.block, l.index}, true
		m.countLog(k)
	}
	if j.missing {
		m.gapBlocks(k, "failed", j.missingFrom, j.missingTo)
	}
	if j.late {
		m.gapBlocks(k, "late", j.lateFrom, j.lateTo)
	}
	if j.fetching && j.head > k.covered {
		k.covered, k.coveredHash = j.head, j.checked[j.head]
	}
	m.endJob(k, now)
}
