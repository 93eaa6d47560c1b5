package gethtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethclient"

	"github.com/muxd/muxd/internal/muxtest"
	"github.com/muxd/muxd/mux"
)

// (prometheus/testutil is not used: it needs modules go.mod does not list.)

// rawSub is a bare WebSocket client holding one newHeads subscription, so
// the subscription id in every push can be checked.
type rawSub struct {
	conn *websocket.Conn
	id   string // subscription id from the eth_subscribe answer

	mu      sync.Mutex
	pushes  []rawPush
	readErr error
	changed chan struct{}
}

type rawPush struct {
	sub    string
	number string
	at     time.Time
}

func startRawSub(t *testing.T, url string) *rawSub {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	conn, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatalf("raw dial: %v", err)
	}
	conn.SetReadLimit(16 << 20)
	r := &rawSub{conn: conn, changed: make(chan struct{})}
	if err := conn.Write(ctx, websocket.MessageText,
		[]byte(`{"jsonrpc":"2.0","id":"sub-1","method":"eth_subscribe","params":["newHeads"]}`)); err != nil {
		t.Fatalf("raw write: %v", err)
	}
	_, b, err := conn.Read(ctx)
	if err != nil {
		t.Fatalf("raw read subscribe answer: %v", err)
	}
	var ans struct {
		ID     json.RawMessage `json:"id"`
		Result string          `json:"result"`
	}
	if err := json.Unmarshal(b, &ans); err != nil || string(ans.ID) != `"sub-1"` || ans.Result == "" {
		t.Fatalf("raw subscribe answer %s (%v)", b, err)
	}
	r.id = ans.Result
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			_, b, err := conn.Read(context.Background())
			if err != nil {
				r.mu.Lock()
				r.readErr = err
				close(r.changed)
				r.changed = make(chan struct{})
				r.mu.Unlock()
				return
			}
			var msg struct {
				Method string `json:"method"`
				Params struct {
					Subscription string `json:"subscription"`
					Result       struct {
						Number string `json:"number"`
					} `json:"result"`
				} `json:"params"`
			}
			p := rawPush{at: time.Now()}
			if json.Unmarshal(b, &msg) == nil && msg.Method == "eth_subscription" {
				p.sub, p.number = msg.Params.Subscription, msg.Params.Result.Number
			} else {
				p.sub = "unexpected message: " + string(b)
			}
			r.mu.Lock()
			r.pushes = append(r.pushes, p)
			close(r.changed)
			r.changed = make(chan struct{})
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		conn.Close(websocket.StatusNormalClosure, "")
		<-done
	})
	return r
}

// waitPushAfter waits for a push that arrived after since.
func (r *rawSub) waitPushAfter(ctx context.Context, since time.Time) error {
	for {
		r.mu.Lock()
		n := len(r.pushes)
		ok := n > 0 && r.pushes[n-1].at.After(since)
		err, ch := r.readErr, r.changed
		r.mu.Unlock()
		if ok {
			return nil
		}
		if err != nil {
			return fmt.Errorf("raw client connection failed: %w", err)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("raw client: no push after %v: %w", since.Format(time.StampMilli), ctx.Err())
		}
	}
}

// headWatcher is an ethclient newHeads subscription through muxd.
type headWatcher struct {
	mu      sync.Mutex
	last    time.Time // arrival of the latest head
	numbers []uint64
	err     error
	changed chan struct{}
}

func startHeadWatcher(t *testing.T, url string) *headWatcher {
	t.Helper()
	c := dial(t, url)
	heads := make(chan *types.Header, 64)
	sub, err := ethclient.NewClient(c).SubscribeNewHead(ctxT(t, 10*time.Second), heads)
	if err != nil {
		t.Fatalf("SubscribeNewHead: %v", err)
	}
	w := &headWatcher{changed: make(chan struct{})}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case h := <-heads:
				w.mu.Lock()
				w.last = time.Now()
				w.numbers = append(w.numbers, h.Number.Uint64())
				close(w.changed)
				w.changed = make(chan struct{})
				w.mu.Unlock()
			case err := <-sub.Err():
				w.mu.Lock()
				w.err = fmt.Errorf("subscription ended: %v", err)
				close(w.changed)
				w.changed = make(chan struct{})
				w.mu.Unlock()
				return
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
		sub.Unsubscribe()
	})
	return w
}

func (w *headWatcher) waitHeadAfter(ctx context.Context, since time.Time) error {
	for {
		w.mu.Lock()
		ok, err, ch := w.last.After(since), w.err, w.changed
		w.mu.Unlock()
		if ok {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("ethclient: no head after %v: %w", since.Format(time.StampMilli), ctx.Err())
		}
	}
}

