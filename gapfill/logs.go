package gapfill

import (
	"cmp"
	"encoding/json"
	"slices"
	"time"
)

// onLog applies the logs rules to log l (no job running). live says l is
// the push just handed to Push; otherwise l.raw is a held copy.
func (m *Machine) onLog(k *keyState, l logEntry, live bool) {
	if l.removed {
		// A live reorg: the node says it itself; the log is not
		// delivered any more. A removal of a log this key was never
		// sent (it was replaced before it could be: a backfill already
		// delivered the new branch) tells the subscribers nothing.
		if !seen(k, l) {
			return
		}
		b := k.blocks[l.block]
		b.logs = slices.DeleteFunc(b.logs, func(x logEntry) bool { return x.index == l.index })
		if len(b.logs) == 0 {
			delete(k.blocks, l.block)
		}
		m.deliver(k, live, resultOfLog(l, live))
		return
	}
	if seen(k, l) {
		return
	}
	if b := k.blocks[l.block]; b != nil && b.hash != l.hash {
		// Delivered under another hash, and not removed: the node
		// removes a block's logs before it sends the new branch's, so
		// this one is stale (a push held while a backfill delivered the
		// block as it now is).
		return
	}
	if live {
		l.raw = append([]byte(nil), l.raw...)
	}
	m.remember(k, l)
	m.deliver(k, live, resultOfLog(l, live))
	// Every block below a log's was delivered whole: the node pushes in
	// chain order.
	if l.block > 0 && (!k.haveCovered || l.block-1 > k.covered) {
		k.covered, k.haveCovered = l.block-1, true
	}
}

func resultOfLog(l logEntry, live bool) []byte {
	if live {
		return nil
	}
	return l.raw
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

// remember records l as delivered, keeping the last Blocks blocks.
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
			if n+uint64(m.cfg.Blocks) <= top {
				delete(k.blocks, n)
			}
		}
	}
}

// logsAnswered moves a logs job on with the node's answer to r.
func (m *Machine) logsAnswered(k *keyState, r *request, result []byte, now time.Time) {
	j := k.job
	switch r.purpose {
	case purposeHeadNumber:
		head, ok := parseQuantityJSON(result)
		if !ok {
			m.failed(k, r, now)
			return
		}
		j.head, j.haveHead = head, true
		j.phase = logsCheck
		m.resolveChecks(k, now)
	case purposeCheckBlock:
		h, ok := parseHeader(result)
		if !ok || h.num != r.num {
			m.failed(k, r, now)
			return
		}
		j.checked[r.num] = h.hash
		m.resolveChecks(k, now)
	case purposeGetLogs:
		var entries []json.RawMessage
		if json.Unmarshal(result, &entries) != nil {
			m.failed(k, r, now)
			return
		}
		for _, e := range entries {
			if l, ok := parseLog(e); ok && !l.removed {
				j.fetched = append(j.fetched, l)
			}
		}
		j.chunks--
		m.afterChunk(k, now)
	}
}

// checkWindow is how many remembered blocks a logs job asks about ahead
// of the answers: usually the highest keeps its hash and one is enough, but
// after a reorg each replaced block would cost a round trip of its own.
const checkWindow = 3

// askChecks asks for the canonical hash of the highest remembered blocks
// not asked for yet, keeping checkWindow ahead of the answers.
func (m *Machine) askChecks(k *keyState, now time.Time) {
	j := k.job
	for j.asked < len(j.checks) && j.asked < checkWindow {
		n := j.checks[j.asked]
		j.asked++
		m.enqueue(k, &request{method: "eth_getBlockByNumber", params: []byte(`["` + quantity(n) + `",false]`),
			purpose: purposeCheckBlock, num: n}, now)
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
		j.asked--
		if b := k.blocks[n]; b != nil && b.hash != hash {
			j.replaced = append(j.replaced, n)
			continue
		}
		j.forkOK, j.forkAt = true, n
	}
	if !j.haveHead {
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
	j.phase = logsFetch
	from := k.covered + 1
	if len(j.replaced) > 0 {
		low := j.replaced[len(j.replaced)-1]
		if j.forkOK {
			low = j.forkAt + 1
		} else {
			m.gap(k, "reorg_too_deep")
		}
		from = min(from, low)
	}
	if floor := j.head - min(j.head, uint64(m.cfg.Blocks)); from < floor {
		m.gap(k, "too_long")
		from = floor
	}
	for a := from; a <= j.head; a += m.cfg.LogsChunk {
		b := min(a+m.cfg.LogsChunk-1, j.head)
		j.chunks++
		j.queue = append(j.queue, &request{method: "eth_getLogs", params: getLogsParams(k.filter, a, b),
			purpose: purposeGetLogs, num: a})
	}
	m.pump(k, now)
	m.afterChunk(k, now)
}

// afterChunk delivers once every chunk is in.
func (m *Machine) afterChunk(k *keyState, now time.Time) {
	if j := k.job; j != nil && j.phase == logsFetch && j.chunks == 0 {
		m.deliverLogs(k, now)
	}
}

// deliverLogs ends a logs job: the logs of replaced blocks again with
// removed:true, then the fetched logs not delivered before in (block, log
// index) order, then what was held.
func (m *Machine) deliverLogs(k *keyState, now time.Time) {
	j := k.job
	for i := len(j.replaced) - 1; i >= 0; i-- {
		b := k.blocks[j.replaced[i]]
		if b == nil {
			continue
		}
		logs := slices.SortedFunc(slices.Values(b.logs), func(x, y logEntry) int { return cmp.Compare(x.index, y.index) })
		for _, l := range logs {
			m.deliver(k, false, asRemoved(l.raw))
			m.eff.LogsBackfilled++
		}
		delete(k.blocks, j.replaced[i])
	}
	slices.SortStableFunc(j.fetched, func(x, y logEntry) int {
		if c := cmp.Compare(x.block, y.block); c != 0 {
			return c
		}
		return cmp.Compare(x.index, y.index)
	})
	for _, l := range j.fetched {
		if seen(k, l) {
			continue
		}
		m.remember(k, l)
		m.deliver(k, false, l.raw)
		m.eff.LogsBackfilled++
	}
	if j.missing {
		m.gap(k, "failed")
	}
	if j.phase == logsFetch && j.head > k.covered {
		k.covered = j.head
	}
	m.endJob(k, now)
}
