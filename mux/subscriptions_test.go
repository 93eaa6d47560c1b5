package mux

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// recvPush reads the next frame, which must be a push for sub with result.
func (c *wsClient) recvPush(sub, result string) {
	c.t.Helper()
	b := c.recv()
	gotSub, gotRes := pushOf(c.t, b)
	if gotSub != sub || gotRes != compact([]byte(result)) {
		c.t.Fatalf("push = %s, want subscription %s result %s", b, sub, result)
	}
}

func (c *wsClient) unsubscribe(id, sub string) string {
	c.t.Helper()
	r := parseResp(c.t, c.call(`{"jsonrpc":"2.0","id":`+id+`,"method":"eth_unsubscribe","params":[`+sub+`]}`))
	if r.Error != nil || string(r.ID) != id {
		c.t.Fatalf("unsubscribe: %s", r.Raw)
	}
	return string(r.Result)
}

func TestSubscriptions(t *testing.T) {
	t.Parallel()

	t.Run("shared by two clients", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		c1, c2 := h.dial(t), h.dial(t)
		s1 := c1.subscribe(`1`, `["newHeads"]`)
		s2 := c2.subscribe(`1`, `["newHeads"]`)
		if s1 == s2 {
			t.Fatalf("two clients got the same subscription id %s", s1)
		}
		fc := h.fake.Conn(t, 1)
		var up string
		for id := range fc.WaitLiveSubs(t, 1) {
			up = id
		}
		for i := range 3 {
			res := fmt.Sprintf(`{"number":%d}`, i)
			fc.MustWrite(t, pushFrame(up, res))
			c1.recvPush(s1, res)
			c2.recvPush(s2, res)
		}
		if got := c1.unsubscribe(`2`, s1); got != "true" {
			t.Fatalf("unsubscribe answered %s, want true", got)
		}
		c1.barrier()
		if n := len(fc.Unsubs()); n != 0 {
			t.Fatalf("upstream unsubscribed while a client still holds the subscription")
		}
		fc.MustWrite(t, pushFrame(up, `{"number":3}`))
		c2.recvPush(s2, `{"number":3}`)
		c1.barrier() // c1 got nothing
		if got := c1.unsubscribe(`3`, s1); got != "false" {
			t.Errorf("second unsubscribe answered %s, want false", got)
		}

		if got := c2.unsubscribe(`2`, s2); got != "true" {
			t.Fatalf("unsubscribe answered %s, want true", got)
		}
		h.fake.Wait(t, "eth_unsubscribe upstream", func() bool { return len(fc.Unsubs()) > 0 })
		c2.barrier()
		if u := fc.Unsubs(); len(u) != 1 || u[0] != up {
			t.Errorf("upstream unsubscribes = %v, want exactly [%s]", u, up)
		}
		if n := fc.SubscribeCounts()[`["newHeads"]`]; n != 1 {
			t.Errorf("upstream eth_subscribe count = %d, want 1", n)
		}
		// The node pushing for a removed subscription reaches nobody.
		fc.MustWrite(t, pushFrame(up, `{"number":4}`))
		c1.barrier()
		c2.barrier()
		if n := h.srv.Metrics().DroppedCount(DropUnknownSubscription); n != 1 {
			t.Errorf("dropped unknown_subscription = %v, want 1", n)
		}
	})

	t.Run("same client twice", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		c := h.dial(t)
		a := c.subscribe(`1`, `["newHeads"]`)
		b := c.subscribe(`2`, `["newHeads"]`)
		if a == b {
			t.Fatalf("both subscriptions got id %s", a)
		}
		fc := h.fake.Conn(t, 1)
		fc.WaitLiveSubs(t, 1)
		fc.PushAll(t, `"h"`)
		got := map[string]bool{}
		for range 2 {
			sub, res := pushOf(t, c.recv())
			if res != `"h"` || got[sub] {
				t.Fatalf("push %s %s", sub, res)
			}
			got[sub] = true
		}
		if !got[a] || !got[b] {
			t.Errorf("pushes went to %v, want %s and %s", got, a, b)
		}
		if n := fc.SubscribeCounts()[`["newHeads"]`]; n != 1 {
			t.Errorf("upstream eth_subscribe count = %d, want 1", n)
		}
		if c.unsubscribe(`3`, a) != "true" {
			t.Fatal("unsubscribe failed")
		}
		fc.PushAll(t, `"i"`)
		c.recvPush(b, `"i"`)
		c.barrier()
	})

	t.Run("foreign and bad unsubscribe", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		c1, c2 := h.dial(t), h.dial(t)
		s1 := c1.subscribe(`1`, `["newHeads"]`)
		if got := c2.unsubscribe(`1`, s1); got != "false" {
			t.Errorf("unsubscribing someone else's id answered %s, want false", got)
		}
		if got := c2.unsubscribe(`2`, `"0x00000000000000000000000000000000"`); got != "false" {
			t.Errorf("unsubscribing an unknown id answered %s, want false", got)
		}
		for _, params := range []string{`[]`, `[1]`, `["a","b"]`, `{}`} {
			r := parseResp(t, c2.call(`{"jsonrpc":"2.0","id":"u","method":"eth_unsubscribe","params":`+params+`}`))
			wantError(t, r, `"u"`, -32602, "invalid params")
		}
		for _, params := range []string{`[]`, `[1]`, `{"a":1}`} {
			r := parseResp(t, c2.call(`{"jsonrpc":"2.0","id":"s","method":"eth_subscribe","params":`+params+`}`))
			wantError(t, r, `"s"`, -32602, "invalid params")
		}
		r := parseResp(t, c2.call(`{"jsonrpc":"2.0","id":"s","method":"eth_subscribe"}`))
		wantError(t, r, `"s"`, -32602, "invalid params")
		fc := h.fake.Conn(t, 1)
		fc.WaitLiveSubs(t, 1)
		fc.PushAll(t, `"still"`)
		c1.recvPush(s1, `"still"`)
		c2.barrier()
		if len(fc.Unsubs()) != 0 {
			t.Errorf("upstream got eth_unsubscribe %v", fc.Unsubs())
		}
	})

	t.Run("reconnects", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		const logs = `["logs",{"address":"0xAbC0000000000000000000000000000000000001"}]`
		c1, c2 := h.dial(t), h.dial(t)
		h1 := c1.subscribe(`1`, `["newHeads"]`)
		l1 := c1.subscribe(`2`, logs)
		h2 := c2.subscribe(`1`, `["newHeads"]`)
		var stale []string
		for gen := 1; gen <= 4; gen++ {
			fc := h.fake.Conn(t, gen)
			live := fc.WaitLiveSubs(t, 2)
			for key, n := range fc.SubscribeCounts() {
				if n != 1 {
					t.Errorf("connection %d: %d eth_subscribe for %s, want 1", gen, n, key)
				}
			}
			// Old upstream ids mean nothing on the new connection.
			for _, id := range stale {
				fc.MustWrite(t, pushFrame(id, `"stale"`))
			}
			stale = stale[:0]
			for up, params := range live {
				res := fmt.Sprintf(`{"gen":%d}`, gen)
				fc.MustWrite(t, pushFrame(up, res))
				if compact(params) == `["newHeads"]` {
					c1.recvPush(h1, res)
					c2.recvPush(h2, res)
				} else {
					c1.recvPush(l1, res)
				}
				stale = append(stale, up)
			}
			c1.barrier()
			c2.barrier()
			if gen < 4 {
				fc.Drop()
			}
		}
		if n := h.srv.Metrics().DroppedCount(DropUnknownSubscription); n != 6 {
			t.Errorf("dropped unknown_subscription = %v, want 6 (2 stale ids on each of 3 reconnects)", n)
		}
		if n := h.fake.NumConns(); n != 4 {
			t.Errorf("connections = %d, want 4", n)
		}
	})

	t.Run("answer then pushes back to back", func(t *testing.T) {
		t.Parallel()
		const n = 20
		var mu sync.Mutex
		var held []fakeReq
		h := newHarness(t, harnessOpts{})
		h.fake.SetHandler(func(fc *fakeConn, r fakeReq) {
			if r.Method != "eth_subscribe" {
				fc.Answer(r)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if compact(r.Params) == `["newHeads"]` && len(held) == 0 {
				held = append(held, r) // released once both clients wait on it
				return
			}
			subscribeAndPush(fc, r, n)
		})
		c1, c2, c3 := h.dial(t), h.dial(t), h.dial(t)
		c1.send(`{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}`)
		h.fake.Conn(t, 1).WaitReqs(t, 1)
		c2.send(`{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}`)
		eventually(t, "both clients waiting on the subscription", func() bool { return h.subWaiters(`["newHeads"]`) == 2 })
		mu.Lock()
		subscribeAndPush(h.fake.Conn(t, 1), held[0], n)
		mu.Unlock()
		s3 := c3.subscribe(`1`, `["newPendingTransactions"]`)
		for _, c := range []*wsClient{c1, c2} {
			r := parseResp(t, c.recv())
			sub := string(r.Result)
			if !subIDPattern.MatchString(sub) || string(r.ID) != `1` {
				t.Fatalf("want the subscription answer first, got %s", r.Raw)
			}
			for i := range n {
				c.recvPush(sub, fmt.Sprintf(`{"i":%d,"of":["newHeads"]}`, i))
			}
			c.barrier()
		}
		for i := range n {
			c3.recvPush(s3, fmt.Sprintf(`{"i":%d,"of":["newPendingTransactions"]}`, i))
		}
		c3.barrier()
	})

	t.Run("in a batch", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		c1, c2, c3 := h.dial(t), h.dial(t), h.dial(t)
		got := parseBatch(t, c1.call(`[{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]},{"jsonrpc":"2.0","id":2,"method":"eth_blockNumber","params":[]}]`))
		byID := map[string]resp{}
		for _, r := range got {
			byID[string(r.ID)] = r
		}
		s1 := string(byID[`1`].Result)
		if len(got) != 2 || !subIDPattern.MatchString(s1) {
			t.Fatalf("batch answer %s", got[0].Raw)
		}
		wantEcho(t, byID[`2`], `2`, "eth_blockNumber", `[]`)

		// The key is live now: c2's subscription is answered by muxd
		// itself, and the batch is completed by muxd's own error.
		got = parseBatch(t, c2.call(`[{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]},1]`))
		if len(got) != 2 {
			t.Fatalf("got %d answers", len(got))
		}
		var s2 string
		for _, r := range got {
			if r.Error != nil {
				wantError(t, r, `null`, -32600, "invalid request")
			} else {
				s2 = string(r.Result)
			}
		}
		if !subIDPattern.MatchString(s2) {
			t.Fatalf("no subscription id in %v", got)
		}

		// Subscribe and unsubscribe in one batch.
		got = parseBatch(t, c3.call(`[{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]},{"jsonrpc":"2.0","id":2,"method":"eth_unsubscribe","params":["0x00000000000000000000000000000000"]}]`))
		var s3 string
		for _, r := range got {
			switch string(r.ID) {
			case `1`:
				s3 = string(r.Result)
			case `2`:
				if string(r.Result) != "false" {
					t.Errorf("unsubscribe in batch: %s", r.Raw)
				}
			}
		}
		if len(got) != 2 || !subIDPattern.MatchString(s3) {
			t.Fatalf("batch answer %v", got)
		}

		fc := h.fake.Conn(t, 1)
		fc.WaitLiveSubs(t, 1)
		fc.PushAll(t, `"b"`)
		c1.recvPush(s1, `"b"`)
		c2.recvPush(s2, `"b"`)
		c3.recvPush(s3, `"b"`)
		if n := fc.SubscribeCounts()[`["newHeads"]`]; n != 1 {
			t.Errorf("upstream eth_subscribe count = %d, want 1", n)
		}
	})

	t.Run("pushes while its batch is being answered", func(t *testing.T) {
		t.Parallel()
		// Like geth, pushes that come before the batch answer is sent
		// are held and follow it; none is lost.
		hold := newHolder("eth_slow")
		h := newHarness(t, harnessOpts{})
		h.fake.SetHandler(hold.Handle)
		c := h.dial(t)
		c.send(`[{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]},{"jsonrpc":"2.0","id":2,"method":"eth_slow","params":[]}]`)
		fc := h.fake.Conn(t, 1)
		fc.WaitLiveSubs(t, 1)
		fc.PushAll(t, `"early"`)
		held := fc.WaitReqs(t, 2)
		for _, l := range hold.TakeN(t, 1) { // WaitReqs counts a request before the holder has it
			fc.MustWrite(t, echo(l.Req))
		}
		got := parseBatch(t, c.recv())
		var sub string
		for _, r := range got {
			if string(r.ID) == `1` {
				sub = string(r.Result)
			}
		}
		if len(got) != 2 || !subIDPattern.MatchString(sub) {
			t.Fatalf("batch answer %v (upstream got %d)", got, len(held))
		}
		fc.PushAll(t, `"late"`)
		c.recvPush(sub, `"early"`)
		c.recvPush(sub, `"late"`)
	})

	t.Run("held pushes are bounded", func(t *testing.T) {
		t.Parallel()
		// Pushes held for a batch that stays open count against the
		// queue bound: past it the client is a slow consumer.
		hold := newHolder("eth_slow")
		h := newHarness(t, harnessOpts{cfg: func(c *Config) { c.OutboundQueueBytes = 4 << 10; c.RequestTimeout = time.Minute }})
		h.fake.SetHandler(hold.Handle)
		c := h.dial(t)
		c.send(`[{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]},{"jsonrpc":"2.0","id":2,"method":"eth_slow","params":[]}]`)
		fc := h.fake.Conn(t, 1)
		fc.WaitLiveSubs(t, 1)
		big := `"` + strings.Repeat("h", 1<<10) + `"`
		for range 8 {
			fc.PushAll(t, big)
		}
		eventually(t, "a slow-consumer disconnect", func() bool { return counterValue(h.srv.metrics.SlowConsumers) == 1 })
		if _, err := readUntilClosed(c.conn); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("key re-created while its eth_subscribe is in flight", func(t *testing.T) {
		t.Parallel()
		// The only holder leaves while muxd's eth_subscribe is
		// unanswered, another client asks for the same key (a second
		// eth_subscribe), then both answers come: one upstream
		// subscription must remain, and each push arrive once.
		hold := newHolder("eth_subscribe")
		h := newHarness(t, harnessOpts{})
		h.fake.SetHandler(hold.Handle)
		fc := h.fake.Conn(t, 1)
		c1 := h.dial(t)
		c1.send(`{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}`)
		fc.WaitReqs(t, 1)
		c1.conn.CloseNow()
		eventually(t, "the first client to be gone", func() bool { return len(h.clientIDs()) == 0 })
		c2 := h.dial(t)
		c2.send(`{"jsonrpc":"2.0","id":2,"method":"eth_subscribe","params":["newHeads"]}`)
		for _, l := range hold.TakeN(t, 2) { // in arrival order
			fc.Subscribe(l.Req)
		}
		r := parseResp(t, c2.recv())
		sub := string(r.Result)
		if !subIDPattern.MatchString(sub) || string(r.ID) != `2` {
			t.Fatalf("subscribe answer %s", r.Raw)
		}
		h.fake.Wait(t, "one live upstream subscription", func() bool { return len(fc.LiveSubs()) == 1 })
		fc.PushAll(t, `"once"`)
		c2.recvPush(sub, `"once"`)
		c2.barrier()
		if c2.unsubscribe(`3`, sub) != "true" {
			t.Fatal("unsubscribe failed")
		}
		h.fake.Wait(t, "no live upstream subscription", func() bool { return len(fc.LiveSubs()) == 0 })
		var up int
		up = h.stats().UpstreamSubs
		if up != 0 {
			t.Errorf("muxd still maps %d upstream subscriptions", up)
		}
	})

	t.Run("late answer after its client timed out", func(t *testing.T) {
		t.Parallel()
		// The client's eth_subscribe times out while muxd's is still
		// unanswered; when the node's answer comes at last, nobody holds
		// the key, so muxd unsubscribes it instead of leaving it orphaned.
		hold := newHolder("eth_subscribe")
		h := newHarness(t, harnessOpts{cfg: func(c *Config) { c.RequestTimeout = 200 * time.Millisecond }})
		h.fake.SetHandler(hold.Handle)
		fc := h.fake.Conn(t, 1)
		c := h.dial(t)
		r := parseResp(t, c.call(`{"jsonrpc":"2.0","id":"late","method":"eth_subscribe","params":["newHeads"]}`))
		wantError(t, r, `"late"`, -32002, "request timed out")
		held := hold.TakeN(t, 1)
		up := fc.Subscribe(held[0].Req)
		h.fake.Wait(t, "eth_unsubscribe of the orphan", func() bool { return len(fc.Unsubs()) == 1 })
		h.fake.Wait(t, "no live upstream subscription", func() bool { return len(fc.LiveSubs()) == 0 })
		// A push the node still sends for it reaches nobody: the barrier's
		// answer is the next thing the client reads.
		fc.MustWrite(t, pushFrame(up, `"nobody"`))
		c.barrier()
		if n := h.srv.Metrics().DroppedCount(DropUnknownSubscription); n != 1 {
			t.Errorf("pushes for the orphan dropped = %v, want 1", n)
		}
	})

	t.Run("subscribe as a notification is not forwarded", func(t *testing.T) {
		t.Parallel()
		// Without an id muxd could never map the node's subscription (an
		// orphan), and an eth_unsubscribe could cancel a shared one.
		h := newHarness(t, harnessOpts{})
		c := h.dial(t)
		s1 := c.subscribe(`1`, `["newHeads"]`)
		fc := h.fake.Conn(t, 1)
		var up string
		for id := range fc.WaitLiveSubs(t, 1) {
			up = id
		}
		c.send(`{"jsonrpc":"2.0","method":"eth_subscribe","params":["newPendingTransactions"]}`)
		c.send(`{"jsonrpc":"2.0","method":"eth_unsubscribe","params":[` + up + `]}`)
		c.barrier()
		for _, r := range fc.Reqs() {
			if r.IsNotification() {
				t.Errorf("forwarded upstream: %s %s", r.Method, r.Params)
			}
		}
		if n := h.srv.Metrics().DroppedCount(DropSubscribeNotification); n != 2 {
			t.Errorf("dropped subscribe_notification = %v, want 2", n)
		}
		fc.PushAll(t, `"kept"`)
		c.recvPush(s1, `"kept"`)
	})

	t.Run("unsubscribe with upper-case hex", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		c := h.dial(t)
		sub := c.subscribe(`1`, `["newHeads"]`)
		upper := `"0x` + strings.ToUpper(sub[3:len(sub)-1]) + `"`
		if got := c.unsubscribe(`2`, upper); got != "true" {
			t.Errorf("unsubscribe %s answered %s, want true", upper, got)
		}
	})

	t.Run("upstream refuses", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		h.fake.SetHandler(func(fc *fakeConn, r fakeReq) {
			if r.Method == "eth_subscribe" && compact(r.Params) == `["bogus"]` {
				fc.Send(errorFrame(r.ID, -32601, "no \"bogus\" subscription in eth namespace"))
				return
			}
			fc.Answer(r)
		})
		c := h.dial(t)
		for _, id := range []string{`"e"`, `17`} { // and again: the key was forgotten
			r := parseResp(t, c.call(`{"jsonrpc":"2.0","id":`+id+`,"method":"eth_subscribe","params":["bogus"]}`))
			wantError(t, r, id, -32601, `no "bogus" subscription in eth namespace`)
		}
		if n := len(h.fake.Conn(t, 1).LiveSubs()); n != 0 {
			t.Errorf("live upstream subscriptions = %d", n)
		}
		var clientSubs int
		clientSubs = h.stats().ClientSubs
		if clientSubs != 0 {
			t.Errorf("muxd holds %d client subscriptions after the refusal", clientSubs)
		}
		c.subscribe(`1`, `["newHeads"]`)
	})

	t.Run("limit", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{cfg: func(c *Config) { c.MaxSubscriptions = 2 }})
		c, other := h.dial(t), h.dial(t)
		a := c.subscribe(`1`, `["newHeads"]`)
		c.subscribe(`2`, `["newPendingTransactions"]`)
		r := parseResp(t, c.call(`{"jsonrpc":"2.0","id":3,"method":"eth_subscribe","params":["newHeads"]}`))
		wantError(t, r, `3`, -32005, "limit exceeded")
		other.subscribe(`1`, `["newHeads"]`) // the limit is per client
		if c.unsubscribe(`4`, a) != "true" {
			t.Fatal("unsubscribe failed")
		}
		c.subscribe(`5`, `["newHeads"]`)
	})
}

