// Package gethtest runs muxd in front of a real geth --dev node and drives it
// with go-ethereum's own rpc and ethclient packages.
package gethtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/muxd/muxd/integration/gethnode"
	"github.com/muxd/muxd/internal/muxtest"
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
	return newHarnessOn(t, gethnode.Start(t), mod)
}

// newHarnessOn is newHarness in front of node.
func newHarnessOn(t *testing.T, node *gethnode.Node, mod func(*mux.Config)) *harness {
	t.Helper()
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
	muxtest.WaitConnected(t, srv, true, 30*time.Second)
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

// blockNumber asks c for eth_blockNumber.
func blockNumber(t *testing.T, c *rpc.Client) uint64 {
	t.Helper()
	var n string
	if err := c.CallContext(ctxT(t, 10*time.Second), &n, "eth_blockNumber"); err != nil {
		t.Fatalf("eth_blockNumber: %v", err)
	}
	return hexNum(t, n)
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

// logContract's runtime emits LOG1 with topic calldata[0:32] and no data:
//
//	PUSH1 0 CALLDATALOAD PUSH1 0 PUSH1 0 LOG1 STOP
//
// Its init code copies those 9 bytes to memory and returns them.
const logContract = "0x6009600c60003960096000f3" + "60003560006000a100"

var (
	topicA = "0x" + strings.Repeat("0", 63) + "a"
	topicB = "0x" + strings.Repeat("0", 63) + "b"
)

type gapSub struct {
	name string
	ch   chan json.RawMessage
	sub  *rpc.ClientSubscription
}

func subscribeGap(t *testing.T, c *rpc.Client, name string, args ...any) *gapSub {
	t.Helper()
	s := &gapSub{name: name, ch: make(chan json.RawMessage, 100000)}
	sub, err := c.EthSubscribe(ctxT(t, 10*time.Second), s.ch, args...)
	if err != nil {
		t.Fatalf("%s: eth_subscribe: %v", name, err)
	}
	s.sub = sub
	t.Cleanup(sub.Unsubscribe)
	return s
}

// drain returns what s has received so far.
func (s *gapSub) drain() []json.RawMessage {
	var out []json.RawMessage
	for {
		select {
		case m := <-s.ch:
			out = append(out, m)
		default:
			return out
		}
	}
}

type headFields struct {
	Number     string `json:"number"`
	Hash       string `json:"hash"`
	ParentHash string `json:"parentHash"`
}

type logFields struct {
	BlockNumber string `json:"blockNumber"`
	BlockHash   string `json:"blockHash"`
	LogIndex    string `json:"logIndex"`
	TxHash      string `json:"transactionHash"`
	Removed     bool   `json:"removed"`
}

func hexNum(t *testing.T, s string) uint64 {
	n, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	if err != nil {
		t.Fatalf("bad quantity %q", s)
	}
	return n
}

// deployLogContract deploys logContract from the account from over c and
// returns the contract's address once it is mined.
func deployLogContract(t *testing.T, c *rpc.Client, from string) string {
	t.Helper()
	addr, _ := minedReceipt(t, c, sendTx(t, c, map[string]any{
		"from": from, "data": logContract, "gas": "0x30000",
	}))["contractAddress"].(string)
	if addr == "" {
		t.Fatal("deploy receipt without a contract address")
	}
	return addr
}

// startLogSender calls contract from the account from over c every 250 ms,
// topics A and B in turn, so that every block or two holds a log. The
// returned stop ends it and returns how many transactions were accepted;
// it also runs at cleanup.
func startLogSender(t *testing.T, c *rpc.Client, from, contract string) (stop func() int) {
	stopSend := make(chan struct{})
	sendDone := make(chan int, 1)
	go func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		n := 0
		for {
			select {
			case <-stopSend:
				sendDone <- n
				return
			case <-tick.C:
			}
			topic := topicA
			if n%2 == 1 {
				topic = topicB
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var tx string
			if err := c.CallContext(ctx, &tx, "eth_sendTransaction", map[string]any{
				"from": from, "to": contract, "data": topic, "gas": "0x10000",
			}); err == nil {
				n++
			}
			cancel()
		}
	}()
	var once sync.Once
	sent := 0
	stop = func() int {
		once.Do(func() {
			close(stopSend)
			sent = <-sendDone
		})
		return sent
	}
	t.Cleanup(func() { stop() })
	return stop
}

// headsByNumber indexes newHeads pushes by block number.
func headsByNumber(t *testing.T, pushes []json.RawMessage) map[uint64][]byte {
	t.Helper()
	out := map[uint64][]byte{}
	for _, m := range pushes {
		var f headFields
		if err := json.Unmarshal(m, &f); err != nil {
			t.Fatalf("head push %s: %v", m, err)
		}
		out[hexNum(t, f.Number)] = m
	}
	return out
}

// checkHeads checks what the newHeads subscription s has received: heads
// strictly consecutive with chained parent hashes (no gap, no duplicate),
// up to block end at least, each byte-identical to geth's own push of the
// same block in direct (by number) where direct has it.
func checkHeads(t *testing.T, s *gapSub, direct map[uint64][]byte, end uint64) {
	t.Helper()
	got := s.drain()
	var prev headFields
	compared := 0
	for i, m := range got {
		var f headFields
		if err := json.Unmarshal(m, &f); err != nil {
			t.Fatalf("%s: head %d: %v", s.name, i, err)
		}
		if i > 0 && (hexNum(t, f.Number) != hexNum(t, prev.Number)+1 || f.ParentHash != prev.Hash) {
			t.Fatalf("%s: head %s (parent %s) after %s (%s): not consecutive", s.name, f.Number, f.ParentHash, prev.Number, prev.Hash)
		}
		if d, ok := direct[hexNum(t, f.Number)]; ok {
			if !bytes.Equal(d, m) {
				t.Errorf("%s: head %s differs from geth's own push:\nmuxd %s\ngeth %s", s.name, f.Number, m, d)
			}
			compared++
		}
		prev = f
	}
	if len(got) == 0 || hexNum(t, prev.Number) < end {
		t.Fatalf("%s: %d heads, last %s, want up to at least %d", s.name, len(got), prev.Number, end)
	}
	t.Logf("%s: %d consecutive heads, %d compared byte for byte with geth's", s.name, len(got), compared)
}

// checkLogs checks what the logs subscription s on filter has received
// against eth_getLogs on c from block start to end: each log once, none
// removed, none missing, none that eth_getLogs does not report.
func checkLogs(t *testing.T, c *rpc.Client, s *gapSub, filter map[string]any, start string, end uint64) {
	t.Helper()
	q := map[string]any{"fromBlock": start, "toBlock": fmt.Sprintf("0x%x", end)}
	for k, v := range filter {
		q[k] = v
	}
	var want []logFields
	if err := c.CallContext(ctxT(t, 10*time.Second), &want, "eth_getLogs", q); err != nil {
		t.Fatalf("eth_getLogs: %v", err)
	}
	wantSet := map[string]bool{}
	for _, l := range want {
		wantSet[l.BlockHash+"/"+l.LogIndex] = true
	}
	seen := map[string]bool{}
	for _, m := range s.drain() {
		var l logFields
		_ = json.Unmarshal(m, &l)
		k := l.BlockHash + "/" + l.LogIndex
		if l.Removed {
			t.Errorf("%s: removed log %s (no reorg in --dev)", s.name, k)
		}
		if seen[k] {
			t.Errorf("%s: log %s delivered twice", s.name, k)
		}
		seen[k] = true
		if hexNum(t, l.BlockNumber) <= end && !wantSet[k] {
			t.Errorf("%s: log %s not in eth_getLogs", s.name, k)
		}
	}
	missing := 0
	for k := range wantSet {
		if !seen[k] {
			missing++
		}
	}
	if missing > 0 || len(want) == 0 {
		t.Errorf("%s: %d of %d logs of eth_getLogs never delivered", s.name, missing, len(want))
	}
	t.Logf("%s: %d logs, as eth_getLogs", s.name, len(want))
}
