package mux

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// testTimeout bounds every wait in these tests, so that a bug fails a test
// instead of hanging it.
const testTimeout = 15 * time.Second

// fakeReq is one JSON-RPC message the fake upstream received.
type fakeReq struct {
	Raw    []byte          // the message's bytes as received
	ID     json.RawMessage // nil for a notification
	Method string
	Params json.RawMessage
	// Frame numbers the frame it came in on its connection (1 for the
	// first); Array is that frame's element count, 0 when it was not an
	// array, and Index its place in it.
	Frame, Array, Index int
}

// IsNotification reports whether the message had no id member.
func (r fakeReq) IsNotification() bool { return r.ID == nil }

// fakeUpstream is an in-process stand-in for an Ethereum node's WebSocket
// endpoint whose behaviour each test scripts through Handle. By default it
// answers every request with {"method":M,"params":P} (so crosstalk between
// clients is visible in the answer), answers eth_subscribe with a fresh
// upstream subscription id ("0x"+counter, never reused across
// connections), eth_unsubscribe with true, and records everything.
//
// Like geth, it answers malformed JSON with -32700 and then closes the
// socket: if muxd ever forwarded a client's garbage, the connection count
// would show it.
type fakeUpstream struct {
	t   *testing.T
	srv *httptest.Server
	URL string // ws:// URL

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every recorded event
	conns   []*fakeConn
	nextSub int
	// handle, when set, is called on the connection's reader goroutine
	// for every message received (requests and notifications) instead of
	// the default answer. It may call fc.Answer to get the default.
	handle func(fc *fakeConn, r fakeReq)
	// reorder makes every connection answer in LIFO order: answers are
	// stacked by the reader and written, newest first, by a writer
	// goroutine whenever it gets to run.
	reorder bool
	// malformed counts frames that were not valid JSON.
	malformed int
	// batches counts frames that were JSON arrays.
	batches int
}

// fakeConn is one connection to the fake upstream.
type fakeConn struct {
	f  *fakeUpstream
	N  int // 1 for the first connection
	ws *websocket.Conn

	frames int // frames received; owned by the connection's reader

	// guarded by f.mu
	reqs   []fakeReq
	subs   map[string]json.RawMessage // live upstream sub id (JSON string) -> params
	subKey map[string]int             // params -> eth_subscribe count on this connection
	unsubs []string                   // upstream ids unsubscribed on this connection
	closed bool

	// subMu makes writing a subscription's answer and recording it live
	// one step for unsubscribe, which muxd may send as soon as it has
	// read the answer.
	subMu sync.Mutex

	lifoMu   sync.Mutex
	lifo     []fakeOut
	lifoWake chan struct{}
}

func newFakeUpstream(t *testing.T) *fakeUpstream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &fakeUpstream{t: t, ctx: ctx, cancel: cancel, changed: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	f.URL = "ws" + strings.TrimPrefix(f.srv.URL, "http")
	t.Cleanup(func() {
		f.cancel()
		f.mu.Lock()
		conns := append([]*fakeConn(nil), f.conns...)
		f.mu.Unlock()
		for _, c := range conns {
			c.ws.CloseNow()
		}
		f.srv.Close()
		waitGroup(t, &f.wg, "fake upstream goroutines")
	})
	return f
}

// waitGroup waits for wg, failing the test if it takes longer than
// testTimeout.
func waitGroup(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Errorf("%s did not finish", what)
	}
}

// SetHandler scripts the fake's answers from now on.
func (f *fakeUpstream) SetHandler(h func(fc *fakeConn, r fakeReq)) {
	f.mu.Lock()
	f.handle = h
	f.mu.Unlock()
}

func (f *fakeUpstream) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// Wait blocks until cond (called with f.mu held) holds, failing the test
// after testTimeout. It waits on the fake's events, never by sleeping.
func (f *fakeUpstream) Wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(testTimeout)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		ok := cond()
		ch := f.changed
		f.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("fake upstream: timed out waiting for %s", what)
		}
	}
}

// Conn returns connection n (1-based), waiting for it to be made.
func (f *fakeUpstream) Conn(t *testing.T, n int) *fakeConn {
	t.Helper()
	var fc *fakeConn
	f.Wait(t, fmt.Sprintf("upstream connection %d", n), func() bool {
		if len(f.conns) >= n {
			fc = f.conns[n-1]
			return true
		}
		return false
	})
	return fc
}

// NumConns is the number of connections made so far.
func (f *fakeUpstream) NumConns() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.conns)
}

type fakeCounts struct{ malformed, batches int }

func (f *fakeUpstream) counts() fakeCounts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fakeCounts{f.malformed, f.batches}
}

// Received returns a copy of every message received on every connection.
func (f *fakeUpstream) Received() []fakeReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeReq
	for _, c := range f.conns {
		out = append(out, c.reqs...)
	}
	return out
}

// Reqs returns a copy of the messages received on this connection.
func (fc *fakeConn) Reqs() []fakeReq {
	fc.f.mu.Lock()
	defer fc.f.mu.Unlock()
	return append([]fakeReq(nil), fc.reqs...)
}

