package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
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
//   - eth_subscribe gets a subscription id that is new on every connection,
//     and every live subscription is pushed every ~20 ms with a counter and
//     the subscription's params.
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

	mu       sync.Mutex
	failures []string
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

func newChaosUpstream() *chaosUpstream {
	u := &chaosUpstream{}
	u.ctx, u.cancel = context.WithCancel(context.Background())
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
	subs    map[string]json.RawMessage // live upstream sub id (JSON string) -> params
	counter int64
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
	c := &chaosConn{u: u, n: u.conns.Add(1), ws: ws, ctx: ctx, stop: stop, subs: map[string]json.RawMessage{}}
	defer stop()
	defer ws.CloseNow()

	// The drop timer: the socket is cut at a random moment.
	life := 200*time.Millisecond + rand.N(400*time.Millisecond)
	dropT := time.AfterFunc(life, func() { ws.CloseNow() })
	defer dropT.Stop()

	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.pushLoop()
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
	delay := rand.N(20 * time.Millisecond)
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
		c.mu.Unlock()
		c.write(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID, subID))
		// Live only once its id has been written: no push can overtake
		// the answer.
		c.mu.Lock()
		c.subs[subID] = m.Params
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

// pushLoop pushes every live subscription of the connection every ~20 ms.
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
			subs = append(subs, live{id, p})
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
