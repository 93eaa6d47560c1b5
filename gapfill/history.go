package gapfill

import (
	"strings"
	"time"
)

// This file serves history subscriptions: eth_subscribe("logs", {...,
// fromBlock: B}). Each one is a logs key of its own in the machine (the
// caller names it, and feeds it the pushes of the live key it shares the
// node's subscription with), which starts as a key live again after an
// outage that began at block B-1: its first job asks for the node's head,
// fetches the filter's logs over [B, head], delivers them in (block, log
// index) order, then the pushes it held meanwhile, under the rules every
// logs key follows (so a block mined while history is fetched, a reorg at
// the seam or inside the history, and a reconnect are handled as for a
// backfill). Until its first delivery no backfill_blocks floor applies
// (the caller bounds the range); ranges are asked HistoryChunk blocks at
// a time, and a range the node refuses as too large is asked again in two
// halves (AnswerError).

// History starts key, a history subscription over the filter of
// subscription key parent, owed every log from block from on; to, when
// not 0, is a block at or below the node's head where the history ends:
// only [from, to] is fetched (the caller drops what lies past it). A key
// the machine knows already is left as it is.
func (m *Machine) History(key, parent string, from, to uint64, now time.Time) Effects {
	if _, ok := m.keys[key]; ok || !m.Enabled() {
		return m.take()
	}
	name, filter := subscriptionName(parent)
	k := &keyState{key: key, name: name, filter: filter, kind: kindLogs, blocks: map[uint64]*logBlock{}, live: true}
	k.history, k.histFrom = true, from
	below := from - min(from, 1) // block 0 holds no logs: from 0 is from 1
	k.covered, k.haveCovered, k.start = below, true, below
	m.keys[key] = k
	if to != 0 && to >= from {
		// A range that ends in the past: no head to ask for.
		m.startJump(k, below+1, to, nil, now)
		return m.take()
	}
	m.findFork(k, m.startJob(k, now), now)
	return m.take()
}

// Covered reports the highest block all of whose logs key was delivered,
// when no job of key's runs (false otherwise, or for a key not known).
func (m *Machine) Covered(key string) (uint64, bool) {
	k := m.keys[key]
	switch {
	case k == nil || k.job != nil:
		return 0, false
	case k.kind == kindHeads:
		return k.last, k.haveLast
	case !k.haveCovered || (k.history && k.covered < k.histFrom):
		return 0, false
	}
	return k.covered, true
}

// floor is the lowest block logs job j of k fetches: backfill_blocks below
// its head, except for a history key that has not been delivered its
// history yet (its range was bounded when it was asked for).
func (m *Machine) floor(k *keyState, head uint64) uint64 {
	if k.history && k.covered < k.histFrom {
		return 0
	}
	return head - min(head, uint64(m.cfg.Blocks))
}

// chunk is how many blocks one eth_getLogs of k's covers.
func (m *Machine) chunk(k *keyState) uint64 {
	if k.history {
		return m.cfg.HistoryChunk
	}
	return m.cfg.LogsChunk
}

// AnswerError is Answer for an error answer, with the node's message: an
// eth_getLogs over more than one block that the node refused for its size
// (TooManyResults) is asked again in two halves, lowest first; anything
// else is a failed request (Answer with a nil result).
func (m *Machine) AnswerError(id uint64, message string, now time.Time) Effects {
	r := m.reqs[id]
	if r == nil || r.purpose != purposeGetLogs || r.to <= r.num || !TooManyResults(message) {
		return m.Answer(id, nil, now)
	}
	k := m.keys[r.key]
	if k == nil || k.job == nil {
		return m.Answer(id, nil, now)
	}
	delete(m.reqs, id)
	j := k.job
	j.inflight--
	mid := r.num + (r.to-r.num)/2
	j.chunks++ // one chunk becomes two
	j.queue = append(j.queue, getLogsRange(k, r.num, mid), getLogsRange(k, mid+1, r.to))
	m.pump(k, now)
	return m.take()
}

func getLogsRange(k *keyState, from, to uint64) *request {
	return &request{method: "eth_getLogs", params: getLogsParams(k.filter, from, to), purpose: purposeGetLogs, num: from, to: to}
}

