package chaos

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/muxd/muxd/internal/testnode"
)

// chaosUpstream scripts the shared fake node to misbehave in every way a
// shared socket must survive:
//
//   - every request is answered with {"echo": params, "m": method}, so an
//     answer routed to the wrong request is visible;
//   - each answer is delayed 0-20 ms on its own goroutine, so answers come
//     back out of order;
//   - the socket is cut (Drop) 200-600 ms after it was accepted, and the
//     next connection is accepted as usual;
//   - now and then an answer is sent twice, an answer with an id nobody
//     sent is sent, and an {"id":null,"error":...} object is sent;
//   - eth_subscribe gets a subscription id never used before, on any
//     connection.
//
// Behind it runs a real-shaped chain (chain), shared by all connections: a
// block every 50-100 ms, a few logs per block, now and then a shallow
// reorg. A newHeads subscription is pushed the heads, and a logs
// subscription whose filter names the chain's logs the matching logs
// (removed:true ones first on a reorg, as geth does), of the blocks mined
// while its connection is up: every cut of the socket is a real gap.
// Requests shaped like muxd's backfill (eth_blockNumber with no params,
// eth_getBlockByNumber / eth_getBlockByHash with false, eth_getLogs with a
// filter object) are answered from the chain, with the usual delays,
// reordering and duplicates; once per distinct request it may instead
// answer with an error, answer null for a block (not there yet) or not
// answer at all, so muxd's bounds are exercised without making a gap
// unavoidable. Every other subscription (other kinds, a logs filter for an
// address the chain never uses) is pushed every ~20 ms with a counter and
// the subscription's params: payloads that are no head and no log.
//
// A client batch reaches it as one JSON array (muxd keeps the client's
// order); half the arrays are answered element by element, out of order
// like single requests, the other half as one array in reverse order, now
// and then sent twice. eth_subscribe or eth_unsubscribe inside an array is
// a protocol violation (muxd sends its own alone) and recorded as a failure.
//
// The node (connections, subscriptions, frame counts) is testnode's; the
// counters below are this script's, updated from the node's goroutines.
type chaosUpstream struct {
	*testnode.Node

	requests atomic.Int64
	// notifs counts the client notifications muxd forwarded that the
	// node read. It swings with the machine's load (tens to thousands
	// between runs): muxd forwards a notification only while connected
	// and never retries one, and on each connection it first sends the
	// resubscribes and the backlog of retried requests, so a
	// notification is read only if the node gets through that backlog
	// before the socket is cut. It is reported, never checked.
	notifs     atomic.Int64
	dups       atomic.Int64
	unknownIDs atomic.Int64
	nullIDs    atomic.Int64
	pushes     atomic.Int64
	subscribes atomic.Int64
	subRecv    atomic.Int64
	unsubs     atomic.Int64
	arrays     atomic.Int64 // client batches received as one array

	chain         *chain
	chainReqs     atomic.Int64 // backfill-shaped requests answered from the chain
	chainFailed   atomic.Int64 // of which answered with an error on purpose
	chainSilent   atomic.Int64 // of which never answered on purpose
	chainNulls    atomic.Int64 // of which answered null on purpose
	headPushes    atomic.Int64
	logPushes     atomic.Int64
	removedPushes atomic.Int64

	calmed atomic.Bool // connections accepted from now on are never cut

	mu       sync.Mutex
	failures []string
	tricked  map[string]bool // chain requests (method+params) already failed, nulled or dropped once
}

func (u *chaosUpstream) fail(format string, args ...any) {
	u.mu.Lock()
	if len(u.failures) < 50 {
		u.failures = append(u.failures, fmt.Sprintf(format, args...))
	}
	u.mu.Unlock()
}

// Failures lists what the node saw muxd do wrong: what fail recorded, and
// frames that were not JSON (the node answers -32700 and closes the
// socket, as geth does) or were empty arrays, which the node counts
// before any handler sees them.
func (u *chaosUpstream) Failures() []string {
	u.mu.Lock()
	out := append([]string(nil), u.failures...)
	u.mu.Unlock()
	c := u.Counts()
	if c.Malformed > 0 {
		out = append(out, fmt.Sprintf("upstream received %d frames of invalid JSON from muxd", c.Malformed))
	}
	if c.EmptyArrays > 0 {
		out = append(out, fmt.Sprintf("upstream received %d empty arrays from muxd", c.EmptyArrays))
	}
	return out
}

