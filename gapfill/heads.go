package gapfill

import "time"

// onHead applies the newHeads rules to head h (no job running). live says
// h is the push just handed to Push; otherwise h.raw is a held copy.
func (m *Machine) onHead(k *keyState, h header, live bool, now time.Time) {
	if !k.haveLast || h.num == 0 || (h.num == k.last+1 && h.parent == k.hashes[k.last]) {
		m.recordHead(k, h)
		m.deliver(k, live, h.raw)
		return
	}
	if k.hashes[h.num] == h.hash {
		return // delivered already (the node sent it again after a reconnect)
	}
	if live {
		h.raw = append([]byte(nil), h.raw...) // the caller's buffer is reused
	}
	j := m.startJob(k, now)
	j.target = h
	if h.num > uint64(m.cfg.Blocks) {
		j.floor = h.num - uint64(m.cfg.Blocks)
	}
	j.floor = m.historyHeadsFloor(k, h.num, j.floor)
	j.cur, j.expect = h.num-1, h.parent
	j.byHash = map[string]header{}
	j.numWait = map[uint64]bool{}
	from := max(k.last+1, j.floor)
	// Headers an earlier job fetched before its connection was lost: the
	// walk checks them by parent hash like any other, so a number one of
	// them has is not asked again (if a reorg replaced it, the walk asks
	// for the new block by hash). Those at or below the last delivered
	// head are blocks of a branch that replaced delivered heads, which the
	// walk down to the fork point needs.
	have := map[uint64]bool{}
	for hash, fh := range k.fetched {
		if fh.num >= j.floor && fh.num < h.num {
			j.byHash[hash] = fh
			have[fh.num] = fh.num >= from
		}
	}
	k.fetched = nil
	m.advance(k)
	// Lowest first: each answer that continues the delivered chain is
	// delivered at once (advance), so a connection lost before the job
	// ends has moved the key on from the bottom. (Highest first, every
	// connection spent its answers on the blocks mined since the last
	// one and the bottom of the gap was never reached.)
	for n := from; n < h.num; n++ {
		if have[n] {
			continue
		}
		j.numWait[n] = true
		j.queue = append(j.queue, blockByNumber(n, purposeHeadByNumber))
	}
	m.pump(k, now)
	m.walk(k, now)
}

// recordHead makes h the last delivered head.
func (m *Machine) recordHead(k *keyState, h header) {
	if k.haveLast {
		for n := h.num + 1; n <= k.last; n++ {
			delete(k.hashes, n) // a shorter branch replaced them
		}
	}
	if !k.haveLast {
		k.first = h.num
	}
	k.hashes[h.num] = h.hash
	k.last, k.haveLast = h.num, true
	// Deeper than Blocks (memory): the fork point of a reorg deeper than
	// a backfill delivers is still found.
	if uint64(len(k.hashes)) > m.memory()+1 {
		for n := range k.hashes {
			if n+m.memory() < h.num {
				delete(k.hashes, n)
			}
		}
	}
}

// walk follows the new branch down by parent hash from the job's target
// until it meets a delivered hash (the fork point), as far as the fetched
// headers allow; it asks by hash for a block the by-number answers do not
// hold. It ends the job when the walk is done.
func (m *Machine) walk(k *keyState, now time.Time) {
	j := k.job
	if j.search {
		return // the walk is done; the search below the floor ends the job
	}
	for j != nil && k.job == j {
		n := j.cur
		if n <= k.last {
			hh, ok := k.hashes[n]
			if ok && hh == j.expect {
				m.deliverChain(k, now) // the fork point (or the last head)
				return
			}
			if !ok {
				// Deeper than the heads remembered: the new branch's
				// heads from the fork up to n are not delivered.
				m.gapBlocks(k, "reorg_too_deep", 0, n)
				m.deliverChain(k, now)
				return
			}
		}
		if n < j.floor {
			m.searchFork(k, now)
			return
		}
		h, ok := j.byHash[j.expect]
		if !ok {
			if j.numWait[n] {
				return // its by-number answer may be it
			}
			if j.expect != j.askedBy {
				j.askedBy = j.expect
				m.enqueue(k, &request{method: "eth_getBlockByHash", params: []byte(`["` + j.expect + `",false]`),
					purpose: purposeHeadByHash, num: n, hash: j.expect}, now)
				if n <= k.last {
					m.probeBelow(k, n, now)
				}
			}
			return
		}
		if h.num != n {
			m.giveUp(k, "failed", now)
			return
		}
		j.chain = append(j.chain, h)
		j.expect = h.parent
		if n == 0 {
			m.deliverChain(k, now)
			return
		}
		j.cur = n - 1
	}
}