// TestGethRestart takes geth away under muxd and brings it back. Clients of
// muxd keep their connections; subscriptions keep delivering under the same
// ids; calls made meanwhile succeed once geth is back or fail with -32002.
func TestGethRestart(t *testing.T) {
	const reqTimeout = 5 * time.Second
	h := newHarness(t, func(c *mux.Config) {
		c.RequestTimeout = reqTimeout
		c.PingInterval = time.Second
		c.PingTimeout = time.Second
	})
	raw := startRawSub(t, h.WSURL)
	watchers := []*headWatcher{startHeadWatcher(t, h.WSURL), startHeadWatcher(t, h.WSURL)}
	caller := dial(t, h.WSURL)
	acceptsBefore := h.wsAccepts.Load()

	ctx := ctxT(t, 60*time.Second)
	start := time.Now()
	if err := raw.waitPushAfter(ctx, start); err != nil {
		t.Fatal(err)
	}
	for _, w := range watchers {
		if err := w.waitHeadAfter(ctx, start); err != nil {
			t.Fatal(err)
		}
	}

	// The caller loops on eth_chainId, each call with a deadline beyond
	// muxd's request timeout, so every failure is muxd's own answer.
	type result struct {
		began, ended time.Time
		err          error
	}
	var (
		resMu   sync.Mutex
		results []result
	)
	stopLoop := make(chan struct{})
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		for {
			select {
			case <-stopLoop:
				return
			default:
			}
			cctx, cancel := context.WithTimeout(context.Background(), reqTimeout+5*time.Second)
			began := time.Now()
			var id string
			err := caller.CallContext(cctx, &id, "eth_chainId")
			cancel()
			if err == nil && id != devChainID {
				err = fmt.Errorf("eth_chainId = %q", id)
			}
			resMu.Lock()
			results = append(results, result{began, time.Now(), err})
			resMu.Unlock()
		}
	}()

	h.node.Stop(t)
	stopped := time.Now()
	// While geth is down muxd has no upstream.
	for muxtest.ActiveUpstream(h.srv) >= 0 {
		select {
		case <-time.After(time.Millisecond): // no event outside package mux
		case <-ctx.Done():
			t.Fatal("muxd still reports an upstream after geth stopped")
		}
	}
	// Keep geth down past muxd's request timeout, until a call has failed
	// with muxd's -32002, so both outcomes are exercised.
	for {
		resMu.Lock()
		var timedOut bool
		for _, r := range results {
			timedOut = timedOut || (r.err != nil && r.ended.After(stopped))
		}
		resMu.Unlock()
		if timedOut {
			break
		}
		if muxtest.ActiveUpstream(h.srv) >= 0 {
			t.Fatal("muxd reports an upstream while geth is down")
		}
		select {
		case <-ctx.Done():
			t.Fatal("no eth_chainId failed while geth was down")
		case <-time.After(100 * time.Millisecond): // poll the loop's results
		}
	}
	h.node.Restart(t)
	restarted := time.Now()
	muxtest.WaitConnected(t, h.srv, true, 30*time.Second)
	t.Logf("geth down for %v; muxd upstream back %v after restart",
		restarted.Sub(stopped).Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond))

	if err := raw.waitPushAfter(ctx, restarted); err != nil {
		t.Fatal(err)
	}
	for _, w := range watchers {
		if err := w.waitHeadAfter(ctx, restarted); err != nil {
			t.Fatal(err)
		}
	}
	// One more successful call after the restart, then stop the loop.
	for {
		resMu.Lock()
		var ok bool
		if n := len(results); n > 0 {
			last := results[n-1]
			ok = last.err == nil && last.began.After(restarted)
		}
		resMu.Unlock()
		if ok {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("no successful eth_chainId after the restart")
		}
		if err := raw.waitPushAfter(ctx, time.Now()); err != nil { // paced by blocks
			t.Fatal(err)
		}
	}
	close(stopLoop)
	<-loopDone

	var okDuring, failed int
	for _, r := range results {
		if r.err == nil {
			if r.ended.After(stopped) && r.began.Before(restarted) {
				okDuring++
			}
			continue
		}
		failed++
		var rerr interface{ ErrorCode() int }
		if !errors.As(r.err, &rerr) || rerr.ErrorCode() != -32002 {
			t.Errorf("eth_chainId begun %v after stop failed with %v, want success or -32002",
				r.began.Sub(stopped).Round(time.Millisecond), r.err)
		}
	}
	t.Logf("eth_chainId loop: %d calls, %d made during the outage succeeded, %d failed with -32002", len(results), okDuring, failed)

	// Same subscription id in every push, before and after the restart.
	raw.mu.Lock()
	var before, after int
	for _, p := range raw.pushes {
		if p.sub != raw.id {
			t.Errorf("push under subscription %q, want %q", p.sub, raw.id)
		}
		if p.at.Before(stopped) {
			before++
		} else {
			after++
		}
	}
	raw.mu.Unlock()
	if before == 0 || after == 0 {
		t.Errorf("raw client pushes: %d before stop, %d after", before, after)
	}
	// No client reconnected to muxd; muxd reconnected upstream.
	if n := h.wsAccepts.Load(); n != acceptsBefore {
		t.Errorf("muxd saw %d WebSocket upgrades, %d before the restart: a client reconnected", n, acceptsBefore)
	}
	for i, w := range watchers {
		w.mu.Lock()
		if w.err != nil {
			t.Errorf("watcher %d: %v", i, w.err)
		}
		w.mu.Unlock()
	}
	if n := counterValue(t, h.srv.Metrics().UpstreamReconnects); n < 1 {
		t.Errorf("muxd_upstream_reconnects_total = %v, want >= 1", n)
	}
}