// calm stops cutting connections (the one up may still be cut once) and
// returns the chain's head number at that moment.
func (u *chaosUpstream) calm() uint64 {
	u.calmed.Store(true)
	return u.chain.headNumber()
}

// newChaosUpstream starts the node and its chain; t.Cleanup closes it and
// waits for its goroutines.
func newChaosUpstream(t *testing.T) *chaosUpstream {
	u := &chaosUpstream{Node: testnode.New(t), chain: newChain(), tricked: map[string]bool{}}
	u.Go(func() { u.chain.run(u.Done()) })
	u.SetHandler(u.handle)
	u.SetArrayHandler(u.handleArray)
	u.SetOnConnect(u.misbehave)
	return u
}

// misbehave sets up a new connection, before its first message is read:
// the drop timer, and the push loops of the chain's events and of the
// other subscriptions.
//
// The drop timer: the socket is cut at a random moment, mostly 200-600 ms
// after it was accepted (before muxd can close a gap of more than a few
// blocks), every third connection after 1-2 s. Every third, not one in
// three at random: under -race a backfill's round trip behind the requests
// retried on a reconnect takes a few hundred ms, and a run whose dice gave
// no long connection had none finish. Once calm (the end of the run),
// sockets are no longer cut.
func (u *chaosUpstream) misbehave(fc *testnode.Conn) {
	var dropT *time.Timer
	if !u.calmed.Load() {
		life := 200*time.Millisecond + rand.N(400*time.Millisecond)
		if fc.N%3 == 0 {
			life = time.Second + rand.N(time.Second)
		}
		dropT = time.AfterFunc(life, fc.Drop)
	}
	// Only what is mined from now on is pushed on this connection.
	from, _ := u.chain.cursor()
	u.Go(func() {
		if dropT != nil {
			defer dropT.Stop()
		}
		u.pushLoop(fc)
	})
	u.Go(func() { u.chainPushLoop(fc, from) })
}

// upSub is what a live subscription is pushed, read from its params.
type upSub struct {
	heads  bool       // newHeads: pushed the chain's heads
	filter *logFilter // logs on the chain's addresses: pushed the chain's logs
}

// fedByChain reports whether the chain's events are pushed to s.
func (s *upSub) fedByChain() bool { return s.heads || s.filter != nil }

// newUpSub reads eth_subscribe params.
func newUpSub(params json.RawMessage) *upSub {
	s := &upSub{}
	var args []json.RawMessage
	_ = json.Unmarshal(params, &args)
	var name string
	if len(args) > 0 {
		_ = json.Unmarshal(args[0], &name)
	}
	switch name {
	case "newHeads":
		s.heads = true
	case "logs":
		f := &logFilter{}
		if len(args) > 1 {
			var ok bool
			if f, ok = parseFilter(args[1]); !ok {
				return s
			}
		}
		if f.addrs == nil || slices.ContainsFunc(f.addrs, func(a string) bool { return slices.Contains(chainAddrs, a) }) {
			s.filter = f
		}
	}
	return s
}

// upSubs reads each distinct params once, for one push loop.
type upSubs map[string]*upSub

func (m upSubs) of(params json.RawMessage) *upSub {
	s, ok := m[string(params)]
	if !ok {
		s = newUpSub(params)
		m[string(params)] = s
	}
	return s
}

// handle takes a single message.
func (u *chaosUpstream) handle(fc *testnode.Conn, r testnode.Req) {
	if r.Err != nil {
		u.fail("upstream received invalid JSON from muxd: %v: %.200s", r.Err, r.Raw)
		return
	}
	if r.IsNotification() {
		u.notifs.Add(1)
		return
	}
	u.requests.Add(1)
	u.answerLater(fc, r)
}

// answerLater answers call r after a short random delay, on its own
// goroutine, so that answers come back out of order.
func (u *chaosUpstream) answerLater(fc *testnode.Conn, r testnode.Req) {
	if r.Method == "eth_subscribe" {
		u.subRecv.Add(1)
	}
	if r.Method == "eth_subscribe" || r.Method == "eth_unsubscribe" {
		// Answered at once, ahead of the backlog of retried calls a
		// reconnect brings (a node answers these from memory): the
		// connection lives long enough for muxd to close its gaps.
		u.answer(fc, r)
		return
	}
	delay := rand.N(20 * time.Millisecond)
	answer := func() { u.answer(fc, r) }
	if res, ok := u.chainResult(r); ok {
		delay = rand.N(5 * time.Millisecond)
		u.chainReqs.Add(1)
		switch u.trick(r) {
		case trickSilent:
			u.chainSilent.Add(1)
			return
		case trickFail:
			u.chainFailed.Add(1)
			res = nil
		case trickNull:
			u.chainNulls.Add(1)
			res = []byte("null")
		}
		answer = func() { u.answerChain(fc, r, res) }
	}
	u.Go(func() {
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-fc.Done():
				t.Stop()
				return
			}
		}
		answer()
	})
}

