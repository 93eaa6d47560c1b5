package testnode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/coder/websocket"
)

// Req is one JSON-RPC message the node received.
type Req struct {
	Raw    []byte          // the message's bytes as received
	ID     json.RawMessage // nil for a notification
	Method string
	Params json.RawMessage
	// Frame numbers the frame it came in on its connection (1 for the
	// first); Array is that frame's element count, 0 when it was not an
	// array, and Index its place in it.
	Frame, Array, Index int
	// Err is why the message, valid JSON, could not be read as a JSON-RPC
	// message object (a number, a method that is no string, ...); nil when
	// it could. Such a message reaches the handler with what could be read.
	Err error
}

// IsNotification reports whether the message had no id member.
func (r Req) IsNotification() bool { return r.ID == nil }

// Node is an in-process stand-in for an Ethereum node's WebSocket
// endpoint, listening on 127.0.0.1:0, whose behaviour each test scripts
// through SetHandler. By default it answers every request with [Echo] (so
// crosstalk between clients is visible in the answer), eth_subscribe with
// a fresh upstream subscription id ("0x"+counter, never reused across
// connections), eth_unsubscribe with whether the id was live, and records
// everything.
//
// Like geth, it answers malformed JSON with -32700 and then closes the
// socket: if muxd ever forwarded a client's garbage, the connection count
// would show it.
type Node struct {
	srv *httptest.Server
	URL string // ws:// URL

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once

	refuse atomic.Bool // handshakes are answered 503

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every recorded event
	conns   []*Conn
	nextSub int
	// handle, when set, is called on the connection's reader goroutine
	// for every message received (requests and notifications) instead of
	// the default answer. It may call fc.Answer to get the default.
	handle func(fc *Conn, r Req)
	// onConnect, when set, runs on the connection's reader goroutine
	// for every new connection, before its first message is read.
	onConnect func(fc *Conn)
	// reorder makes every connection answer in LIFO order: answers are
	// stacked by the reader and written, newest first, by a writer
	// goroutine whenever it gets to run.
	reorder bool
	// handleArray, when set, is called on the connection's reader
	// goroutine with every array frame's messages, instead of handle (or
	// the default answer) for each.
	handleArray func(fc *Conn, reqs []Req)
	// malformed counts frames that were not valid JSON.
	malformed int
	// batches counts frames that were JSON arrays.
	batches int
	// emptyArrays counts frames that were empty JSON arrays.
	emptyArrays int
}

// New starts a node; t.Cleanup closes it and waits for its goroutines.
func New(t testing.TB) *Node {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &Node{ctx: ctx, cancel: cancel, changed: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	f.URL = "ws" + strings.TrimPrefix(f.srv.URL, "http")
	t.Cleanup(func() {
		f.Close()
		WaitGroup(t, &f.wg, "fake node goroutines")
	})
	return f
}

// Close cuts every connection and stops the node; later handshakes fail.
// Its goroutines end soon after (t.Cleanup waits for them).
func (f *Node) Close() {
	f.closeOnce.Do(func() {
		f.cancel()
		f.mu.Lock()
		conns := append([]*Conn(nil), f.conns...)
		f.mu.Unlock()
		for _, c := range conns {
			c.ws.CloseNow()
		}
		f.srv.Close()
	})
}

// SetHandler scripts the node's answers from now on.
func (f *Node) SetHandler(h func(fc *Conn, r Req)) {
	f.mu.Lock()
	f.handle = h
	f.mu.Unlock()
}

// SetOnConnect runs h for every connection made from now on, on the
// connection's reader goroutine before its first message is read: what h
// sets up (a timer that cuts the connection, a cursor into the test's
// events) is in place before any message is handled. h must not block; to
// push on a schedule of its own it starts a goroutine with [Node.Go] that
// returns by fc.Done().
func (f *Node) SetOnConnect(h func(fc *Conn)) {
	f.mu.Lock()
	f.onConnect = h
	f.mu.Unlock()
}

// Reorder makes connections made from now on answer in LIFO order.
func (f *Node) Reorder() {
	f.mu.Lock()
	f.reorder = true
	f.mu.Unlock()
}

// SetArrayHandler hands every array frame's messages, from now on, to h
// at once instead of one by one to the handler. (*Conn).AnswerArray
// answers them as geth answers a batch.
func (f *Node) SetArrayHandler(h func(fc *Conn, reqs []Req)) {
	f.mu.Lock()
	f.handleArray = h
	f.mu.Unlock()
}

// Refuse makes the node refuse (true) or accept (false) handshakes from
// now on; refused ones get HTTP 503.
func (f *Node) Refuse(on bool) { f.refuse.Store(on) }

// Refused reports whether the node refuses handshakes.
func (f *Node) Refused() bool { return f.refuse.Load() }

// Done is closed when the node is closed.
func (f *Node) Done() <-chan struct{} { return f.ctx.Done() }

// Go runs fn on a goroutine the node waits for when it is closed; fn must
// return by the node's or its connection's end.
func (f *Node) Go(fn func()) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		fn()
	}()
}

