package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// chaosUpstream is an in-process stand-in for a node that misbehaves in
// every way a shared socket must survive:
//
//   - every request is answered with {"echo": params, "m": method}, so an
//     answer routed to the wrong request is visible;
//   - each answer is delayed 0-20 ms on its own goroutine, so answers come
//     back out of order;
//   - the socket is cut (CloseNow) 200-600 ms after it was accepted, and the
//     next connection is accepted as usual;
//   - now and then an answer is sent twice, an answer with an id nobody
//     sent is sent, and an {"id":null,"error":...} object is sent;
//   - eth_subscribe gets a subscription id that is new on every connection.
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
type chaosUpstream struct {
	srv *httptest.Server
	URL string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	conns      atomic.Int64
	requests   atomic.Int64
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

func (u *chaosUpstream) Failures() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.failures...)
}

// calm stops cutting connections (the one up may still be cut once) and
// returns the chain's head number at that moment.
func (u *chaosUpstream) calm() uint64 {
	u.calmed.Store(true)
	return u.chain.headNumber()
}

func newChaosUpstream() *chaosUpstream {
	u := &chaosUpstream{chain: newChain(), tricked: map[string]bool{}}
	u.ctx, u.cancel = context.WithCancel(context.Background())
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		u.chain.run(u.ctx.Done())
	}()
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	u.URL = "ws" + strings.TrimPrefix(u.srv.URL, "http")
	return u
}

// Close cuts every connection and waits for every goroutine of the
// upstream.
func (u *chaosUpstream) Close() {
	u.cancel()
	u.srv.CloseClientConnections()
	u.srv.Close()
	u.wg.Wait()
}

// chaosConn is one accepted connection.
type chaosConn struct {
	u    *chaosUpstream
	n    int64
	ws   *websocket.Conn
	ctx  context.Context
	stop context.CancelFunc

	mu      sync.Mutex
	nextSub int
	subs    map[string]*upSub // live upstream sub id (JSON string) -> what it is
	counter int64
}

// upSub is one live subscription of a connection.
type upSub struct {
	params json.RawMessage
	heads  bool       // newHeads: pushed the chain's heads
	filter *logFilter // logs on the chain's addresses: pushed the chain's logs
}

// newUpSub reads eth_subscribe params.
func newUpSub(params json.RawMessage) *upSub {
	s := &upSub{params: params}
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

type upMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

func (u *chaosUpstream) serve(w http.ResponseWriter, r *http.Request) {
	if u.ctx.Err() != nil {
		http.Error(w, "closed", http.StatusServiceUnavailable)
		return
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return
	}
	ws.SetReadLimit(64 << 20)
	u.wg.Add(1)
	defer u.wg.Done()
	ctx, stop := context.WithCancel(u.ctx)
	c := &chaosConn{u: u, n: u.conns.Add(1), ws: ws, ctx: ctx, stop: stop, subs: map[string]*upSub{}}
	defer stop()
	defer ws.CloseNow()

	// The drop timer: the socket is cut at a random moment, mostly
	// 200-600 ms after it was accepted (before muxd can close a gap of
	// more than a few blocks), every third connection after 1-2 s. Every
	// third, not one in three at random: under -race a backfill's round
	// trip behind the requests retried on a reconnect takes a few hundred
	// ms, and a run whose dice gave no long connection had none finish.
	// Once calm (the end of the run), sockets are no longer cut.
	if !u.calmed.Load() {
		life := 200*time.Millisecond + rand.N(400*time.Millisecond)
		if c.n%3 == 0 {
			life = time.Second + rand.N(time.Second)
		}
		dropT := time.AfterFunc(life, func() { ws.CloseNow() })
		defer dropT.Stop()
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	// Only what is mined from now on is pushed on this connection.
	from, _ := u.chain.cursor()
	wg.Add(2)
	go func() {
		defer wg.Done()
		c.pushLoop()
	}()
	go func() {
		defer wg.Done()
		c.chainPushLoop(from)
	}()

	for {
		_, frame, err := ws.Read(ctx)
		if err != nil {
			stop()
			return
		}
		c.handle(frame, &wg)
	}
}

func (c *chaosConn) write(b []byte) {
	// Errors mean the socket is gone: the connection loop ends on its own.
	_ = c.ws.Write(c.ctx, websocket.MessageText, b)
}

func (c *chaosConn) handle(frame []byte, wg *sync.WaitGroup) {
	t := bytes.TrimLeft(frame, " \t\r\n")
	if len(t) > 0 && t[0] == '[' {
		c.handleArray(frame, wg)
		return
	}
	var m upMsg
	if err := json.Unmarshal(frame, &m); err != nil {
		c.u.fail("upstream received invalid JSON from muxd: %v: %.200s", err, frame)
		return
	}
	if m.ID == nil {
		c.u.notifs.Add(1)
		return
	}
	c.u.requests.Add(1)
	c.answerLater(m, wg)
}

// answerLater answers call m after a short random delay, on its own
// goroutine, so that answers come back out of order.
func (c *chaosConn) answerLater(m upMsg, wg *sync.WaitGroup) {
	if m.Method == "eth_subscribe" {
		c.u.subRecv.Add(1)
	}
	if m.Method == "eth_subscribe" || m.Method == "eth_unsubscribe" {
		// Answered at once, ahead of the backlog of retried calls a
		// reconnect brings (a node answers these from memory): the
		// connection lives long enough for muxd to close its gaps.
		c.answer(m)
		return
	}
	delay := rand.N(20 * time.Millisecond)
	if res, ok := c.u.chainResult(m); ok {
		delay = rand.N(5 * time.Millisecond)
		c.u.chainReqs.Add(1)
		switch c.u.trick(m) {
		case trickSilent:
			c.u.chainSilent.Add(1)
			return
		case trickFail:
			c.u.chainFailed.Add(1)
			res = nil
		case trickNull:
			c.u.chainNulls.Add(1)
			res = []byte("null")
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-c.ctx.Done():
				t.Stop()
				return
			}
			c.answerChain(m, res)
		}()
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-c.ctx.Done():
				t.Stop()
				return
			}
		}
		c.answer(m)
	}()
}

