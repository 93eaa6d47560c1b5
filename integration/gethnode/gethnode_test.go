package gethnode_test

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/muxd/muxd/integration/gethnode"
)

// devChainID is the chain id geth --dev uses.
var devChainID = big.NewInt(1337)

func TestStartStopRestart(t *testing.T) {
	n := gethnode.Start(t)
	if n.WSURL == "" || n.HTTPURL == "" || n.DataDir == "" {
		t.Fatalf("incomplete node: %+v", n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	ec := dial(ctx, t, n.WSURL)
	checkChainID(ctx, t, ec)
	before := waitNewHead(ctx, t, ec)
	beforeHash := blockHash(ctx, t, ec, before)
	ec.Close()

	// HTTP is served too.
	hc := dial(ctx, t, n.HTTPURL)
	checkChainID(ctx, t, hc)
	hc.Close()

	n.Stop(t)
	if n.Running() {
		t.Fatal("Running() after Stop")
	}
	if _, err := rpc.DialContext(ctx, n.WSURL); err == nil {
		t.Fatal("dial succeeded while geth is stopped")
	}
	n.Stop(t) // stopping twice is harmless

	wsURL := n.WSURL
	n.Restart(t)
	if n.WSURL != wsURL {
		t.Fatalf("WSURL changed on restart: %s -> %s", wsURL, n.WSURL)
	}
	ec = dial(ctx, t, wsURL) // the old URL works again
	defer ec.Close()
	checkChainID(ctx, t, ec)
	after, err := ec.BlockNumber(ctx)
	if err != nil {
		t.Fatalf("BlockNumber after restart: %v", err)
	}
	t.Logf("head before stop: %d, block number after restart: %d", before, after)
	if after < before {
		t.Fatalf("chain went back on restart: block %d before, %d after", before, after)
	}
	// Same chain, not a fresh one that happens to be as long: block `before`
	// is still the block it was.
	if h := blockHash(ctx, t, ec, before); h != beforeHash {
		t.Fatalf("block %d is %s after restart, was %s: the chain did not survive the restart", before, h, beforeHash)
	}
	// The chain continues from where it was: new heads extend it.
	if next := waitNewHead(ctx, t, ec); next <= before {
		t.Fatalf("new head %d after restart is not above %d from before", next, before)
	}
}

func dial(ctx context.Context, t *testing.T, url string) *ethclient.Client {
	t.Helper()
	c, err := rpc.DialContext(ctx, url)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	return ethclient.NewClient(c)
}

func blockHash(ctx context.Context, t *testing.T, ec *ethclient.Client, num uint64) common.Hash {
	t.Helper()
	h, err := ec.HeaderByNumber(ctx, new(big.Int).SetUint64(num))
	if err != nil {
		t.Fatalf("HeaderByNumber(%d): %v", num, err)
	}
	return h.Hash()
}

func checkChainID(ctx context.Context, t *testing.T, ec *ethclient.Client) {
	t.Helper()
	id, err := ec.ChainID(ctx)
	if err != nil {
		t.Fatalf("ChainID: %v", err)
	}
	if id.Cmp(devChainID) != 0 {
		t.Fatalf("ChainID = %v, want %v", id, devChainID)
	}
}

// waitNewHead subscribes to new heads and returns the number of the first
// head that is above the block number current at subscription time.
func waitNewHead(ctx context.Context, t *testing.T, ec *ethclient.Client) uint64 {
	t.Helper()
	heads := make(chan *types.Header, 16)
	sub, err := ec.SubscribeNewHead(ctx, heads)
	if err != nil {
		t.Fatalf("SubscribeNewHead: %v", err)
	}
	defer sub.Unsubscribe()
	start, err := ec.BlockNumber(ctx)
	if err != nil {
		t.Fatalf("BlockNumber: %v", err)
	}
	for {
		select {
		case h := <-heads:
			if h.Number.Uint64() > start {
				return h.Number.Uint64()
			}
		case err := <-sub.Err():
			t.Fatalf("subscription: %v", err)
		case <-ctx.Done():
			t.Fatalf("no new head above %d: %v", start, ctx.Err())
		}
	}
}