// WaitReqs waits until the connection has received at least n messages and
// returns them.
func (fc *fakeConn) WaitReqs(t *testing.T, n int) []fakeReq {
	t.Helper()
	var out []fakeReq
	fc.f.Wait(t, fmt.Sprintf("%d messages on upstream connection %d", n, fc.N), func() bool {
		if len(fc.reqs) >= n {
			out = append([]fakeReq(nil), fc.reqs...)
			return true
		}
		return false
	})
	return out
}

// LiveSubs returns the upstream subscription ids live on this connection.
func (fc *fakeConn) LiveSubs() map[string]json.RawMessage {
	fc.f.mu.Lock()
	defer fc.f.mu.Unlock()
	out := make(map[string]json.RawMessage, len(fc.subs))
	for k, v := range fc.subs {
		out[k] = v
	}
	return out
}

// SubscribeCounts returns, per canonical params, how many eth_subscribe
// this connection received.
func (fc *fakeConn) SubscribeCounts() map[string]int {
	fc.f.mu.Lock()
	defer fc.f.mu.Unlock()
	out := make(map[string]int, len(fc.subKey))
	for k, v := range fc.subKey {
		out[k] = v
	}
	return out
}

// Unsubs returns the upstream ids unsubscribed on this connection.
func (fc *fakeConn) Unsubs() []string {
	fc.f.mu.Lock()
	defer fc.f.mu.Unlock()
	return append([]string(nil), fc.unsubs...)
}

// WaitLiveSubs waits until n subscriptions are live on the connection.
func (fc *fakeConn) WaitLiveSubs(t *testing.T, n int) map[string]json.RawMessage {
	t.Helper()
	fc.f.Wait(t, fmt.Sprintf("%d live subscriptions on upstream connection %d", n, fc.N), func() bool {
		return len(fc.subs) == n
	})
	return fc.LiveSubs()
}

// Write sends one frame to muxd on this connection.
func (fc *fakeConn) Write(b []byte) error {
	ctx, cancel := context.WithTimeout(fc.f.ctx, testTimeout)
	defer cancel()
	return fc.ws.Write(ctx, websocket.MessageText, b)
}

// MustWrite is Write for the test goroutine.
func (fc *fakeConn) MustWrite(t *testing.T, b []byte) {
	t.Helper()
	if err := fc.Write(b); err != nil {
		t.Fatalf("fake upstream write: %v", err)
	}
}

// Drop closes the connection abruptly, as a crashing node would.
func (fc *fakeConn) Drop() { fc.ws.CloseNow() }

// Push sends an eth_subscription notification for upstream id upID (a JSON
// string) with the given raw result.
func (fc *fakeConn) Push(upID string, result string) error {
	return fc.Write(pushFrame(upID, result))
}

func pushFrame(upID, result string) []byte {
	return []byte(`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":` + upID + `,"result":` + result + `}}`)
}

// PushAll pushes result to every subscription live on the connection.
func (fc *fakeConn) PushAll(t *testing.T, result string) {
	t.Helper()
	for id := range fc.LiveSubs() {
		if err := fc.Push(id, result); err != nil {
			t.Fatalf("push: %v", err)
		}
	}
}

// echo is the default answer: {"method":M,"params":P}.
func echo(r fakeReq) []byte {
	params := r.Params
	if params == nil {
		params = json.RawMessage("null")
	}
	m, _ := json.Marshal(r.Method)
	var b bytes.Buffer
	b.WriteString(`{"jsonrpc":"2.0","id":`)
	b.Write(r.ID)
	b.WriteString(`,"result":{"method":`)
	b.Write(m)
	b.WriteString(`,"params":`)
	b.Write(params)
	b.WriteString(`}}`)
	return b.Bytes()
}

// resultFrame builds {"jsonrpc":"2.0","id":id,"result":result}.
func resultFrame(id json.RawMessage, result string) []byte {
	return []byte(`{"jsonrpc":"2.0","id":` + string(id) + `,"result":` + result + `}`)
}

// errorFrame builds an error response.
func errorFrame(id json.RawMessage, code int, msg string) []byte {
	return []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":%d,"message":%q}}`, id, code, msg))
}

// fakeOut is one answer to write; sub, when set, is the upstream
// subscription it creates, recorded as live once the answer is on the wire
// so that a test waiting for it can push right after.
type fakeOut struct {
	b           []byte
	sub, params string
}

// Answer is the default behaviour for r: subscriptions are created and
// removed, everything else is echoed. Notifications get nothing.
func (fc *fakeConn) Answer(r fakeReq) {
	if r.IsNotification() {
		return
	}
	switch r.Method {
	case "eth_subscribe":
		fc.send(fc.subscribeAnswer(r))
	case "eth_unsubscribe":
		fc.send(fakeOut{b: fc.unsubscribe(r)})
	default:
		fc.send(fakeOut{b: echo(r)})
	}
}

// Subscribe answers eth_subscribe r at once (never reordered) and returns
// the new upstream subscription id, live from now on.
func (fc *fakeConn) Subscribe(r fakeReq) string {
	o := fc.subscribeAnswer(r)
	fc.write(o)
	return o.sub
}

