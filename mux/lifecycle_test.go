package mux

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/muxd/muxd/router"
)

// TestRequestTimeout: a request the node does not answer in time gets
// -32002 "request timed out"; the late answer is then dropped.
func TestRequestTimeout(t *testing.T) {
	t.Parallel()
	hold := newHolder("eth_slow")
	h := newHarness(t, harnessOpts{cfg: func(c *Config) { c.RequestTimeout = 500 * time.Millisecond }})
	h.fake.SetHandler(hold.Handle)
	m := h.srv.Metrics()
	c := h.dial(t)

	r := parseResp(t, c.call(`{"jsonrpc":"2.0","id":"t1","method":"eth_slow","params":[1]}`))
	wantError(t, r, `"t1"`, -32002, "request timed out")
	if n := h.pendingLen(); n != 0 {
		t.Errorf("pending = %d after the timeout, want 0", n)
	}

	// In a batch, only the slow element times out.
	got := parseBatch(t, c.call(`[{"jsonrpc":"2.0","id":1,"method":"eth_slow","params":[2]},{"jsonrpc":"2.0","id":2,"method":"eth_fast","params":[3]}]`))
	if len(got) != 2 {
		t.Fatalf("batch got %d answers", len(got))
	}
	for _, r := range got {
		switch string(r.ID) {
		case `1`:
			wantError(t, r, `1`, -32002, "request timed out")
		case `2`:
			wantEcho(t, r, `2`, "eth_fast", `[3]`)
		default:
			t.Errorf("unexpected answer %s", r.Raw)
		}
	}

	// The node answers at last: the answers match nothing and reach no one.
	late := hold.TakeN(t, 2)
	if len(late) != 2 {
		t.Fatalf("fake held %d requests, want 2", len(late))
	}
	for _, l := range late {
		l.Conn.MustWrite(t, echo(l.Req))
	}
	c.barrier()
	if n := m.DroppedCount(DropUnknownID); n != 2 {
		t.Errorf("dropped unknown_id = %v, want 2 (the late answers)", n)
	}
}

// TestUpstreamLoss: when the socket drops, a request that may have been
// executed fails at once; a read-only one is sent again on the next
// connection under the same upstream id; nothing from the old connection
// can reach a client afterwards.
func TestUpstreamLoss(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	h.fake.SetHandler(func(fc *fakeConn, r fakeReq) {
		if fc.N == 1 && r.Method != "barrier" {
			return // the first connection answers nothing
		}
		fc.Answer(r)
	})
	m := h.srv.Metrics()
	c := h.dial(t)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":["0xdead"]}`)
	c.send(`{"jsonrpc":"2.0","id":2,"method":"eth_blockNumber","params":[]}`)
	fc1 := h.fake.Conn(t, 1)
	old := fc1.WaitReqs(t, 2)
	fc1.Drop()

	// The transaction fails first, at once (the retried call cannot be
	// answered before a new connection is up).
	r := parseResp(t, c.recv())
	wantError(t, r, `1`, -32002, "upstream unavailable")
	if r.reason() != "connection lost" {
		t.Errorf("data.reason = %q, want %q", r.reason(), "connection lost")
	}
	wantEcho(t, parseResp(t, c.recv()), `2`, "eth_blockNumber", `[]`)

	fc2 := h.fake.Conn(t, 2)
	var resent []fakeReq
	for _, q := range fc2.Reqs() {
		if q.Method == "eth_sendRawTransaction" {
			t.Errorf("eth_sendRawTransaction was sent again: %s", q.Raw)
		}
		if q.Method == "eth_blockNumber" {
			resent = append(resent, q)
		}
	}
	if len(resent) != 1 || string(resent[0].Raw) != string(old[1].Raw) {
		t.Fatalf("eth_blockNumber on the new connection = %v, want the same frame (same upstream id) as before: %s", resent, old[1].Raw)
	}
	if n := counterValue(m.Retried); n != 1 {
		t.Errorf("retried = %v, want 1", n)
	}

	// The node's late answer to the transaction cannot come on the old
	// socket, whose reader is gone; on the new one its id belongs to a
	// discarded table, and it reaches no one.
	fc2.MustWrite(t, resultFrame(old[0].ID, `"0xhash"`))
	c.barrier()
	if n := m.DroppedCount(DropUnknownID); n != 1 {
		t.Errorf("dropped unknown_id = %v, want 1", n)
	}
	if n := h.pendingLen(); n != 0 {
		t.Errorf("pending = %d, want 0", n)
	}
}

