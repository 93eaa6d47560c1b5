package gethtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/rpc"

	"github.com/muxd/muxd/internal/testnode"
	"github.com/muxd/muxd/mux"
)

// cutProxy forwards TCP connections to a target and can cut the path:
// every proxied connection is closed and new ones are refused for a while,
// as when the network between muxd and the node is down.
type cutProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   map[net.Conn]bool
	refuse  bool
	wg      sync.WaitGroup
	stopped bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.refuse || p.stopped {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = true, true
		p.wg.Add(2)
		p.mu.Unlock()
		go p.copy(up, c)
		go p.copy(c, up)
	}
}

func (p *cutProxy) copy(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// cut closes every proxied connection and refuses new ones for d.
func (p *cutProxy) cut(d time.Duration) {
	p.mu.Lock()
	p.refuse = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	time.AfterFunc(d, func() {
		p.mu.Lock()
		p.refuse = false
		p.mu.Unlock()
	})
}

func (p *cutProxy) close() {
	p.mu.Lock()
	p.stopped = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

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

// TestGapFreeAcrossCut: geth --dev --dev.period 1 keeps mining while the
// path between muxd and geth is cut for several seconds. Through muxd,
// newHeads subscribers (two on one key) receive strictly consecutive heads
// with chained parent hashes, each byte-identical to what geth pushes to
// a direct subscriber; logs subscribers on two filters (two subscribers on
// one of them) receive exactly what eth_getLogs reports for the run, each
// once, none removed. A sender talking to geth directly calls a contract
// every 250 ms.
func TestGapFreeAcrossCut(t *testing.T) {
	var proxy *cutProxy
	h := newHarness(t, func(c *mux.Config) {
		proxy = newCutProxy(t, strings.TrimPrefix(c.Upstream, "ws://"))
		c.Upstream = "ws://" + proxy.ln.Addr().String()
		c.ReconnectInitial = 100 * time.Millisecond
		c.ReconnectMax = 200 * time.Millisecond
	})
	direct := dial(t, h.node.WSURL)
	from := devAccount(t, direct)

	// Deploy the contract.
	contract, _ := minedReceipt(t, direct, sendTx(t, direct, map[string]any{
		"from": from, "data": logContract, "gas": "0x30000",
	}))["contractAddress"].(string)
	if contract == "" {
		t.Fatal("deploy receipt without a contract address")
	}

	c1, c2, c3 := dial(t, h.WSURL), dial(t, h.WSURL), dial(t, h.WSURL)
	all := map[string]any{"address": contract}
	onlyA := map[string]any{"address": contract, "topics": []any{[]string{topicA}}}
	heads := []*gapSub{subscribeGap(t, c1, "heads1", "newHeads"), subscribeGap(t, c2, "heads2", "newHeads")}
	directHeads := subscribeGap(t, direct, "direct heads", "newHeads")
	logsAll := []*gapSub{subscribeGap(t, c1, "logs-all-1", "logs", all), subscribeGap(t, c3, "logs-all-2", "logs", all)}
	logsA := subscribeGap(t, c2, "logs-A", "logs", onlyA)

	var start string
	if err := direct.CallContext(ctxT(t, 10*time.Second), &start, "eth_blockNumber"); err != nil {
		t.Fatal(err)
	}
	// The sender talks to geth directly, every 250 ms, topics A and B in
	// turn.
	stopSend := make(chan struct{})
	sendDone := make(chan int)
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
			if err := direct.CallContext(ctx, &tx, "eth_sendTransaction", map[string]any{
				"from": from, "to": contract, "data": topic, "gas": "0x10000",
			}); err == nil {
				n++
			}
			cancel()
		}
	}()

	startN := hexNum(t, start)
	waitBlock(t, direct, startN+3)
	before := counterValue(t, h.srv.Metrics().UpstreamReconnects)
	proxy.cut(6 * time.Second)
	cutAt := time.Now()
	// muxd loses the upstream at once, and reconnects once the path is back.
	testnode.WaitConnectedWithin(t, h.srv, false, 10*time.Second)
	testnode.WaitConnectedWithin(t, h.srv, true, 30*time.Second)
	if counterValue(t, h.srv.Metrics().UpstreamReconnects) == before {
		t.Fatal("connected again without a reconnect")
	}
	t.Logf("reconnected %v after the cut began", time.Since(cutAt).Round(10*time.Millisecond))
	var cur string
	_ = direct.CallContext(ctxT(t, 10*time.Second), &cur, "eth_blockNumber")
	waitBlock(t, direct, hexNum(t, cur)+3)
	close(stopSend)
	sent := <-sendDone
	// Every log the sender caused is mined within a couple of blocks.
	_ = direct.CallContext(ctxT(t, 10*time.Second), &cur, "eth_blockNumber")
	end := hexNum(t, cur) + 3
	waitBlock(t, direct, end+2)

	// Heads: consecutive, chained, byte-identical to geth's own pushes.
	directByNum := map[uint64][]byte{}
	for _, m := range directHeads.drain() {
		var f headFields
		_ = json.Unmarshal(m, &f)
		directByNum[hexNum(t, f.Number)] = m
	}
	for _, s := range heads {
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
			if d, ok := directByNum[hexNum(t, f.Number)]; ok {
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

	// Logs: exactly eth_getLogs over the run, each once, none removed.
	check := func(s *gapSub, filter map[string]any) {
		q := map[string]any{"fromBlock": start, "toBlock": fmt.Sprintf("0x%x", end)}
		for k, v := range filter {
			q[k] = v
		}
		var want []logFields
		if err := direct.CallContext(ctxT(t, 10*time.Second), &want, "eth_getLogs", q); err != nil {
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
	for _, s := range logsAll {
		check(s, all)
	}
	check(logsA, onlyA)
	m := h.srv.Metrics()
	bfHeads, bfLogs := counterValue(t, m.BackfilledHeads), counterValue(t, m.BackfilledLogs)
	t.Logf("sent %d transactions; backfilled heads %v, logs %v", sent, bfHeads, bfLogs)
	if bfHeads == 0 || bfLogs == 0 {
		t.Errorf("nothing was backfilled: the cut did not make a gap")
	}
}
