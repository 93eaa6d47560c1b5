package gethtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/muxd/muxd/internal/muxtest"
	"github.com/muxd/muxd/internal/testnode"
	"github.com/muxd/muxd/mux"
)

// TestGapFreeAcrossCut: geth --dev --dev.period 1 keeps mining while the
// path between muxd and geth is cut for several seconds. Through muxd,
// newHeads subscribers (two on one key) receive strictly consecutive heads
// with chained parent hashes, each byte-identical to what geth pushes to
// a direct subscriber; logs subscribers on two filters (two subscribers on
// one of them) receive exactly what eth_getLogs reports for the run, each
// once, none removed. A sender talking to geth directly calls a contract
// every 250 ms.
func TestGapFreeAcrossCut(t *testing.T) {
	var proxy *testnode.CutProxy
	h := newHarness(t, func(c *mux.Config) {
		proxy = testnode.NewCutProxy(t, strings.TrimPrefix(c.Upstream, "ws://"))
		c.Upstream = "ws://" + proxy.Addr()
		c.ReconnectInitial = 100 * time.Millisecond
		c.ReconnectMax = 200 * time.Millisecond
	})
	direct := dial(t, h.node.WSURL)
	from := devAccount(t, direct)
	contract := deployLogContract(t, direct, from)

	c1, c2, c3 := dial(t, h.WSURL), dial(t, h.WSURL), dial(t, h.WSURL)
	all := map[string]any{"address": contract}
	onlyA := map[string]any{"address": contract, "topics": []any{[]string{topicA}}}
	heads := []*gapSub{subscribeGap(t, c1, "heads1", "newHeads"), subscribeGap(t, c2, "heads2", "newHeads")}
	directHeads := subscribeGap(t, direct, "direct heads", "newHeads")
	logsAll := []*gapSub{subscribeGap(t, c1, "logs-all-1", "logs", all), subscribeGap(t, c3, "logs-all-2", "logs", all)}
	logsA := subscribeGap(t, c2, "logs-A", "logs", onlyA)

	startN := blockNumber(t, direct)
	start := fmt.Sprintf("0x%x", startN)
	// The sender talks to geth directly.
	stopSend := startLogSender(t, direct, from, contract)

	waitBlock(t, direct, startN+3)
	before := counterValue(t, h.srv.Metrics().UpstreamReconnects)
	proxy.Cut()
	time.AfterFunc(6*time.Second, proxy.Restore)
	cutAt := time.Now()
	// muxd loses the upstream at once, and reconnects once the path is back.
	muxtest.WaitConnected(t, h.srv, false, 10*time.Second)
	muxtest.WaitConnected(t, h.srv, true, 30*time.Second)
	if counterValue(t, h.srv.Metrics().UpstreamReconnects) == before {
		t.Fatal("connected again without a reconnect")
	}
	t.Logf("reconnected %v after the cut began", time.Since(cutAt).Round(10*time.Millisecond))
	waitBlock(t, direct, blockNumber(t, direct)+3)
	sent := stopSend()
	// Every log the sender caused is mined within a couple of blocks.
	end := blockNumber(t, direct) + 3
	waitBlock(t, direct, end+2)

	// Heads: consecutive, chained, byte-identical to geth's own pushes.
	directByNum := headsByNumber(t, directHeads.drain())
	for _, s := range heads {
		checkHeads(t, s, directByNum, end)
	}
	// Logs: exactly eth_getLogs over the run, each once, none removed.
	for _, s := range logsAll {
		checkLogs(t, direct, s, all, start, end)
	}
	checkLogs(t, direct, logsA, onlyA, start, end)
	m := h.srv.Metrics()
	bfHeads, bfLogs := counterValue(t, m.BackfilledHeads), counterValue(t, m.BackfilledLogs)
	t.Logf("sent %d transactions; backfilled heads %v, logs %v", sent, bfHeads, bfLogs)
	if bfHeads == 0 || bfLogs == 0 {
		t.Errorf("nothing was backfilled: the cut did not make a gap")
	}
}