// searchFork starts looking for the fork point below newHeads job j's
// floor, where the walk stops delivering: the node's blocks by number from
// the last delivered head (or the floor, if lower) down, against the
// hashes the key remembers, reorgWindow at a time. It is only for the gap:
// the heads from the fork point up to the floor are not delivered. A gap
// with no reorg costs one request (the last head is still the node's).
func (m *Machine) searchFork(k *keyState, now time.Time) {
	j := k.job
	if !k.haveLast {
		m.searchEnded(k, 0, false, now)
		return
	}
	j.search = true
	j.searchAt = min(j.floor-1, k.last)
	j.searchAsked = j.searchAt + 1
	j.searched = map[uint64]string{}
	m.resolveSearch(k, now)
}

// resolveSearch takes the answers of the search from searchAt down: the
// first number whose block is the one the key was delivered is the fork
// point. It asks what it needs next.
func (m *Machine) resolveSearch(k *keyState, now time.Time) {
	j := k.job
	for {
		n := j.searchAt
		want, ok := k.hashes[n]
		if !ok && n < k.first {
			// Below the first head the key was delivered: nothing
			// there was owed to it.
			m.searchEnded(k, k.first-1, true, now)
			return
		}
		if !ok {
			m.searchEnded(k, 0, false, now) // deeper than remembered
			return
		}
		got, ok := j.searched[n]
		if !ok {
			for j.searchAsked > 0 && j.searchAsked+reorgWindow > n+1 {
				if _, known := k.hashes[j.searchAsked-1]; !known {
					break
				}
				j.searchAsked--
				m.enqueue(k, blockByNumber(j.searchAsked, purposeHeadSearch), now)
			}
			return
		}
		if got == want || n == 0 {
			m.searchEnded(k, n, got == want, now)
			return
		}
		j.searchAt--
	}
}

// searchAnswered takes the node's block at r.num for the search.
func (m *Machine) searchAnswered(k *keyState, r *request, result []byte, now time.Time) {
	j := k.job
	raw, ok := HeaderFromBlock(result)
	h, ok2 := parseHeader(raw)
	if !ok || !ok2 || h.num != r.num {
		m.failed(k, r, now)
		return
	}
	m.noteHeader(h)
	if !j.search {
		return
	}
	j.searched[r.num] = h.hash
	m.resolveSearch(k, now)
}

// searchEnded states newHeads job j's gap below its floor and delivers:
// with the fork point found at fork, the heads fork+1..floor-1 are not
// delivered (too_long when fork is the last delivered head: no head was
// replaced; reorg_too_deep when delivered heads were); not found, the
// gap is stated up to the floor from an unknown start.
func (m *Machine) searchEnded(k *keyState, fork uint64, found bool, now time.Time) {
	j := k.job
	switch {
	case !found:
		m.gapBlocks(k, "too_long", 0, j.floor-1)
	case k.haveLast && fork < k.last:
		m.gapBlocks(k, "reorg_too_deep", fork+1, j.floor-1)
	default:
		m.gapBlocks(k, "too_long", fork+1, j.floor-1)
	}
	m.deliverChain(k, now)
}

// reorgWindow is how many blocks below a replaced delivered head a
// newHeads job asks for by number at once: the walk down to the fork
// point then takes one round trip, not one per replaced head.
const reorgWindow = 4