// subscribeAndPush answers eth_subscribe r and writes n pushes right
// behind the answer on the same socket.
func subscribeAndPush(fc *fakeConn, r fakeReq, n int) {
	id := fc.Subscribe(r)
	for i := range n {
		_ = fc.Push(id, fmt.Sprintf(`{"i":%d,"of":%s}`, i, compact(r.Params)))
	}
}

// TestSubscriptionFanout: one upstream subscription shared by 1000
// clients; every push reaches each of them, and one client that does not
// read is cut without holding up the rest.
func TestSubscriptionFanout(t *testing.T) {
	// The slow client, with minimal socket buffers, is cut after some
	// 35 KiB (the 24 KiB queue included); it is sent 64 KiB.
	const clients, pushes = 1000, 8
	payload := `"` + strings.Repeat("f", 8<<10) + `"`
	h := newHarness(t, harnessOpts{cfg: func(c *Config) {
		c.Logger = discardLogger()
		c.OutboundQueueBytes = 24 << 10
	}})
	m := h.srv.Metrics()

	start := time.Now()
	conns := make([]*websocket.Conn, clients)
	subs := make([]string, clients)
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				c, err := dialRaw(h.URL, nil)
				if err != nil {
					errs <- err
					continue
				}
				conns[i] = c
				ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
				err = c.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}`))
				cancel()
				if err != nil {
					errs <- err
					continue
				}
				b, err := readFrame(c)
				if err != nil {
					errs <- err
					continue
				}
				r, err := decodeResp(b)
				if err != nil || !subIDPattern.Match(r.Result) {
					errs <- fmt.Errorf("subscribe answer %s (%v)", b, err)
					continue
				}
				subs[i] = string(r.Result)
			}
		})
	}
	for i := range clients {
		next <- i
	}
	close(next)
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.CloseNow()
			}
		}
	})
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, s := range subs {
		if seen[s] {
			t.Fatalf("subscription id %s handed out twice", s)
		}
		seen[s] = true
	}

	t.Logf("dialled and subscribed %d clients in %v", clients, time.Since(start))
	slow := h.dialSlow(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := slow.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := readFrame(slow); err != nil {
		t.Fatal(err)
	}

	fc := h.fake.Conn(t, 1)
	fc.WaitLiveSubs(t, 1)
	if n := fc.SubscribeCounts()[`["newHeads"]`]; n != 1 {
		t.Fatalf("upstream eth_subscribe count = %d, want 1", n)
	}

	// Pushes go out in rounds: the next one only once every reader has the
	// previous one. A client that reads is then never more than one push
	// behind, however slowly its goroutines get scheduled, while the one
	// that does not read falls further behind each round.
	rounds := make([]sync.WaitGroup, pushes+1)
	for k := range rounds {
		rounds[k].Add(clients)
	}
	readErrs := make(chan error, clients)
	for i, c := range conns {
		wg.Go(func() {
			k := 0
			defer func() {
				for ; k <= pushes; k++ {
					rounds[k].Done()
				}
			}()
			for ; k <= pushes; k++ {
				b, err := readFrame(c)
				if err != nil {
					readErrs <- fmt.Errorf("client %d, push %d: %w", i, k, err)
					return
				}
				want := pushFrame(subs[i], fmt.Sprintf(`{"k":%d,"data":%s}`, k, payload))
				if k == 0 {
					want = pushFrame(subs[i], `"first"`)
				}
				if string(b) != string(want) {
					readErrs <- fmt.Errorf("client %d, push %d: got %.120s", i, k, b)
					return
				}
				rounds[k].Done()
			}
		})
	}
	// One small push first: it reaches all of them. Then enough data to
	// back the slow client up.
	for k := range pushes + 1 {
		if k == 0 {
			fc.PushAll(t, `"first"`)
		} else {
			fc.PushAll(t, fmt.Sprintf(`{"k":%d,"data":%s}`, k, payload))
		}
		waitGroup(t, &rounds[k], fmt.Sprintf("push %d to reach every client", k))
	}
	wg.Wait()
	close(readErrs)
	for err := range readErrs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	nslow, err := readUntilClosed(slow)
	if err != nil {
		t.Fatalf("slow client: %v", err)
	}
	t.Logf("%d pushes to %d clients in %v; the slow one read %d before it was cut", pushes+1, clients, time.Since(start), nslow)
	if v := counterValue(m.SlowConsumers); v != 1 {
		t.Errorf("slow consumers = %v, want 1", v)
	}
	if v := counterValue(m.Pushes); v < clients*(pushes+1) {
		t.Errorf("pushes delivered = %v, want at least %d", v, clients*(pushes+1))
	}
}
