// Package gethtest runs muxd in front of a real geth --dev node and drives it
// with go-ethereum's own rpc and ethclient packages.
package gethtest

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/muxd/muxd/integration/gethnode"
	"github.com/muxd/muxd/internal/testnode"
	"github.com/muxd/muxd/mux"
)

const devChainID = "0x539" // 1337, geth --dev

// harness is one geth --dev node with an in-process muxd in front of it.
type harness struct {
	node    *gethnode.Node
	srv     *mux.Server
	front   *httptest.Server
	WSURL   string // muxd, WebSocket
	HTTPURL string // muxd, HTTP
	// wsAccepts counts WebSocket upgrade requests muxd has received.
	wsAccepts atomic.Int64
	log       *testnode.LockedBuffer // muxd's log; printed when the test fails
}

// newHarness starts geth and muxd and waits until muxd's upstream is up.
// mod may adjust the muxd config.
func newHarness(t *testing.T, mod func(*mux.Config)) *harness {
	t.Helper()
	node := gethnode.Start(t)
	h := &harness{node: node, log: &testnode.LockedBuffer{}}
	cfg := mux.Config{
		Upstream: node.WSURL,
		Logger:   slog.New(slog.NewTextHandler(h.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := mux.New(cfg)
	if err != nil {
		t.Fatalf("mux.New: %v", err)
	}
	h.srv = srv
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- srv.Run(ctx) }()
	h.front = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			h.wsAccepts.Add(1)
		}
		srv.ServeHTTP(w, r)
	}))
	// Registered after gethnode's cleanup, so it runs before geth stops;
	// clients registered later are closed before it.
	t.Cleanup(func() {
		h.front.CloseClientConnections()
		h.front.Close()
		cancel()
		select {
		case <-runDone:
		case <-time.After(15 * time.Second):
			t.Errorf("mux Server.Run did not return within 15s of cancel")
		}
		if t.Failed() {
			t.Logf("muxd log:\n%s", tail(h.log.String(), 16<<10))
		}
	})
	h.HTTPURL = h.front.URL
	h.WSURL = "ws" + strings.TrimPrefix(h.front.URL, "http")
	testnode.WaitConnectedWithin(t, srv, true, 30*time.Second)
	return h
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// dial connects an rpc.Client and closes it at cleanup.
func dial(t *testing.T, url string) *rpc.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := rpc.DialContext(ctx, url)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(c.Close)
	return c
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// devAccount returns eth_accounts[0], the unlocked --dev account.
func devAccount(t *testing.T, c *rpc.Client) string {
	t.Helper()
	var accts []string
	if err := c.CallContext(ctxT(t, 10*time.Second), &accts, "eth_accounts"); err != nil {
		t.Fatalf("eth_accounts: %v", err)
	}
	if len(accts) == 0 {
		t.Fatal("eth_accounts: no dev account")
	}
	return accts[0]
}

// waitBlock waits, on a newHeads subscription of c, until the chain has
// reached block n.
func waitBlock(t *testing.T, c *rpc.Client, n uint64) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	ec := ethclient.NewClient(c)
	heads := make(chan *types.Header, 16)
	sub, err := ec.SubscribeNewHead(ctx, heads)
	if err != nil {
		t.Fatalf("SubscribeNewHead: %v", err)
	}
	defer sub.Unsubscribe()
	if cur, err := ec.BlockNumber(ctx); err == nil && cur >= n {
		return
	}
	for {
		select {
		case h := <-heads:
			if h.Number.Uint64() >= n {
				return
			}
		case err := <-sub.Err():
			t.Fatalf("newHeads subscription failed while waiting for block %d: %v", n, err)
		case <-ctx.Done():
			t.Fatalf("block %d not reached: %v", n, ctx.Err())
		}
	}
}

// sendTx sends tx with eth_sendTransaction on c and returns its hash.
func sendTx(t *testing.T, c *rpc.Client, tx map[string]any) string {
	t.Helper()
	var hash string
	if err := c.CallContext(ctxT(t, 10*time.Second), &hash, "eth_sendTransaction", tx); err != nil {
		t.Fatalf("eth_sendTransaction %v: %v", tx, err)
	}
	return hash
}

// minedReceipt waits, block by block (at most 10), until transaction hash
// is mined, and returns its receipt as c answers it.
func minedReceipt(t *testing.T, c *rpc.Client, hash string) map[string]any {
	t.Helper()
	for tries := 0; ; tries++ {
		var rcpt map[string]any
		if err := c.CallContext(ctxT(t, 10*time.Second), &rcpt, "eth_getTransactionReceipt", hash); err != nil {
			t.Fatalf("eth_getTransactionReceipt %s: %v", hash, err)
		}
		if rcpt != nil {
			return rcpt
		}
		if tries == 10 {
			t.Fatalf("transaction %s not mined in 10 blocks", hash)
		}
		// Not mined yet: wait for the next block.
		var cur string
		if err := c.CallContext(ctxT(t, 10*time.Second), &cur, "eth_blockNumber"); err != nil {
			t.Fatalf("eth_blockNumber: %v", err)
		}
		waitBlock(t, c, hexNum(t, cur)+1)
	}
}

// outcome is a call's result or error in a comparable form.
type outcome struct {
	Result any    // decoded JSON result
	Code   int    // JSON-RPC error code, 0 if none
	Msg    string // error message
	Data   any    // error data
}

func outcomeOf(raw json.RawMessage, err error) (outcome, bool) {
	var o outcome
	if err != nil {
		rerr, ok := err.(rpc.Error)
		if !ok {
			return o, false // transport error, not a JSON-RPC answer
		}
		o.Code, o.Msg = rerr.ErrorCode(), rerr.Error()
		if de, ok := err.(rpc.DataError); ok {
			o.Data = de.ErrorData()
		}
		return o, true
	}
	if raw != nil {
		if jerr := json.Unmarshal(raw, &o.Result); jerr != nil {
			o.Msg = "undecodable result: " + jerr.Error()
		}
	}
	return o, true
}

func sameOutcome(a, b outcome) bool { return reflect.DeepEqual(a, b) }