// handleArray takes a client batch as muxd sends it.
func (u *chaosUpstream) handleArray(fc *testnode.Conn, reqs []testnode.Req) {
	for _, r := range reqs {
		if r.Err != nil {
			u.fail("upstream received an invalid array from muxd: %v: %.200s", r.Err, r.Raw)
			return
		}
	}
	u.arrays.Add(1)
	var calls []testnode.Req
	for _, r := range reqs {
		if r.Method == "eth_subscribe" || r.Method == "eth_unsubscribe" {
			u.fail("upstream received %s inside an array: %.200s", r.Method, r.Raw)
			return
		}
		if r.IsNotification() {
			u.notifs.Add(1)
			continue
		}
		u.requests.Add(1)
		calls = append(calls, r)
	}
	if rand.N(2) == 0 {
		for _, r := range calls {
			u.answerLater(fc, r)
		}
		return
	}
	u.Go(func() {
		parts := make([][]byte, 0, len(calls))
		for i := len(calls) - 1; i >= 0; i-- {
			if res, ok := u.chainResult(calls[i]); ok {
				u.chainReqs.Add(1)
				parts = append(parts, testnode.ResultFrame(calls[i].ID, string(res)))
				continue
			}
			parts = append(parts, chaosAnswer(calls[i]))
		}
		if len(parts) == 0 {
			return
		}
		arr := testnode.ArrayFrame(parts)
		_ = fc.Write(arr)
		if rand.N(100) < 3 {
			u.dups.Add(1)
			_ = fc.Write(arr) // the same array twice
		}
	})
}

// chaosAnswer is the answer to an ordinary call: its params and method.
func chaosAnswer(r testnode.Req) []byte {
	params := r.Params
	if params == nil {
		params = json.RawMessage("null")
	}
	method, _ := json.Marshal(r.Method)
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":{"echo":%s,"m":%s}}`, r.ID, params, method)
}