// handleArray takes a client batch as muxd sends it.
func (c *chaosConn) handleArray(frame []byte, wg *sync.WaitGroup) {
	var msgs []upMsg
	if err := json.Unmarshal(frame, &msgs); err != nil || len(msgs) == 0 {
		c.u.fail("upstream received an invalid array from muxd: %v: %.200s", err, frame)
		return
	}
	c.u.arrays.Add(1)
	var calls []upMsg
	for _, m := range msgs {
		if m.Method == "eth_subscribe" || m.Method == "eth_unsubscribe" {
			c.u.fail("upstream received %s inside an array: %.200s", m.Method, frame)
			return
		}
		if m.ID == nil {
			c.u.notifs.Add(1)
			continue
		}
		c.u.requests.Add(1)
		calls = append(calls, m)
	}
	if rand.N(2) == 0 {
		for _, m := range calls {
			c.answerLater(m, wg)
		}
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		parts := make([][]byte, 0, len(calls))
		for i := len(calls) - 1; i >= 0; i-- {
			if res, ok := c.u.chainResult(calls[i]); ok {
				c.u.chainReqs.Add(1)
				parts = append(parts, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":%s}`, calls[i].ID, res))
				continue
			}
			parts = append(parts, chaosAnswer(calls[i]))
		}
		if len(parts) == 0 {
			return
		}
		arr := append(append([]byte{'['}, bytes.Join(parts, []byte{','})...), ']')
		c.write(arr)
		if rand.N(100) < 3 {
			c.u.dups.Add(1)
			c.write(arr) // the same array twice
		}
	}()
}

// chaosAnswer is the answer to an ordinary call: its params and method.
func chaosAnswer(m upMsg) []byte {
	params := m.Params
	if params == nil {
		params = json.RawMessage("null")
	}
	method, _ := json.Marshal(m.Method)
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":{"echo":%s,"m":%s}}`, m.ID, params, method)
}

func (c *chaosConn) answer(m upMsg) {
	switch m.Method {
	case "eth_subscribe":
		c.u.subscribes.Add(1)
		c.mu.Lock()
		c.nextSub++
		subID := fmt.Sprintf(`"0x%x-%x"`, c.n, c.nextSub)
		// Live once its id has been written, so that no push can
		// overtake the answer; the hold spans both, so that no chain
		// event falls between (pushed to nobody, and perhaps mined after
		// muxd's next eth_blockNumber was answered): geth buffers the
		// notifications of a subscription until its id is sent.
		c.write(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID, subID))
		c.subs[subID] = newUpSub(m.Params)
		c.mu.Unlock()
		return
	case "eth_unsubscribe":
		c.u.unsubs.Add(1)
		var args []json.RawMessage
		_ = json.Unmarshal(m.Params, &args)
		ok := false
		if len(args) == 1 {
			c.mu.Lock()
			_, ok = c.subs[string(args[0])]
			delete(c.subs, string(args[0]))
			c.mu.Unlock()
		}
		c.write(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":%t}`, m.ID, ok))
		return
	}
	resp := chaosAnswer(m)
	c.write(resp)
	switch r := rand.N(100); {
	case r < 3:
		c.u.dups.Add(1)
		c.write(resp) // the same answer twice
	case r < 5:
		c.u.unknownIDs.Add(1)
		c.write(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"result":{"echo":["stray"],"m":"stray"}}`, 1<<40+rand.N(1<<20)))
	case r < 7:
		c.u.nullIDs.Add(1)
		c.write([]byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"chaos: invalid request"}}`))
	}
}