func (f *Node) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// Wait blocks until cond holds, failing the test after Timeout. cond is
// called without the node's lock (it may call the node's accessors) each
// time the node records something. It waits on the node's events, never by
// sleeping.
func (f *Node) Wait(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Await(t, what, func() (bool, <-chan struct{}) {
		f.mu.Lock()
		ch := f.changed
		f.mu.Unlock()
		return cond(), ch
	})
}

// Conn returns connection n (1-based), waiting for it to be made.
func (f *Node) Conn(t testing.TB, n int) *Conn {
	t.Helper()
	f.Wait(t, fmt.Sprintf("upstream connection %d", n), func() bool { return f.NumConns() >= n })
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conns[n-1]
}

// NumConns is the number of connections made so far.
func (f *Node) NumConns() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.conns)
}

// Counts are the node's frame counters.
type Counts struct {
	Malformed   int // frames that were not valid JSON
	Batches     int // frames that were JSON arrays
	EmptyArrays int // frames that were empty JSON arrays (no handler sees them)
}

// Counts returns the node's frame counters.
func (f *Node) Counts() Counts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Counts{f.malformed, f.batches, f.emptyArrays}
}

// Received returns a copy of every message received on every connection.
func (f *Node) Received() []Req {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Req
	for _, c := range f.conns {
		out = append(out, c.reqs...)
	}
	return out
}

// Seen is how many messages of method the node has received.
func (f *Node) Seen(method string) int {
	n := 0
	for _, r := range f.Received() {
		if r.Method == method {
			n++
		}
	}
	return n
}

// WaitSeen waits until the node has received n messages of method.
func (f *Node) WaitSeen(t testing.TB, method string, n int) {
	t.Helper()
	f.Wait(t, fmt.Sprintf("%d %s upstream", n, method), func() bool { return f.Seen(method) >= n })
}

func (f *Node) serve(w http.ResponseWriter, r *http.Request) {
	// Counted from the start, while the request is still one httptest's
	// Close waits for: counted only after the WebSocket handshake (which
	// hijacks the connection, so Close no longer waits), the Add could
	// race the cleanup's Wait.
	f.wg.Add(1)
	defer f.wg.Done()
	if f.refuse.Load() || f.ctx.Err() != nil {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return
	}
	ws.SetReadLimit(-1)
	fc := &Conn{f: f, ws: ws, Header: r.Header.Clone(), done: make(chan struct{}),
		subs: map[string]json.RawMessage{}, subKey: map[string]int{}, lifoWake: make(chan struct{}, 1)}
	f.mu.Lock()
	f.conns = append(f.conns, fc)
	fc.N = len(f.conns)
	onConnect := f.onConnect
	fc.reorder = f.reorder
	f.notifyLocked()
	f.mu.Unlock()
	if fc.reorder {
		f.Go(fc.lifoLoop)
	}
	defer func() {
		ws.CloseNow()
		f.mu.Lock()
		fc.closed = true
		close(fc.done)
		f.notifyLocked()
		f.mu.Unlock()
	}()
	if onConnect != nil {
		onConnect(fc)
	}
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

// received handles one frame; false means the node closes the connection.
func (f *Node) received(fc *Conn, b []byte) bool {
	type msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	var elems []json.RawMessage
	var msgs []msg
	var errs []error // per message: why it is not a message object
	var err error
	isArray := false
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) > 0 && t[0] == '[' {
		isArray = true
		f.mu.Lock()
		f.batches++
		f.mu.Unlock()
		if err = json.Unmarshal(b, &elems); err == nil {
			msgs = make([]msg, len(elems))
			errs = make([]error, len(elems))
			for i, e := range elems {
				errs[i] = json.Unmarshal(e, &msgs[i])
			}
			if len(elems) == 0 {
				f.mu.Lock()
				f.emptyArrays++
				f.notifyLocked()
				f.mu.Unlock()
			}
		}
	} else {
		elems = []json.RawMessage{b}
		msgs = make([]msg, 1)
		err = json.Unmarshal(b, &msgs[0])
		errs = []error{err}
	}
	if err != nil && !json.Valid(b) {
		f.mu.Lock()
		f.malformed++
		f.notifyLocked()
		f.mu.Unlock()
		fc.write(out{b: []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`)})
		fc.ws.Close(websocket.StatusNormalClosure, "")
		return false
	}
	fc.frames++
	array := 0
	if len(msgs) > 0 && (len(elems) > 1 || isArray) {
		array = len(elems)
	}
	reqs := make([]Req, len(elems))
	for i, e := range elems {
		m := msgs[i]
		reqs[i] = Req{Raw: e, ID: m.ID, Method: m.Method, Params: m.Params, Frame: fc.frames, Array: array, Index: i, Err: errs[i]}
	}
	f.mu.Lock()
	fc.reqs = append(fc.reqs, reqs...)
	h, ha := f.handle, f.handleArray
	f.notifyLocked()
	f.mu.Unlock()
	switch {
	case array > 0 && ha != nil:
		ha(fc, reqs)
	case h != nil:
		for _, r := range reqs {
			h(fc, r)
		}
	default:
		for _, r := range reqs {
			fc.Answer(r)
		}
	}
	// Again once handled: a waiter's condition may read what the handler
	// changed (a count of its own), which the notification above came too
	// early to show.
	f.mu.Lock()
	f.notifyLocked()
	f.mu.Unlock()
	return true
}