// dialGate is a Dial func whose upstream is down until opened.
type dialGate struct {
	url     string
	mu      sync.Mutex
	open    bool
	fails   int
	changed chan struct{}
}

func newDialGate() *dialGate { return &dialGate{changed: make(chan struct{})} }

// gatedHarness is a harness whose upstream dials go through a gate, closed
// (open when open is true); cfg, if not nil, adjusts the rest.
func gatedHarness(t *testing.T, open bool, cfg func(*Config)) (*harness, *dialGate) {
	g := newDialGate()
	g.set(open)
	h := newHarness(t, harnessOpts{noWaitUp: !open, cfg: func(c *Config) {
		g.url = c.Upstream
		c.Dial = g.dial
		if cfg != nil {
			cfg(c)
		}
	}})
	return h, g
}

func (g *dialGate) dial(ctx context.Context) (*websocket.Conn, error) {
	g.mu.Lock()
	open := g.open
	if !open {
		g.fails++
		close(g.changed)
		g.changed = make(chan struct{})
	}
	g.mu.Unlock()
	if !open {
		return nil, errors.New("fake: upstream is down")
	}
	c, _, err := websocket.Dial(ctx, g.url, nil)
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(-1)
	return c, nil
}

func (g *dialGate) set(open bool) {
	g.mu.Lock()
	g.open = open
	g.mu.Unlock()
}

// waitFails waits until at least n dials have failed.
func (g *dialGate) waitFails(t *testing.T, n int) {
	t.Helper()
	deadline := time.NewTimer(testTimeout)
	defer deadline.Stop()
	for {
		g.mu.Lock()
		ok, ch := g.fails >= n, g.changed
		g.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("no %d failed dials", n)
		}
	}
}

func (h *harness) waitingLen() (n int) {
	return h.stats().Waiting
}

func (h *harness) subWaiters(params string) (n int) {
	// The tests that ask have one subscription key.
	if _, err := router.SubscriptionKey([]byte(params)); err != nil {
		h.t.Fatal(err)
	}
	return h.stats().SubscribeWaiters
}

// answersByID reads n frames and returns every answer in them by id
// (batch elements included).
func answersByID(t *testing.T, c *wsClient, n int) map[string]resp {
	t.Helper()
	out := map[string]resp{}
	for range n {
		b := c.recv()
		var rs []resp
		if strings.HasPrefix(strings.TrimSpace(string(b)), "[") {
			rs = parseBatch(t, b)
		} else {
			rs = []resp{parseResp(t, b)}
		}
		for _, r := range rs {
			if _, dup := out[string(r.ID)]; dup {
				t.Fatalf("two answers with id %s", r.ID)
			}
			out[string(r.ID)] = r
		}
	}
	return out
}

