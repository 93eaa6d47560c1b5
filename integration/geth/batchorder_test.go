package gethtest

import (
	"encoding/json"
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"
)

// batchTries is how many fresh batches each ordering test sends per
// transport: the node runs separate messages concurrently, so a batch split
// into them loses the order often, not always.
const batchTries = 30

// TestBatchOrder: a batch reaches geth as one array, so geth runs its
// elements in order, as for a client connected to it directly. Before,
// muxd split batches into single requests that geth ran concurrently: a
// lookup of a transaction sent by the element before it found nothing, and
// a filter uninstalled by the next element was gone before it was read.
func TestBatchOrder(t *testing.T) {
	h := newHarness(t, nil)
	for _, tr := range []struct{ name, url string }{{"ws", h.WSURL}, {"http", h.HTTPURL}} {
		t.Run(tr.name, func(t *testing.T) {
			c := dial(t, tr.url)
			t.Run("send then get", func(t *testing.T) { sendThenGet(t, c) })
			t.Run("filter changes then uninstall", func(t *testing.T) { filterThenUninstall(t, c) })
		})
	}
}

// sendThenGet sends [eth_sendRawTransaction(tx), eth_getTransactionByHash(tx)]
// batchTries times: the lookup must find the transaction every time.
func sendThenGet(t *testing.T, c *rpc.Client) {
	ctx := ctxT(t, 2*time.Minute)
	from := devAccount(t, c)
	var nonce hexutil.Uint64
	if err := c.CallContext(ctx, &nonce, "eth_getTransactionCount", from, "pending"); err != nil {
		t.Fatalf("eth_getTransactionCount: %v", err)
	}
	var gasPrice hexutil.Big
	if err := c.CallContext(ctx, &gasPrice, "eth_gasPrice"); err != nil {
		t.Fatalf("eth_gasPrice: %v", err)
	}
	price := (*hexutil.Big)(new(big.Int).Mul(gasPrice.ToInt(), big.NewInt(2)))
	for i := range batchTries {
		// The --dev account is unlocked: geth signs for it.
		var signed struct {
			Raw hexutil.Bytes `json:"raw"`
			Tx  struct {
				Hash string `json:"hash"`
			} `json:"tx"`
		}
		tx := map[string]any{
			"from": from, "to": from, "value": "0x1", "gas": "0x5208",
			"gasPrice": price, "nonce": hexutil.Uint64(uint64(nonce) + uint64(i)),
		}
		if err := c.CallContext(ctx, &signed, "eth_signTransaction", tx); err != nil {
			t.Fatalf("eth_signTransaction: %v", err)
		}
		var sentHash string
		var found json.RawMessage
		batch := []rpc.BatchElem{
			{Method: "eth_sendRawTransaction", Args: []any{signed.Raw}, Result: &sentHash},
			{Method: "eth_getTransactionByHash", Args: []any{signed.Tx.Hash}, Result: &found},
		}
		if err := c.BatchCallContext(ctx, batch); err != nil {
			t.Fatalf("try %d: batch: %v", i, err)
		}
		for j, e := range batch {
			if e.Error != nil {
				t.Fatalf("try %d: element %d (%s): %v", i, j, e.Method, e.Error)
			}
		}
		if sentHash != signed.Tx.Hash {
			t.Fatalf("try %d: sent %s, want %s", i, sentHash, signed.Tx.Hash)
		}
		if len(found) == 0 || string(found) == "null" {
			t.Fatalf("try %d: eth_getTransactionByHash after eth_sendRawTransaction in the same batch found nothing", i)
		}
	}
}

// filterThenUninstall sends [eth_getFilterChanges(f), eth_uninstallFilter(f)]
// on a fresh filter batchTries times, as ethers does when a listener goes:
// both must succeed every time.
func filterThenUninstall(t *testing.T, c *rpc.Client) {
	ctx := ctxT(t, 2*time.Minute)
	for i := range batchTries {
		var id string
		if err := c.CallContext(ctx, &id, "eth_newBlockFilter"); err != nil {
			t.Fatalf("eth_newBlockFilter: %v", err)
		}
		var changes json.RawMessage
		var removed bool
		batch := []rpc.BatchElem{
			{Method: "eth_getFilterChanges", Args: []any{id}, Result: &changes},
			{Method: "eth_uninstallFilter", Args: []any{id}, Result: &removed},
		}
		if err := c.BatchCallContext(ctx, batch); err != nil {
			t.Fatalf("try %d: batch: %v", i, err)
		}
		for j, e := range batch {
			if e.Error != nil {
				t.Fatalf("try %d: element %d (%s): %v", i, j, e.Method, e.Error)
			}
		}
		if !removed {
			t.Fatalf("try %d: eth_uninstallFilter = false, want true (%s)", i, fmt.Sprint(string(changes)))
		}
	}
}
