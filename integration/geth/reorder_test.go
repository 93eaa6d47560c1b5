package gethtest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ethereum/go-ethereum/rpc"
)

// slowInitCode is contract-creation code for eth_call that counts down from
// 0x0c0000 in a loop (26 gas a round, about 20M gas) and then returns the
// 32-byte word 0x2a: geth spends tens of milliseconds or more on it.
//
//	PUSH3 n; JUMPDEST; PUSH1 1; SWAP1; SUB; DUP1; PUSH1 4; JUMPI
//	PUSH1 0x2a; PUSH1 0; MSTORE; PUSH1 32; PUSH1 0; RETURN
const slowInitCode = "0x620c00005b600190038060045760" + "2a60005260206000f3"

const slowGas = "0x1c9c380" // 30M

func slowCall() call {
	return call{"eth_call", []any{map[string]any{"data": slowInitCode, "gas": slowGas}, "latest"}}
}

// TestConcurrentSlowAndFast sends, from two clients through muxd, a slow
// eth_call and a fast eth_chainId back to back. geth runs WebSocket
// requests concurrently, so the fast answer normally overtakes the slow one
// on muxd's shared upstream socket; each client must still get its own
// answer. muxd's metrics cannot show the overtaking, so it is only logged.
func TestConcurrentSlowAndFast(t *testing.T) {
	h := newHarness(t, nil)
	direct := dial(t, h.node.WSURL)
	slowC := dial(t, h.WSURL)
	fastC := dial(t, h.WSURL)

	began := time.Now()
	want := callOutcome(t, direct, slowCall())
	slowDirect := time.Since(began)
	if want.Code != 0 || want.Result != "0x000000000000000000000000000000000000000000000000000000000000002a" {
		t.Fatalf("direct slow eth_call = %+v", want)
	}
	t.Logf("slow eth_call takes %v straight to geth", slowDirect)

	const rounds = 5
	overtaken := 0
	for round := range rounds {
		type answer struct {
			o  outcome
			at time.Time
		}
		var wg sync.WaitGroup
		var slowAns, fastAns, sameConnFast answer
		run := func(c *rpc.Client, cl call, dst *answer) {
			defer wg.Done()
			var raw json.RawMessage
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := c.CallContext(ctx, &raw, cl.method, cl.args...)
			o, ok := outcomeOf(raw, err)
			if !ok {
				o.Msg = fmt.Sprintf("transport error: %v", err)
			}
			*dst = answer{o, time.Now()}
		}
		framesOut := counterValue(t, h.srv.Metrics().UpstreamFramesOut)
		wg.Add(1)
		go run(slowC, slowCall(), &slowAns)
		// Send the fast ones only once muxd has written the slow request
		// upstream, so a fast answer arriving first means geth answered
		// out of order on muxd's shared socket.
		waitCounter(t, h.srv.Metrics().UpstreamFramesOut, framesOut+1)
		wg.Add(2)
		go run(fastC, call{"eth_chainId", nil}, &fastAns)
		go run(slowC, call{"eth_chainId", nil}, &sameConnFast)
		wg.Wait()

		if !sameOutcome(slowAns.o, want) {
			t.Errorf("round %d: slow eth_call via muxd = %+v, want %+v", round, slowAns.o, want)
		}
		for name, a := range map[string]answer{"other client": fastAns, "same client": sameConnFast} {
			if a.o.Code != 0 || a.o.Result != devChainID {
				t.Errorf("round %d: eth_chainId (%s) via muxd = %+v, want %s", round, name, a.o, devChainID)
			}
		}
		if fastAns.at.Before(slowAns.at) && sameConnFast.at.Before(slowAns.at) {
			overtaken++
		}
	}
	// Observed with geth 1.17.10: the fast answers overtake the slow one in
	// every round (5 of 5), i.e. real reordering on the upstream socket.
	t.Logf("fast answers overtook the slow one in %d of %d rounds", overtaken, rounds)
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// waitCounter polls c until it reaches n (muxd exposes no event for it).
func waitCounter(t *testing.T, c prometheus.Counter, n float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for counterValue(t, c) < n {
		if time.Now().After(deadline) {
			t.Fatalf("counter did not reach %v", n)
		}
		<-tick.C
	}
}
