package gethtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/rpc"
)

// subClient is one client holding newHeads and newPendingTransactions
// subscriptions through muxd, with what it has seen so far.
type subClient struct {
	name string

	mu      sync.Mutex
	heads   []uint64
	pending map[common.Hash]bool
	err     error
	changed chan struct{} // closed and replaced on every change
}

func (s *subClient) record(f func()) {
	s.mu.Lock()
	f()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// waitFor waits until cond (called under the lock) holds, the subscription
// fails, or ctx ends.
func (s *subClient) waitFor(ctx context.Context, what string, cond func() bool) error {
	for {
		s.mu.Lock()
		ok, err, ch := cond(), s.err, s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: subscription failed while waiting for %s: %w", s.name, what, err)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for %s: %w", s.name, what, ctx.Err())
		}
	}
}

func startSubClient(t *testing.T, name, url string) (*subClient, *rpc.Client) {
	t.Helper()
	c := dial(t, url)
	s := &subClient{name: name, pending: map[common.Hash]bool{}, changed: make(chan struct{})}
	ctx := ctxT(t, 20*time.Second)
	heads := make(chan *types.Header, 64)
	hsub, err := ethclient.NewClient(c).SubscribeNewHead(ctx, heads)
	if err != nil {
		t.Fatalf("%s: SubscribeNewHead: %v", name, err)
	}
	txs := make(chan common.Hash, 64)
	tsub, err := c.EthSubscribe(ctx, txs, "newPendingTransactions")
	if err != nil {
		t.Fatalf("%s: eth_subscribe newPendingTransactions: %v", name, err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case h := <-heads:
				s.record(func() { s.heads = append(s.heads, h.Number.Uint64()) })
			case tx := <-txs:
				s.record(func() { s.pending[tx] = true })
			case err := <-hsub.Err():
				s.record(func() { s.err = fmt.Errorf("newHeads: %v", err) })
				return
			case err := <-tsub.Err():
				s.record(func() { s.err = fmt.Errorf("newPendingTransactions: %v", err) })
				return
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(done)
		wg.Wait()
		hsub.Unsubscribe()
		tsub.Unsubscribe()
	})
	return s, c
}

// TestSubscriptionsFanOut has three clients subscribe to newHeads and
// newPendingTransactions through muxd (sharing one upstream subscription of
// each kind) while the dev account sends value transfers. Every client must
// see every transaction hash, and a gap-free run of heads covering the
// blocks that hold them.
func TestSubscriptionsFanOut(t *testing.T) {
	h := newHarness(t, nil)
	direct := dial(t, h.node.WSURL)
	dev := devAccount(t, direct)

	const nClients, nTxs = 3, 5
	var clients []*subClient
	var sender *rpc.Client
	for i := range nClients {
		s, c := startSubClient(t, fmt.Sprintf("client%d", i), h.WSURL)
		clients = append(clients, s)
		if i == 0 {
			sender = c
		}
	}

	var hashes []common.Hash
	for i := range nTxs {
		to := fmt.Sprintf("0x%040x", 0xbeef00+i)
		var hash common.Hash
		err := sender.CallContext(ctxT(t, 10*time.Second), &hash, "eth_sendTransaction",
			map[string]any{"from": dev, "to": to, "value": "0x1"})
		if err != nil {
			t.Fatalf("eth_sendTransaction %d: %v", i, err)
		}
		hashes = append(hashes, hash)
	}

	ctx := ctxT(t, 30*time.Second)
	for _, s := range clients {
		err := s.waitFor(ctx, "all pending tx hashes", func() bool {
			for _, hsh := range hashes {
				if !s.pending[hsh] {
					return false
				}
			}
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	// Find the blocks holding the transactions: after each head, ask for
	// the receipts still missing.
	blocks := map[common.Hash]uint64{}
	ec := ethclient.NewClient(direct)
	heads := make(chan *types.Header, 16)
	hsub, err := ec.SubscribeNewHead(ctx, heads)
	if err != nil {
		t.Fatalf("direct SubscribeNewHead: %v", err)
	}
	defer hsub.Unsubscribe()
	for {
		for _, hsh := range hashes {
			if _, ok := blocks[hsh]; ok {
				continue
			}
			if r, err := ec.TransactionReceipt(ctx, hsh); err == nil {
				if r.Status != types.ReceiptStatusSuccessful {
					t.Fatalf("tx %s failed", hsh)
				}
				blocks[hsh] = r.BlockNumber.Uint64()
			}
		}
		if len(blocks) == len(hashes) {
			break
		}
		select {
		case <-heads:
		case err := <-hsub.Err():
			t.Fatalf("direct newHeads: %v", err)
		case <-ctx.Done():
			t.Fatalf("transactions not mined: %d of %d receipts", len(blocks), len(hashes))
		}
	}
	lo, hi := uint64(1<<63), uint64(0)
	for _, b := range blocks {
		lo, hi = min(lo, b), max(hi, b)
	}
	t.Logf("%d txs mined in blocks %d..%d", nTxs, lo, hi)

	for _, s := range clients {
		err := s.waitFor(ctx, fmt.Sprintf("head %d", hi), func() bool {
			return slices.Contains(s.heads, hi)
		})
		if err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		got := slices.Clone(s.heads)
		s.mu.Unlock()
		for i := 1; i < len(got); i++ {
			if got[i] != got[i-1]+1 {
				t.Errorf("%s: heads not contiguous: %v", s.name, got)
				break
			}
		}
		if len(got) == 0 || got[0] > lo {
			t.Errorf("%s: heads %v do not cover blocks %d..%d", s.name, got, lo, hi)
		}
	}
}