// answer answers call r. Write errors mean the socket is gone: the
// connection's reader ends on its own.
func (u *chaosUpstream) answer(fc *testnode.Conn, r testnode.Req) {
	switch r.Method {
	case "eth_subscribe":
		// Live once its id has been written, so that no push can
		// overtake the answer, and the push loops see it either before
		// the answer was written or live, never in between: no chain
		// event falls between (pushed to nobody, and perhaps mined after
		// muxd's next eth_blockNumber was answered), as geth buffers the
		// notifications of a subscription until its id is sent.
		u.subscribes.Add(1)
		fc.Subscribe(r)
		return
	case "eth_unsubscribe":
		u.unsubs.Add(1)
		fc.Answer(r)
		return
	}
	resp := chaosAnswer(r)
	_ = fc.Write(resp)
	switch n := rand.N(100); {
	case n < 3:
		u.dups.Add(1)
		_ = fc.Write(resp) // the same answer twice
	case n < 5:
		u.unknownIDs.Add(1)
		_ = fc.Write(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"result":{"echo":["stray"],"m":"stray"}}`, 1<<40+rand.N(1<<20)))
	case n < 7:
		u.nullIDs.Add(1)
		_ = fc.Write(testnode.ErrorFrame(json.RawMessage("null"), -32600, "chaos: invalid request"))
	}
}

// pushLoop pushes every live subscription of the connection that the
// chain does not feed every ~20 ms, until the connection ends.
func (u *chaosUpstream) pushLoop(fc *testnode.Conn) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	kinds := upSubs{}
	var counter int64
	for {
		select {
		case <-fc.Done():
			return
		case <-t.C:
		}
		for id, params := range fc.LiveSubs() {
			if kinds.of(params).fedByChain() {
				continue
			}
			counter++
			u.pushes.Add(1)
			_ = fc.Push(id, fmt.Sprintf(`{"n":%d,"conn":%d,"params":%s}`, counter, fc.N, params))
		}
	}
}

// Tricks played once per distinct chain request.
const (
	trickNone = iota
	trickFail
	trickNull
	trickSilent
)

// trick picks what to do to chain request r: mostly nothing; now and then
// (once per method and params, so a retry gets the true answer) an error,
// a null for a block, or no answer at all.
func (u *chaosUpstream) trick(r testnode.Req) int {
	n := rand.N(100)
	t := trickNone
	switch {
	case n < 4:
		t = trickFail
	case n < 7 && (r.Method == "eth_getBlockByNumber" || r.Method == "eth_getBlockByHash"):
		t = trickNull
	case n < 8:
		t = trickSilent
	}
	if t == trickNone {
		return t
	}
	key := r.Method + string(r.Params)
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.tricked[key] {
		return trickNone
	}
	u.tricked[key] = true
	return t
}

// chainResult answers r from the chain if it is shaped like one of muxd's
// backfill requests (a client's calls carry a tag and are echoed). A nil
// block is answered null, as geth does.
func (u *chaosUpstream) chainResult(r testnode.Req) ([]byte, bool) {
	var args []json.RawMessage
	if len(r.Params) > 0 && json.Unmarshal(r.Params, &args) != nil {
		return nil, false
	}
	switch r.Method {
	case "eth_blockNumber":
		if len(args) != 0 {
			return nil, false
		}
		return fmt.Appendf(nil, `"0x%x"`, u.chain.headNumber()), true
	case "eth_getBlockByNumber", "eth_getBlockByHash":
		var key string
		if len(args) != 2 || string(args[1]) != "false" || json.Unmarshal(args[0], &key) != nil {
			return nil, false
		}
		var b *block
		if r.Method == "eth_getBlockByHash" {
			b = u.chain.block(key)
		} else if key == "latest" {
			b = u.chain.byNumber(u.chain.headNumber())
		} else if n, err := strconv.ParseUint(strings.TrimPrefix(key, "0x"), 16, 64); err == nil && strings.HasPrefix(key, "0x") {
			b = u.chain.byNumber(n)
		} else {
			return nil, false
		}
		if b == nil {
			return []byte("null"), true
		}
		return b.full, true
	case "eth_getLogs":
		if len(args) != 1 {
			return nil, false
		}
		f, ok := parseFilter(args[0])
		if !ok || f.Tag != "" {
			return nil, false
		}
		res, ok := u.chain.getLogs(f)
		if !ok {
			u.fail("eth_getLogs muxd sent cannot be read: %s", r.Params)
			return nil, true
		}
		return res, true
	}
	return nil, false
}

// answerChain writes the answer to chain request r: res, or an error when
// res is nil; now and then twice.
func (u *chaosUpstream) answerChain(fc *testnode.Conn, r testnode.Req, res []byte) {
	resp := testnode.ErrorFrame(r.ID, -32000, "chaos: backfill request failed")
	if res != nil {
		resp = testnode.ResultFrame(r.ID, string(res))
	}
	_ = fc.Write(resp)
	if rand.N(100) < 3 {
		u.dups.Add(1)
		_ = fc.Write(resp)
	}
}

// chainPushLoop pushes the chain's events from the from-th on to the
// connection's newHeads and chain logs subscriptions, until the
// connection ends: on a reorg the orphaned blocks' matching logs with
// removed:true first, then the new branch's heads and logs, block by
// block, as geth does.
func (u *chaosUpstream) chainPushLoop(fc *testnode.Conn, from int) {
	type live struct {
		id string
		s  *upSub
	}
	kinds := upSubs{}
	var subs []live
	for {
		evs, next := u.chain.eventsFrom(from)
		from += len(evs)
		for _, ev := range evs {
			subs = subs[:0]
			for id, params := range fc.LiveSubs() {
				if s := kinds.of(params); s.fedByChain() {
					subs = append(subs, live{id, s})
				}
			}
			for _, x := range subs {
				if x.s.filter == nil {
					continue
				}
				for _, b := range ev.orphaned {
					for i := range b.logs {
						if x.s.filter.matches(&b.logs[i]) {
							u.removedPushes.Add(1)
							_ = fc.Push(x.id, string(b.logs[i].removed))
						}
					}
				}
			}
			for _, b := range ev.added {
				for _, x := range subs {
					if x.s.heads {
						u.headPushes.Add(1)
						_ = fc.Push(x.id, string(b.head))
						continue
					}
					for i := range b.logs {
						if x.s.filter.matches(&b.logs[i]) {
							u.logPushes.Add(1)
							_ = fc.Push(x.id, string(b.logs[i].raw))
						}
					}
				}
			}
		}
		select {
		case <-fc.Done():
			return
		case <-next:
		}
	}
}
