package mux

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/rpc"
)

// TestGethClient: go-ethereum's own client works through muxd: calls,
// errors, batches, concurrent calls and subscriptions.
func TestGethClient(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	h.fake.SetHandler(func(fc *fakeConn, r fakeReq) {
		if r.Method == "eth_fail" {
			fc.Send(errorFrame(r.ID, 3, "execution reverted"))
			return
		}
		fc.Answer(r)
	})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cl, err := rpc.DialWebsocket(ctx, h.URL, "")
	if err != nil {
		t.Fatalf("DialWebsocket: %v", err)
	}
	t.Cleanup(cl.Close)

	var res echoed
	if err := cl.CallContext(ctx, &res, "eth_getBalance", "0xabc", "latest"); err != nil {
		t.Fatalf("CallContext: %v", err)
	}
	if res.Method != "eth_getBalance" || compact(res.Params) != `["0xabc","latest"]` {
		t.Errorf("CallContext result = %+v", res)
	}

	err = cl.CallContext(ctx, &res, "eth_fail")
	var rpcErr rpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.ErrorCode() != 3 || rpcErr.Error() != "execution reverted" {
		t.Errorf("error call: %v", err)
	}
	err = cl.CallContext(ctx, &res, "admin_peers")
	if !errors.As(err, &rpcErr) || rpcErr.ErrorCode() != -32601 {
		t.Errorf("denied method: %v", err)
	}

	batch := make([]rpc.BatchElem, 6)
	results := make([]echoed, len(batch))
	for i := range batch {
		batch[i] = rpc.BatchElem{Method: "eth_call", Args: []any{i}, Result: &results[i]}
	}
	batch[3].Method = "eth_fail"
	if err := cl.BatchCallContext(ctx, batch); err != nil {
		t.Fatalf("BatchCallContext: %v", err)
	}
	for i, b := range batch {
		if i == 3 {
			if !errors.As(b.Error, &rpcErr) || rpcErr.ErrorCode() != 3 {
				t.Errorf("batch element %d: error %v, want code 3", i, b.Error)
			}
			continue
		}
		if b.Error != nil || results[i].Method != "eth_call" || compact(results[i].Params) != fmt.Sprintf("[%d]", i) {
			t.Errorf("batch element %d: %+v, %v", i, results[i], b.Error)
		}
	}

	// Concurrent calls on the one client connection.
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			var r echoed
			if err := cl.CallContext(ctx, &r, "eth_chainId", i); err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			if compact(r.Params) != fmt.Sprintf("[%d]", i) {
				t.Errorf("call %d got %s", i, r.Params)
			}
		})
	}
	wg.Wait()

	ch := make(chan json.RawMessage, 16)
	sub, err := cl.EthSubscribe(ctx, ch, "newHeads")
	if err != nil {
		t.Fatalf("EthSubscribe: %v", err)
	}
	fc := h.fake.Conn(t, 1)
	fc.WaitLiveSubs(t, 1)
	for i := range 5 {
		want := fmt.Sprintf(`{"number":"0x%x"}`, i)
		fc.PushAll(t, want)
		select {
		case got := <-ch:
			if compact(got) != want {
				t.Errorf("push %d = %s, want %s", i, got, want)
			}
		case err := <-sub.Err():
			t.Fatalf("subscription failed: %v", err)
		case <-time.After(testTimeout):
			t.Fatalf("push %d never arrived", i)
		}
	}
	sub.Unsubscribe()
	h.fake.Wait(t, "eth_unsubscribe upstream", func() bool { return len(fc.Unsubs()) == 1 && len(fc.LiveSubs()) == 0 })
}