// TestUpstreamDown: while no upstream is up, requests wait and are served
// once one is, or time out at their deadline.
func TestUpstreamDown(t *testing.T) {
	t.Parallel()
	sendAll := func(c *wsClient) {
		c.send(`{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[1]}`)
		c.send(`{"jsonrpc":"2.0","id":2,"method":"eth_sendRawTransaction","params":[2]}`)
		c.send(`[{"jsonrpc":"2.0","id":3,"method":"eth_chainId","params":[3]},{"jsonrpc":"2.0","id":4,"method":"eth_x","params":[4]}]`)
	}
	checkServed := func(t *testing.T, got map[string]resp) {
		t.Helper()
		wantEcho(t, got[`1`], `1`, "eth_blockNumber", `[1]`)
		wantEcho(t, got[`2`], `2`, "eth_sendRawTransaction", `[2]`)
		wantEcho(t, got[`3`], `3`, "eth_chainId", `[3]`)
		wantEcho(t, got[`4`], `4`, "eth_x", `[4]`)
	}

	t.Run("down at start", func(t *testing.T) {
		t.Parallel()
		h, g := gatedHarness(t, false, nil)
		g.waitFails(t, 1)
		c := h.dial(t)
		sendAll(c)
		c.send(`{"jsonrpc":"2.0","id":5,"method":"eth_subscribe","params":["newHeads"]}`)
		eventually(t, "requests waiting", func() bool { return h.waitingLen() == 4 && h.subWaiters(`["newHeads"]`) == 1 })
		g.set(true)
		got := answersByID(t, c, 4)
		checkServed(t, got)
		sub := string(got[`5`].Result)
		if !subIDPattern.MatchString(sub) {
			t.Fatalf("subscribe answer %s", got[`5`].Raw)
		}
		fc := h.fake.Conn(t, 1)
		fc.WaitLiveSubs(t, 1)
		fc.PushAll(t, `{"n":1}`)
		if id, res := pushOf(t, c.recv()); id != sub || res != `{"n":1}` {
			t.Errorf("push = %s %s, want %s", id, res, sub)
		}
	})

	t.Run("never up", func(t *testing.T) {
		t.Parallel()
		h, _ := gatedHarness(t, false, func(c *Config) { c.RequestTimeout = 300 * time.Millisecond })
		c := h.dial(t)
		sendAll(c)
		c.send(`{"jsonrpc":"2.0","id":5,"method":"eth_subscribe","params":["newHeads"]}`)
		got := answersByID(t, c, 4)
		for _, id := range []string{`1`, `2`, `3`, `4`, `5`} {
			wantError(t, got[id], id, -32002, "request timed out")
		}
		if n := h.waitingLen(); n != 0 {
			t.Errorf("waiting = %d, want 0", n)
		}
		if n := h.subWaiters(`["newHeads"]`); n != 0 {
			t.Errorf("subscription waiters = %d, want 0", n)
		}
		if n := h.fake.NumConns(); n != 0 {
			t.Errorf("upstream connections = %d", n)
		}
	})

	// Past MaxWaiting, a request gets -32002 at once and loses nothing
	// else: the ones already held are served when the upstream is up.
	t.Run("waiting bound", func(t *testing.T) {
		t.Parallel()
		h, g := gatedHarness(t, false, func(c *Config) { c.MaxWaiting = 2 })
		g.waitFails(t, 1)
		c := h.dial(t)
		c.send(`{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[1]}`)
		c.send(`{"jsonrpc":"2.0","id":2,"method":"eth_chainId","params":[2]}`)
		eventually(t, "requests waiting", func() bool { return h.waitingLen() == 2 })
		c.send(`{"jsonrpc":"2.0","id":3,"method":"eth_gasPrice","params":[3]}`)
		r := parseResp(t, c.recv())
		wantError(t, r, `3`, -32002, "upstream unavailable")
		if !strings.Contains(string(r.Raw), `"reason":"too many requests waiting for the upstream"`) {
			t.Errorf("refusal lacks its reason: %s", r.Raw)
		}
		g.set(true)
		got := answersByID(t, c, 2)
		wantEcho(t, got[`1`], `1`, "eth_blockNumber", `[1]`)
		wantEcho(t, got[`2`], `2`, "eth_chainId", `[2]`)
	})

	// Past UpstreamWait a waiting request gets -32002 saying that no
	// upstream is connected, well before its own deadline.
	t.Run("upstream wait", func(t *testing.T) {
		t.Parallel()
		h, _ := gatedHarness(t, false, func(c *Config) { c.UpstreamWait = 200 * time.Millisecond })
		c := h.dial(t)
		c.send(`{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[1]}`)
		c.send(`[{"jsonrpc":"2.0","id":2,"method":"eth_chainId","params":[2]},{"jsonrpc":"2.0","id":3,"method":"eth_x","params":[3]}]`)
		got := answersByID(t, c, 2)
		for _, id := range []string{`1`, `2`, `3`} {
			wantError(t, got[id], id, -32002, "upstream unavailable")
			if r := got[id].reason(); r != "no upstream connected" {
				t.Errorf("id %s: reason %q, want \"no upstream connected\"", id, r)
			}
		}
		if n := h.waitingLen(); n != 0 {
			t.Errorf("waiting = %d, want 0", n)
		}
	})

	t.Run("down for a while", func(t *testing.T) {
		t.Parallel()
		h, g := gatedHarness(t, true, nil)
		c := h.dial(t)
		c.barrier()
		g.set(false)
		h.fake.Conn(t, 1).Drop()
		h.waitUp(t, false)
		g.waitFails(t, 1)
		sendAll(c)
		eventually(t, "requests waiting", func() bool { return h.waitingLen() == 4 })
		g.set(true)
		checkServed(t, answersByID(t, c, 3))
		if n := len(h.fake.Conn(t, 2).Reqs()); n != 4 {
			t.Errorf("second connection got %d requests, want 4", n)
		}
	})
}