func (fc *fakeConn) subscribeAnswer(r fakeReq) fakeOut {
	f := fc.f
	f.mu.Lock()
	f.nextSub++
	id := fmt.Sprintf(`"0x%x"`, f.nextSub)
	f.mu.Unlock()
	return fakeOut{b: resultFrame(r.ID, id), sub: id, params: string(r.Params)}
}

func (fc *fakeConn) unsubscribe(r fakeReq) []byte {
	var args []string
	_ = json.Unmarshal(r.Params, &args)
	ok := false
	fc.subMu.Lock()
	defer fc.subMu.Unlock()
	f := fc.f
	f.mu.Lock()
	for _, a := range args {
		q, _ := json.Marshal(a)
		if _, live := fc.subs[string(q)]; live {
			delete(fc.subs, string(q))
			ok = true
		}
		fc.unsubs = append(fc.unsubs, string(q))
	}
	f.notifyLocked()
	f.mu.Unlock()
	return resultFrame(r.ID, fmt.Sprint(ok))
}

// Send writes b as an answer, in LIFO order when the fake reorders.
func (fc *fakeConn) Send(b []byte) { fc.send(fakeOut{b: b}) }

func (fc *fakeConn) send(o fakeOut) {
	if fc.f.reorder {
		fc.lifoMu.Lock()
		fc.lifo = append(fc.lifo, o)
		fc.lifoMu.Unlock()
		select {
		case fc.lifoWake <- struct{}{}:
		default:
		}
		return
	}
	fc.write(o)
}

func (fc *fakeConn) write(o fakeOut) {
	if o.sub != "" {
		fc.subMu.Lock()
		defer fc.subMu.Unlock()
	}
	if fc.Write(o.b) != nil {
		return
	}
	if o.sub != "" {
		f := fc.f
		f.mu.Lock()
		fc.subs[o.sub] = json.RawMessage(o.params)
		fc.subKey[o.params]++
		f.notifyLocked()
		f.mu.Unlock()
	}
}

func (fc *fakeConn) lifoLoop() {
	defer fc.f.wg.Done()
	for {
		select {
		case <-fc.f.ctx.Done():
			return
		case <-fc.lifoWake:
		}
		fc.lifoMu.Lock()
		batch := fc.lifo
		fc.lifo = nil
		fc.lifoMu.Unlock()
		for i := len(batch) - 1; i >= 0; i-- {
			fc.write(batch[i])
		}
	}
}

func (f *fakeUpstream) serve(w http.ResponseWriter, r *http.Request) {
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return
	}
	ws.SetReadLimit(-1)
	f.wg.Add(1)
	defer f.wg.Done()
	fc := &fakeConn{f: f, ws: ws, subs: map[string]json.RawMessage{}, subKey: map[string]int{}, lifoWake: make(chan struct{}, 1)}
	f.mu.Lock()
	f.conns = append(f.conns, fc)
	fc.N = len(f.conns)
	f.notifyLocked()
	f.mu.Unlock()
	if f.reorder {
		f.wg.Add(1)
		go fc.lifoLoop()
	}
	defer func() {
		ws.CloseNow()
		f.mu.Lock()
		fc.closed = true
		f.notifyLocked()
		f.mu.Unlock()
	}()
	for {
		_, b, err := ws.Read(f.ctx)
		if err != nil {
			return
		}
		if !f.received(fc, b) {
			return
		}
	}
}

// received handles one frame; false means the fake closes the connection.
func (f *fakeUpstream) received(fc *fakeConn, b []byte) bool {
	type msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	var elems []json.RawMessage
	var msgs []msg
	var err error
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) > 0 && t[0] == '[' {
		f.mu.Lock()
		f.batches++
		f.mu.Unlock()
		if err = json.Unmarshal(b, &elems); err == nil {
			msgs = make([]msg, len(elems))
			for i, e := range elems {
				_ = json.Unmarshal(e, &msgs[i])
			}
		}
	} else {
		elems = []json.RawMessage{b}
		msgs = make([]msg, 1)
		err = json.Unmarshal(b, &msgs[0])
	}
	if err != nil && !json.Valid(b) {
		f.mu.Lock()
		f.malformed++
		f.notifyLocked()
		f.mu.Unlock()
		fc.write(fakeOut{b: []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`)})
		fc.ws.Close(websocket.StatusNormalClosure, "")
		return false
	}
	fc.frames++
	array := 0
	if len(msgs) > 0 && (len(elems) > 1 || bytes.TrimLeft(b, " \t\r\n")[0] == '[') {
		array = len(elems)
	}
	for i, e := range elems {
		m := msgs[i]
		r := fakeReq{Raw: e, ID: m.ID, Method: m.Method, Params: m.Params, Frame: fc.frames, Array: array, Index: i}
		f.mu.Lock()
		fc.reqs = append(fc.reqs, r)
		h := f.handle
		f.notifyLocked()
		f.mu.Unlock()
		if h != nil {
			h(fc, r)
		} else {
			fc.Answer(r)
		}
	}
	return true
}