// probeBelow asks by number for the reorgWindow blocks below n, a
// delivered head the walk found replaced (the walk asks for n itself by
// hash). The node's canonical blocks there are most likely the new
// branch: the walk takes those that chain and asks by hash for any that
// do not. Numbers asked before, or below the floor, are skipped.
func (m *Machine) probeBelow(k *keyState, n uint64, now time.Time) {
	j := k.job
	for i := uint64(1); i <= reorgWindow && i <= n && n-i >= j.floor; i++ {
		num := n - i
		if j.numWait[num] || j.probed[num] {
			continue
		}
		if j.probed == nil {
			j.probed = map[uint64]bool{}
		}
		j.probed[num] = true
		j.numWait[num] = true
		m.enqueue(k, blockByNumber(num, purposeHeadByNumber), now)
	}
}

// headAnswered takes a block the node sent for r.
func (m *Machine) headAnswered(k *keyState, r *request, result []byte, now time.Time) {
	j := k.job
	raw, ok := HeaderFromBlock(result)
	h, ok2 := parseHeader(raw)
	if !ok || !ok2 || (r.purpose == purposeHeadByNumber && h.num != r.num) || (r.purpose == purposeHeadByHash && h.hash != r.hash) {
		m.failed(k, r, now)
		return
	}
	if r.purpose == purposeHeadByNumber {
		delete(j.numWait, r.num)
	}
	m.noteHeader(h)
	j.byHash[h.hash] = h
	m.advance(k)
	m.walk(k, now)
}

// advance delivers, ahead of the walk, the fetched headers that continue
// the delivered chain: the child of the last delivered head, its child,
// and so on, below the block the walk needs next (the walk has not passed
// them). They are what the node pushed while the key was not live, in
// order; the walk then stops on them (its fork point). A job that cannot
// finish (a connection lost first) has still delivered this much.
func (m *Machine) advance(k *keyState) {
	j := k.job
	for k.haveLast {
		var next header
		found := false
		for _, h := range j.byHash {
			if h.num == k.last+1 && h.parent == k.hashes[k.last] {
				next, found = h, true
				break
			}
		}
		if !found || next.num >= j.cur || next.num >= j.target.num {
			return
		}
		m.recordHead(k, next)
		m.deliver(k, false, next.raw)
		m.countHeads(k, 1)
	}
}

// deliverChain ends a newHeads job: the walked blocks in ascending order,
// then the head that started it, then what was held.
func (m *Machine) deliverChain(k *keyState, now time.Time) {
	j := k.job
	for i := len(j.chain) - 1; i >= 0; i-- {
		m.recordHead(k, j.chain[i])
		m.deliver(k, false, j.chain[i].raw)
	}
	m.countHeads(k, len(j.chain))
	m.recordHead(k, j.target)
	m.deliver(k, false, j.target.raw)
	m.endJob(k, now)
}

// headOrphaned ends newHeads key k's job without delivering its target:
// the node no longer has a block on the target's branch, which a reorg
// orphaned. What the walk met that continues the delivered chain went out
// already (advance); the heads held meanwhile (the new branch's, pushed
// after the reorg) run next, and with none of them starting a job the
// node's head is asked for at the next Tick, as for a key live again.
func (m *Machine) headOrphaned(k *keyState, now time.Time) {
	m.keepFetched(k, k.job)
	delete(k.fetched, k.job.target.hash)
	m.endJob(k, now)
	if k.job == nil && k.live {
		m.headWaits[k.key] = now
	}
}

// keepFetched keeps the headers k's job fetched, for the next job (the
// connection is lost: the job is abandoned): those above the last
// delivered head, and those at or below it (a branch that replaced
// delivered heads, met on the walk down to the fork point). The target is
// kept too: it is a header like the others. At most Blocks headers are
// kept, the highest.
func (m *Machine) keepFetched(k *keyState, j *job) {
	if j.byHash == nil {
		return
	}
	kept := make(map[string]header, len(j.byHash)+1)
	add := func(h header) {
		if !k.haveLast || h.num > k.last || k.hashes[h.num] != h.hash {
			kept[h.hash] = h
		}
	}
	for _, h := range j.byHash {
		add(h)
	}
	add(j.target)
	for len(kept) > m.cfg.Blocks {
		var low string
		for hash, h := range kept {
			if low == "" || h.num < kept[low].num || (h.num == kept[low].num && hash < low) {
				low = hash
			}
		}
		delete(kept, low)
	}
	k.fetched = kept
}