// shrinkingDial dials TCP with a small receive buffer, so that a client
// that does not read backs up quickly.
func shrinkingDial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		_ = c.(*net.TCPConn).SetReadBuffer(1) // the kernel rounds it up to its minimum
	}
	return c, err
}

// dialSlow connects a client that will not read, with small socket buffers
// on both ends so that its outbound queue fills after little data.
func (h *harness) dialSlow(t *testing.T) *websocket.Conn {
	t.Helper()
	shrink := func(c net.Conn) { _ = c.(*net.TCPConn).SetWriteBuffer(1) }
	h.onAccept.Store(&shrink)
	c, err := dialRaw(h.URL, shrinkingDial)
	h.onAccept.Store(nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

// answerBig is a fake node's handler that answers eth_big with result and
// anything else as usual.
func answerBig(result string) func(*fakeConn, fakeReq) {
	return func(fc *fakeConn, r fakeReq) {
		if r.Method == "eth_big" {
			fc.Send(resultFrame(r.ID, result))
			return
		}
		fc.Answer(r)
	}
}

// TestSlowConsumer: a client that does not read is disconnected once its
// queue is past its bound and it has taken nothing for
// slow_consumer_timeout, and nobody else waits for it.
func TestSlowConsumer(t *testing.T) {
	t.Parallel()
	const queue = 64 << 10
	big := `"` + strings.Repeat("b", 32<<10) + `"`
	h := newHarness(t, harnessOpts{cfg: func(c *Config) {
		c.OutboundQueueBytes = queue
		c.SlowConsumerTimeout = 100 * time.Millisecond
	}})
	h.fake.SetHandler(answerBig(big))
	m := h.srv.Metrics()
	slow := h.dialSlow(t)
	good := h.dial(t)
	good.barrier()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	// 128 answers of 32 KiB: 4 MiB, far past the socket buffers and the
	// 64 KiB queue.
	for i := range 128 {
		if err := slow.Write(ctx, websocket.MessageText, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"eth_big"}`, i)); err != nil {
			break // muxd has cut it already
		}
		if i%16 == 0 {
			good.barrier()
		}
	}
	eventually(t, "the slow consumer to be cut", func() bool { return counterValue(m.SlowConsumers) == 1 })
	eventually(t, "the slow session to end", func() bool { return len(h.clientIDs()) == 1 })
	// What had reached its socket is there to read; then the connection
	// is closed.
	n, err := readUntilClosed(slow)
	if err != nil {
		t.Fatal(err)
	}
	if n >= 128 {
		t.Errorf("slow client read all %d answers; it should have been cut", n)
	}
	for range 8 {
		good.barrier()
	}
	if v := counterValue(m.SlowConsumers); v != 1 {
		t.Errorf("slow consumers = %v, want 1", v)
	}
}

// TestPipelinedAnswersSlowReader: a client that pipelines calls whose
// answers add up to far more than its queue's bound, and reads them only
// later, gets every answer, whole, in order and under its own id, as from a
// node: answers to its own calls may pass the bound, as far as the budget
// all clients share for that allows. Past the budget it is cut as a slow
// consumer. Others are served meanwhile either way.
func TestPipelinedAnswersSlowReader(t *testing.T) {
	t.Parallel()
	const (
		queue  = 64 << 10
		answer = 64 << 10
		calls  = 256 // 16 MiB of answers, past what the sockets' buffers hold
	)
	tests := []struct {
		name   string
		budget int // OutboundQueueBytesTotal; 0: the default
		cut    bool
	}{
		{"within the shared budget", 0, false},
		{"past the shared budget", 1 << 20, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			big := `"` + strings.Repeat("b", answer) + `"`
			h := newHarness(t, harnessOpts{cfg: func(c *Config) {
				c.OutboundQueueBytes = queue
				c.OutboundQueueBytesTotal = tt.budget
				c.SlowConsumerTimeout = testTimeout // not a test of stalls
			}})
			h.fake.SetHandler(answerBig(big))
			m := h.srv.Metrics()
			pipe := h.dial(t)
			good := h.dial(t)
			good.barrier()
			// over reports whether a client's queue is past its bound.
			over := func() bool {
				h.srv.peersMu.RLock()
				defer h.srv.peersMu.RUnlock()
				for _, c := range h.srv.peers {
					if c.out.over() {
						return true
					}
				}
				return false
			}
			for i := range calls {
				pipe.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"eth_big"}`, i))
			}
			if tt.cut {
				eventually(t, "the client to be cut", func() bool { return counterValue(m.SlowConsumers) == 1 })
				good.barrier()
				if n, err := readUntilClosed(pipe.conn); err != nil || n >= calls {
					t.Fatalf("read %d answers (%v); want fewer than %d, then the close", n, err, calls)
				}
				return
			}
			eventually(t, "the client's queue to pass its bound", over)
			good.barrier()
			for i := range calls {
				b, err := readFrame(pipe.conn)
				if err != nil {
					t.Fatalf("answer %d: %v", i, err)
				}
				if want := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":%s}`, i, big); string(b) != want {
					t.Fatalf("answer %d: %d bytes %.40q..., want %d bytes under id %d", i, len(b), b, len(want), i)
				}
			}
			good.barrier()
			if v := counterValue(m.SlowConsumers); v != 0 {
				t.Errorf("slow consumers = %v, want 0", v)
			}
			if got := h.srv.queued.used.Load(); got != 0 {
				t.Errorf("shared budget holds %d bytes with every answer read", got)
			}
		})
	}
}