// pushLoop pushes every live subscription of the connection that the
// chain does not feed every ~20 ms.
func (c *chaosConn) pushLoop() {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	type live struct {
		id     string
		params json.RawMessage
	}
	var subs []live
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		subs = subs[:0]
		c.mu.Lock()
		for id, p := range c.subs {
			if !p.heads && p.filter == nil {
				subs = append(subs, live{id, p.params})
			}
		}
		c.mu.Unlock()
		for _, s := range subs {
			c.mu.Lock()
			c.counter++
			n := c.counter
			c.mu.Unlock()
			c.u.pushes.Add(1)
			c.write(fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":%s,"result":{"n":%d,"conn":%d,"params":%s}}}`, s.id, n, c.n, s.params))
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

// trick picks what to do to chain request m: mostly nothing; now and then
// (once per method and params, so a retry gets the true answer) an error,
// a null for a block, or no answer at all.
func (u *chaosUpstream) trick(m upMsg) int {
	r := rand.N(100)
	t := trickNone
	switch {
	case r < 4:
		t = trickFail
	case r < 7 && (m.Method == "eth_getBlockByNumber" || m.Method == "eth_getBlockByHash"):
		t = trickNull
	case r < 8:
		t = trickSilent
	}
	if t == trickNone {
		return t
	}
	key := m.Method + string(m.Params)
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.tricked[key] {
		return trickNone
	}
	u.tricked[key] = true
	return t
}

// chainResult answers m from the chain if it is shaped like one of muxd's
// backfill requests (a client's calls carry a tag and are echoed). A nil
// block is answered null, as geth does.
func (u *chaosUpstream) chainResult(m upMsg) ([]byte, bool) {
	var args []json.RawMessage
	if len(m.Params) > 0 && json.Unmarshal(m.Params, &args) != nil {
		return nil, false
	}
	switch m.Method {
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
		if m.Method == "eth_getBlockByHash" {
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
			u.fail("eth_getLogs muxd sent cannot be read: %s", m.Params)
			return nil, true
		}
		return res, true
	}
	return nil, false
}

// answerChain writes the answer to chain request m: res, or an error when
// res is nil; now and then twice.
func (c *chaosConn) answerChain(m upMsg, res []byte) {
	var resp []byte
	if res == nil {
		resp = fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32000,"message":"chaos: backfill request failed"}}`, m.ID)
	} else {
		resp = fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID, res)
	}
	c.write(resp)
	if rand.N(100) < 3 {
		c.u.dups.Add(1)
		c.write(resp)
	}
}

// chainPushLoop pushes the chain's events from the from-th on to the
// connection's newHeads and chain logs subscriptions: on a reorg the
// orphaned blocks' matching logs with removed:true first, then the new
// branch's heads and logs, block by block, as geth does.
func (c *chaosConn) chainPushLoop(from int) {
	var subs []struct {
		id string
		s  *upSub
	}
	for {
		evs, next := c.u.chain.eventsFrom(from)
		from += len(evs)
		for _, ev := range evs {
			subs = subs[:0]
			c.mu.Lock()
			for id, s := range c.subs {
				if s.heads || s.filter != nil {
					subs = append(subs, struct {
						id string
						s  *upSub
					}{id, s})
				}
			}
			c.mu.Unlock()
			for _, x := range subs {
				if x.s.filter == nil {
					continue
				}
				for _, b := range ev.orphaned {
					for i := range b.logs {
						if x.s.filter.matches(&b.logs[i]) {
							c.u.removedPushes.Add(1)
							c.push(x.id, b.logs[i].removed)
						}
					}
				}
			}
			for _, b := range ev.added {
				for _, x := range subs {
					if x.s.heads {
						c.u.headPushes.Add(1)
						c.push(x.id, b.head)
						continue
					}
					for i := range b.logs {
						if x.s.filter.matches(&b.logs[i]) {
							c.u.logPushes.Add(1)
							c.push(x.id, b.logs[i].raw)
						}
					}
				}
			}
		}
		select {
		case <-c.ctx.Done():
			return
		case <-next:
		}
	}
}

func (c *chaosConn) push(id string, result []byte) {
	c.write(fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":%s,"result":%s}}`, id, result))
}
