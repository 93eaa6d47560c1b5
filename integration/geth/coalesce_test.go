package gethtest

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// perClient is how many times each client through muxd makes each call of
// a round, all at once.
const perClient = 8

// TestCoalescedReadsMatchDirect: muxd with coalescing and the cache of
// immutable answers on (the defaults) in front of geth --dev, which mines a
// block a second. Several clients through muxd (three WebSocket, one HTTP)
// make each read call many times at once, round after round on new blocks,
// and every answer must equal geth's direct answer (the decoded JSON,
// result or error): for calls pinned to a block number or hash, or to a
// transaction sent straight to geth, the direct answer to the same call;
// for "latest" calls, in a round during which geth's head did not move
// (rounds that straddle a block are not judged), the direct answer pinned
// to that head's number, so that every coalesced answer of the round is
// the same one. A receipt asked for before it was mined (null) is asked
// again once it is. muxd must have coalesced calls and answered some from
// its cache, the mined receipt among them, so both paths ran.
func TestCoalescedReadsMatchDirect(t *testing.T) {
	h := newHarness(t, nil)
	direct := dial(t, h.node.WSURL)
	via := []*rpc.Client{dial(t, h.WSURL), dial(t, h.WSURL), dial(t, h.WSURL), dial(t, h.HTTPURL)}
	dev := devAccount(t, direct)
	// A newHeads subscription through muxd for the whole test: muxd's head
	// tracker learns the chain from it (it is what lets a mined
	// transaction's receipt be cached), and rounds start on its heads.
	heads := followHeads(t, via[0])

	contract := deployLogContract(t, direct, dev)
	tx := sendTx(t, direct, map[string]any{"from": dev, "to": contract, "data": topicA, "gas": "0x10000"})
	// Asked through muxd before the block that holds it, the transaction's
	// receipt is null, which must not be cached: the rounds below ask again
	// once it is mined.
	early := fanOut(t, via, []call{{"eth_getTransactionReceipt", []any{tx}}})
	t.Logf("receipt through muxd before it was mined: %v", early[0][0].Result)
	rcpt := minedReceipt(t, direct, tx)
	blockHash, _ := rcpt["blockHash"].(string)
	blockNum, _ := rcpt["blockNumber"].(string)
	if logs, _ := rcpt["logs"].([]any); len(logs) != 1 || blockHash == "" || blockNum == "" {
		t.Fatalf("receipt of the log transaction: %v", rcpt)
	}

	pinned := []call{
		{"eth_chainId", nil},
		{"net_version", nil},
		{"eth_getBlockByNumber", []any{blockNum, false}},
		{"eth_getBlockByNumber", []any{blockNum, true}},
		{"eth_getBlockByHash", []any{blockHash, false}},
		{"eth_getBlockByHash", []any{blockHash, true}},
		{"eth_getBlockReceipts", []any{blockHash}},
		{"eth_getBlockReceipts", []any{blockNum}},
		{"eth_getTransactionByHash", []any{tx}},
		{"eth_getTransactionReceipt", []any{tx}},
		{"eth_getLogs", []any{map[string]any{"blockHash": blockHash}}},
		{"eth_call", []any{map[string]any{"to": contract, "data": topicA}, blockNum}},
		{"eth_getBalance", []any{dev, blockNum}},
		{"eth_getCode", []any{contract, blockNum}},
		{"eth_getBlockByNumber", []any{"0xffffffff", false}}, // null
	}
	for round := range 3 {
		heads.after(t, blockNumber(t, direct))
		want := make([]outcome, len(pinned))
		for i, cl := range pinned {
			want[i] = callOutcome(t, direct, cl)
		}
		got := fanOut(t, via, pinned)
		for i, cl := range pinned {
			checkAll(t, fmt.Sprintf("round %d, %s", round, cl), got[i], want[i])
		}
	}

	latest := []call{
		{"eth_blockNumber", nil},
		{"eth_getBlockByNumber", []any{"latest", false}},
		{"eth_getBlockByNumber", []any{"latest", true}},
		{"eth_getBalance", []any{dev, "latest"}},
		{"eth_call", []any{map[string]any{"to": contract, "data": topicA}, "latest"}},
		{"eth_getCode", []any{contract, "latest"}},
	}
	for judged, round := 0, 0; judged < 4; round++ {
		if round == 12 {
			t.Fatalf("only %d of %d rounds of latest calls ran within one block", judged, round)
		}
		heads.after(t, blockNumber(t, direct))
		n0 := blockNumber(t, direct)
		got := fanOut(t, via, latest)
		if n1 := blockNumber(t, direct); n1 != n0 {
			t.Logf("latest round %d: geth's head moved from %d to %d; not judged", round, n0, n1)
			continue
		}
		judged++
		at := fmt.Sprintf("0x%x", n0)
		for i, cl := range latest {
			want := outcome{Result: at} // eth_blockNumber
			if cl.method != "eth_blockNumber" {
				want = callOutcome(t, direct, pinAt(cl, at))
			}
			checkAll(t, fmt.Sprintf("block %d, %s", n0, cl), got[i], want)
		}
	}

	m := h.srv.Metrics()
	coalesced, byMethod := counterVecSum(t, m.Coalesced)
	hits, hitsBy := counterVecSum(t, m.CacheHits)
	t.Logf("coalesced %v %v; cache hits %v %v", coalesced, byMethod, hits, hitsBy)
	if coalesced == 0 {
		t.Error("muxd_coalesced_total is 0: no request joined another in flight")
	}
	if hits == 0 {
		t.Error("muxd_cache_hits_total is 0: no answer came from the cache")
	}
	if hitsBy["eth_getTransactionReceipt"] == 0 {
		t.Error("the mined receipt never came from the cache: muxd's head tracker did not hold its block canonical")
	}
}

