package testnode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/coder/websocket"
)

// Conn is one connection to the node.
type Conn struct {
	f      *Node
	N      int         // 1 for the first connection
	Header http.Header // the handshake's request headers
	ws     *websocket.Conn
	done   chan struct{} // closed when the connection has ended

	frames  int  // owned by the connection's reader goroutine
	reorder bool // set before the reader starts

	// guarded by f.mu
	reqs   []Req
	subs   map[string]json.RawMessage // live upstream sub id (JSON string) -> params
	subKey map[string]int             // params -> eth_subscribe count on this connection
	unsubs []string                   // upstream ids unsubscribed on this connection
	closed bool

	// subMu makes writing a subscription's answer and recording it live
	// one step for unsubscribe, which muxd may send as soon as it has
	// read the answer, and for LiveSubs, so that a push loop sees a
	// subscription either before its answer was written or once it is
	// live, never in between (an event it skips was then sent before the
	// answer).
	subMu sync.Mutex

	lifoMu   sync.Mutex
	lifo     []out
	lifoWake chan struct{}
}

// out is one answer to write; sub, when set, is the upstream subscription
// it creates, recorded as live once the answer is on the wire so that a
// test waiting for it can push right after.
type out struct {
	b           []byte
	sub, params string
}

// Done is closed when the connection has ended.
func (fc *Conn) Done() <-chan struct{} { return fc.done }

// Closed reports whether the connection has ended.
func (fc *Conn) Closed() bool {
	fc.f.mu.Lock()
	defer fc.f.mu.Unlock()
	return fc.closed
}

// Reqs returns a copy of the messages received on this connection.
func (fc *Conn) Reqs() []Req {
	fc.f.mu.Lock()
	defer fc.f.mu.Unlock()
	return append([]Req(nil), fc.reqs...)
}

// WaitReqs waits until the connection has received at least n messages and
// returns them.
func (fc *Conn) WaitReqs(t testing.TB, n int) []Req {
	t.Helper()
	var got []Req
	fc.f.Wait(t, fmt.Sprintf("%d messages on upstream connection %d", n, fc.N), func() bool {
		got = fc.Reqs()
		return len(got) >= n
	})
	return got
}

// LiveSubs returns the upstream subscription ids live on this connection
// and their params. It waits for a subscription answer being written: a
// subscription it leaves out was answered after it returned.
func (fc *Conn) LiveSubs() map[string]json.RawMessage {
	fc.subMu.Lock()
	defer fc.subMu.Unlock()
	fc.f.mu.Lock()
	defer fc.f.mu.Unlock()
	m := make(map[string]json.RawMessage, len(fc.subs))
	for k, v := range fc.subs {
		m[k] = v
	}
	return m
}

// SubscribeCounts returns, per canonical params, how many eth_subscribe
// this connection received.
func (fc *Conn) SubscribeCounts() map[string]int {
	fc.f.mu.Lock()
	defer fc.f.mu.Unlock()
	m := make(map[string]int, len(fc.subKey))
	for k, v := range fc.subKey {
		m[k] = v
	}
	return m
}

// Unsubs returns the upstream ids unsubscribed on this connection.
func (fc *Conn) Unsubs() []string {
	fc.f.mu.Lock()
	defer fc.f.mu.Unlock()
	return append([]string(nil), fc.unsubs...)
}

// WaitLiveSubs waits until n subscriptions are live on the connection.
func (fc *Conn) WaitLiveSubs(t testing.TB, n int) map[string]json.RawMessage {
	t.Helper()
	fc.f.Wait(t, fmt.Sprintf("%d live subscriptions on upstream connection %d", n, fc.N), func() bool {
		return len(fc.LiveSubs()) == n
	})
	return fc.LiveSubs()
}

// Write sends one frame to muxd on this connection.
func (fc *Conn) Write(b []byte) error {
	ctx, cancel := context.WithTimeout(fc.f.ctx, Timeout)
	defer cancel()
	return fc.ws.Write(ctx, websocket.MessageText, b)
}

// MustWrite is Write for the test goroutine.
func (fc *Conn) MustWrite(t testing.TB, b []byte) {
	t.Helper()
	if err := fc.Write(b); err != nil {
		t.Fatalf("fake node write: %v", err)
	}
}

// Drop closes the connection abruptly, as a crashing node would.
func (fc *Conn) Drop() { fc.ws.CloseNow() }

// Push sends an eth_subscription notification for upstream id upID (a JSON
// string) with the given raw result.
func (fc *Conn) Push(upID string, result string) error {
	return fc.Write(PushFrame(upID, result))
}

// PushAll pushes result to every subscription live on the connection.
func (fc *Conn) PushAll(t testing.TB, result string) {
	t.Helper()
	for id := range fc.LiveSubs() {
		if err := fc.Push(id, result); err != nil {
			t.Fatalf("push: %v", err)
		}
	}
}

// Answer is the default behaviour for r: subscriptions are created and
// removed, everything else is echoed. Notifications get nothing.
func (fc *Conn) Answer(r Req) {
	if r.IsNotification() {
		return
	}
	fc.send(fc.answerOf(r))
}

// answerOf is the default answer to request r.
func (fc *Conn) answerOf(r Req) out {
	switch r.Method {
	case "eth_subscribe":
		return fc.subscribeAnswer(r)
	case "eth_unsubscribe":
		return out{b: fc.unsubscribe(r)}
	default:
		return out{b: Echo(r)}
	}
}

// AnswerArray answers the calls among reqs (an array frame) as geth
// answers a batch: with one array of their default answers, in their
// order, and nothing when none is a call.
func (fc *Conn) AnswerArray(reqs []Req) {
	var answers [][]byte
	for _, r := range reqs {
		if !r.IsNotification() {
			answers = append(answers, fc.answerOf(r).b)
		}
	}
	if len(answers) > 0 {
		fc.Send(ArrayFrame(answers))
	}
}

// Subscribe answers eth_subscribe r at once (never reordered) and returns
// the new upstream subscription id, live from now on.
func (fc *Conn) Subscribe(r Req) string {
	o := fc.subscribeAnswer(r)
	fc.write(o)
	return o.sub
}

func (fc *Conn) subscribeAnswer(r Req) out {
	f := fc.f
	f.mu.Lock()
	f.nextSub++
	id := fmt.Sprintf(`"0x%x"`, f.nextSub)
	f.mu.Unlock()
	return out{b: ResultFrame(r.ID, id), sub: id, params: string(r.Params)}
}

func (fc *Conn) unsubscribe(r Req) []byte {
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
	return ResultFrame(r.ID, fmt.Sprint(ok))
}

// Send writes b as an answer, in LIFO order when the node reorders.
func (fc *Conn) Send(b []byte) { fc.send(out{b: b}) }

func (fc *Conn) send(o out) {
	if fc.reorder {
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

func (fc *Conn) write(o out) {
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

func (fc *Conn) lifoLoop() {
	for {
		select {
		case <-fc.f.ctx.Done():
			return
		case <-fc.done:
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