// tooManyHints are what nodes say when an eth_getLogs asks for too much:
// geth ("query returned more than 10000 results", "exceed maximum block
// range"), erigon, nethermind, besu and hosted providers ("limit
// exceeded", "response size exceeded", "block range is too wide", "too
// many blocks").
var tooManyHints = []string{"more than", "too many", "exceed", "limit", "too large", "too wide", "range"}

// TooManyResults reports whether an error message from the node says an
// eth_getLogs asked for too many blocks or results.
func TooManyResults(message string) bool {
	message = strings.ToLower(message)
	for _, h := range tooManyHints {
		if strings.Contains(message, h) {
			return true
		}
	}
	return false
}

// countLog counts a log the machine fetched and delivered to k (or sent
// again removed).
func (m *Machine) countLog(k *keyState) {
	if k.history {
		m.eff.HistoryLogs++
		return
	}
	m.eff.LogsBackfilled++
}

// HistoryHeads starts key, a newHeads history subscription owed the heads
// above block from, followed by the pushes the caller feeds it (another
// newHeads key's). A first job reads block from (its hash: where the
// delivered chain starts) while holding the pushes; then the first head
// above it, held or asked for (the node's head), starts the newHeads
// backfill of the heads in between, with no backfill_blocks floor (the
// caller bounded the range). A key the machine knows is left as it is.
func (m *Machine) HistoryHeads(key string, from, to uint64, now time.Time) Effects {
	if _, ok := m.keys[key]; ok || !m.Enabled() {
		return m.take()
	}
	k := &keyState{key: key, name: "newHeads", kind: kindHeads, hashes: map[uint64]string{}, live: true}
	k.history, k.histFrom, k.histEnd = true, from, to
	m.keys[key] = k
	m.startAnchor(k, now)
	return m.take()
}

// startAnchor starts newHeads history key k's first job: block histFrom.
func (m *Machine) startAnchor(k *keyState, now time.Time) {
	j := m.startJob(k, now)
	j.anchor = true
	m.enqueue(k, blockByNumber(k.histFrom, purposeHistAnchor), now)
}

// anchorAnswered takes block histFrom for newHeads history key k: the
// delivered chain starts there (nothing is delivered of it). The pushes
// held meanwhile then go through the rules (the first above it starts the
// backfill); with none, the node's head is asked for, as for a key live
// again (latestAnswered).
func (m *Machine) anchorAnswered(k *keyState, r *request, result []byte, now time.Time) {
	raw, ok := HeaderFromBlock(result)
	h, ok2 := parseHeader(raw)
	if !ok || !ok2 || h.num != r.num {
		m.failed(k, r, now)
		return
	}
	m.noteHeader(h)
	k.hashes[h.num] = h.hash
	k.last, k.haveLast, k.first = h.num, true, h.num
	m.dropRequests(k.key)
	k.job = nil
	m.runHeld(k, false, noBlock, now)
	if k.job == nil && k.histTo == 0 {
		// The head, or the block the history ends at, as if pushed.
		if k.histEnd > k.last {
			m.sendNew(k, blockByNumber(k.histEnd, purposeHeadLatest), now)
		} else {
			m.sendNew(k, latestBlock(purposeHeadLatest), now)
		}
	}
}

// anchorFailed ends a newHeads history key's first job past a bound (the
// gap is counted): with no start, the pushes held go out as they came,
// the first one starting the chain.
func (m *Machine) anchorFailed(k *keyState, now time.Time) {
	m.dropRequests(k.key)
	k.job = nil
	k.history = false
	m.runHeld(k, false, noBlock, now)
}

// historyHeadsFloor is the floor of a newHeads job of k towards head top
// (floor: backfill_blocks below it): none for a history key that has not
// been delivered its history (up to the head its first job went to).
func (m *Machine) historyHeadsFloor(k *keyState, top, floor uint64) uint64 {
	if !k.history {
		return floor
	}
	if k.histTo == 0 {
		k.histTo = top
	}
	if k.last < k.histTo {
		return min(floor, k.histFrom)
	}
	return floor
}

// countHeads counts n heads the machine fetched and delivered to k.
func (m *Machine) countHeads(k *keyState, n int) {
	if k.history {
		m.eff.HistoryHeads += n
		return
	}
	m.eff.HeadsBackfilled += n
}