// checkAll reports every outcome in got that differs from want.
func checkAll(t *testing.T, what string, got []outcome, want outcome) {
	t.Helper()
	bad := 0
	for _, o := range got {
		if !sameOutcome(o, want) {
			if bad == 0 {
				t.Errorf("%s:\n via muxd %+v\n direct   %+v", what, o, want)
			}
			bad++
		}
	}
	if bad > 1 {
		t.Errorf("%s: %d of %d answers differ", what, bad, len(got))
	}
}

// pinAt returns cl with its "latest" block argument replaced by number.
func pinAt(cl call, number string) call {
	args := make([]any, len(cl.args))
	for i, a := range cl.args {
		if a == "latest" {
			a = number
		}
		args[i] = a
	}
	return call{cl.method, args}
}

// fanOut makes every call perClient times on each client, all at once, and
// returns the outcomes by call.
func fanOut(t *testing.T, clients []*rpc.Client, calls []call) [][]outcome {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	out := make([][]outcome, len(calls))
	errs := make([][]error, len(calls))
	var wg sync.WaitGroup
	for i, cl := range calls {
		n := len(clients) * perClient
		out[i], errs[i] = make([]outcome, n), make([]error, n)
		for j := range n {
			c := clients[j/perClient]
			wg.Go(func() {
				var raw json.RawMessage
				err := c.CallContext(ctx, &raw, cl.method, cl.args...)
				o, ok := outcomeOf(raw, err)
				if !ok {
					errs[i][j] = err
				}
				out[i][j] = o
			})
		}
	}
	wg.Wait()
	for i, es := range errs {
		for _, err := range es {
			if err != nil {
				t.Fatalf("%s: transport error %v", calls[i], err)
			}
		}
	}
	return out
}

// headFeed is a newHeads subscription held for a whole test.
type headFeed struct {
	heads chan *types.Header
	sub   ethereum.Subscription
}

func followHeads(t *testing.T, c *rpc.Client) *headFeed {
	t.Helper()
	f := &headFeed{heads: make(chan *types.Header, 64)}
	sub, err := ethclient.NewClient(c).SubscribeNewHead(ctxT(t, 10*time.Second), f.heads)
	if err != nil {
		t.Fatalf("SubscribeNewHead: %v", err)
	}
	f.sub = sub
	t.Cleanup(sub.Unsubscribe)
	return f
}

// after waits until the feed delivers a head above block n.
func (f *headFeed) after(t *testing.T, n uint64) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case h := <-f.heads:
			if h.Number.Uint64() > n {
				return
			}
		case err := <-f.sub.Err():
			t.Fatalf("newHeads subscription ended waiting for a head above %d: %v", n, err)
		case <-timeout:
			t.Fatalf("no head above %d in 30s", n)
		}
	}
}

// counterVecSum returns the sum of v's counters and each by its labels.
func counterVecSum(t *testing.T, v *prometheus.CounterVec) (float64, map[string]float64) {
	t.Helper()
	ch := make(chan prometheus.Metric)
	go func() { v.Collect(ch); close(ch) }()
	var sum float64
	by := map[string]float64{}
	var werr error
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			werr = err
			continue
		}
		var labels string
		for _, l := range d.GetLabel() {
			labels += l.GetValue()
		}
		by[labels] = d.GetCounter().GetValue()
		sum += d.GetCounter().GetValue()
	}
	if werr != nil {
		t.Fatalf("reading a counter: %v", werr)
	}
	return sum, by
}