// TestClientDisconnect: a client that goes away with requests in flight
// frees its pending entries and subscriptions; the late answers are
// dropped and no goroutine is left behind.
func TestClientDisconnect(t *testing.T) {
	// Not parallel: it counts goroutines.
	hold := newHolder("eth_hold")
	h := newHarness(t, harnessOpts{})
	h.fake.SetHandler(hold.Handle)
	m := h.srv.Metrics()
	fc := h.fake.Conn(t, 1)
	base := runtime.NumGoroutine()

	c := h.dial(t)
	c.subscribe(`"s"`, `["newHeads"]`)
	for i := range 10 {
		c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"eth_hold"}`, i))
	}
	c.send(`[{"jsonrpc":"2.0","id":"a","method":"eth_hold"},{"jsonrpc":"2.0","id":"b","method":"eth_hold"},{"jsonrpc":"2.0","id":"c","method":"eth_hold"}]`)
	fc.WaitReqs(t, 14)
	ids := h.clientIDs()
	if len(ids) != 1 {
		t.Fatalf("clients = %v", ids)
	}
	if n := inFlightOf(h, ids[0]); n != 13 {
		t.Fatalf("in flight for the client = %d, want 13", n)
	}

	c.conn.CloseNow()
	eventually(t, "the session to be removed", func() bool { return len(h.clientIDs()) == 0 })
	if n := inFlightOf(h, ids[0]); n != 0 {
		t.Errorf("in flight for the gone client = %d, want 0", n)
	}
	// Its subscription is gone upstream too.
	h.fake.Wait(t, "eth_unsubscribe", func() bool { return len(fc.LiveSubs()) == 0 && len(fc.Unsubs()) == 1 })
	// Its 13 calls still run at the node, for nobody.
	if v := counterValue(m.OrphanedCalls); v != 13 {
		t.Errorf("orphaned-calls gauge = %v after the client left, want 13", v)
	}

	for _, l := range hold.Take() {
		l.Conn.MustWrite(t, echo(l.Req))
	}
	other := h.dial(t)
	other.barrier() // after the late answers and the answer to eth_unsubscribe
	if n := h.pendingLen(); n != 0 {
		t.Errorf("pending = %d after the client left, want 0", n)
	}
	if v := counterValue(m.InFlight); v != 0 {
		t.Errorf("in-flight gauge = %v, want 0", v)
	}
	// Their answers are the departed client's, not strays from the node.
	if n := m.DroppedCount(DropClientGone); n != 13 {
		t.Errorf("dropped client_gone = %v, want 13", n)
	}
	if n := m.DroppedCount(DropUnknownID); n != 0 {
		t.Errorf("dropped unknown_id = %v, want 0", n)
	}
	if v := counterValue(m.OrphanedCalls); v != 0 {
		t.Errorf("orphaned-calls gauge = %v after their answers, want 0", v)
	}
	other.conn.CloseNow()
	eventually(t, "the other session to be removed", func() bool { return len(h.clientIDs()) == 0 })

	deadline := time.Now().Add(testTimeout)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d, baseline %d\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func inFlightOf(h *harness, id uint64) (n int) {
	h.locked(func() { n, _ = h.srv.core.Owed(router.ClientID(id)) })
	return n
}
