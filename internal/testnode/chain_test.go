package testnode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/muxd/muxd/gapfill"
)

// keysOf returns the members of JSON object b in their order.
func keysOf(t *testing.T, b []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", b)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%v in %s", err, b)
		}
		keys = append(keys, tok.(string))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%v in %s", err, b)
		}
	}
	return keys
}

// TestChainShapes: blocks chain by parent hash; a block's newHeads object
// is what gapfill builds from its eth_getBlockByNumber object (two
// independent writings of geth's shapes agree), and headers and logs have
// geth's members in geth's order (go-ethereum's own marshalling).
func TestChainShapes(t *testing.T) {
	c := NewChain(3)
	for n := uint64(1); n < 20; n++ {
		b, parent := c.Block(n), c.Block(n-1)
		if b.ParentHash != parent.Hash || b.Hash == parent.Hash || len(b.Hash) != 66 {
			t.Fatalf("block %d: hash %s parent %s, block %d hash %s", n, b.Hash, b.ParentHash, n-1, parent.Hash)
		}
		if got, ok := gapfill.HeaderFromBlock(b.JSON()); !ok || string(got) != string(b.HeaderJSON()) {
			t.Fatalf("block %d: gapfill's header\n%s\nmine\n%s", n, got, b.HeaderJSON())
		}
		if len(b.Logs) != 3 || b.Logs[2].Index != 2 || b.Logs[1].Address != LogAddresses[1] || b.Logs[0].BlockHash != b.Hash {
			t.Fatalf("block %d logs: %+v", n, b.Logs)
		}
	}
	if c.Block(0).ParentHash != zeroHash {
		t.Errorf("genesis parent = %s", c.Block(0).ParentHash)
	}

	h := common.Hash{1}
	u := uint64(0)
	geth, err := json.Marshal(&types.Header{Difficulty: big.NewInt(0), Number: big.NewInt(5), BaseFee: big.NewInt(7),
		WithdrawalsHash: &h, BlobGasUsed: &u, ExcessBlobGas: &u, ParentBeaconRoot: &h, RequestsHash: &h})
	if err != nil {
		t.Fatal(err)
	}
	if want, got := keysOf(t, geth), keysOf(t, c.Block(5).HeaderJSON()); !slices.Equal(got, want) {
		t.Errorf("header members\n%v\ngeth's\n%v", got, want)
	}
	var decoded types.Header
	if err := json.Unmarshal(c.Block(5).HeaderJSON(), &decoded); err != nil || decoded.Number.Uint64() != 5 {
		t.Errorf("geth cannot read the header: %v", err)
	}

	gethLog, err := json.Marshal(&types.Log{Topics: []common.Hash{h}})
	if err != nil {
		t.Fatal(err)
	}
	l := c.Block(5).Logs[1]
	if want, got := keysOf(t, gethLog), keysOf(t, l.JSON()); !slices.Equal(got, want) {
		t.Errorf("log members\n%v\ngeth's\n%v", got, want)
	}
	var dl types.Log
	if err := json.Unmarshal(l.JSON(), &dl); err != nil || dl.BlockNumber != 5 || dl.Index != 1 || dl.BlockHash.Hex() != l.BlockHash || dl.Address.Hex() != common.HexToAddress(LogAddresses[1]).Hex() {
		t.Errorf("geth reads the log as %+v (%v)", dl, err)
	}
}

// TestLogFilter: address and topics as geth matches them.
func TestLogFilter(t *testing.T) {
	l := NewChain(2).Block(7).Logs[1] // address bb, topics [bb.., 7]
	tests := []struct {
		filter string
		want   bool
	}{
		{`{}`, true},
		{`{"address":"` + LogAddresses[1] + `"}`, true},
		{`{"address":"` + strings.ToUpper(LogAddresses[1][2:]) + `"}`, false}, // no 0x: not the address
		{`{"address":"0x` + strings.ToUpper(LogAddresses[1][2:]) + `"}`, true},
		{`{"address":"` + LogAddresses[0] + `"}`, false},
		{`{"address":["` + LogAddresses[0] + `","` + LogAddresses[1] + `"]}`, true},
		{`{"topics":["` + LogTopics[1] + `"]}`, true},
		{`{"topics":["` + LogTopics[0] + `"]}`, false},
		{`{"topics":[null,"` + fmt.Sprintf("0x%064x", 7) + `"]}`, true},
		{`{"topics":[null,"` + fmt.Sprintf("0x%064x", 8) + `"]}`, false},
		{`{"topics":[["` + LogTopics[0] + `","` + LogTopics[1] + `"]]}`, true},
		{`{"topics":[null,null,null]}`, false}, // more positions than the log has
	}
	for _, tt := range tests {
		f, err := ParseLogFilter(json.RawMessage(tt.filter))
		if err != nil {
			t.Fatalf("%s: %v", tt.filter, err)
		}
		if got := f.Matches(l); got != tt.want {
			t.Errorf("%s matches = %v, want %v", tt.filter, got, tt.want)
		}
	}
}

// rpcClient is a bare WebSocket client of a node.
type rpcClient struct {
	t *testing.T
	c *websocket.Conn
}

func dialNode(t *testing.T, url string) *rpcClient {
	t.Helper()
	c, _, err := websocket.Dial(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(-1)
	t.Cleanup(func() { c.CloseNow() })
	return &rpcClient{t, c}
}

func (r *rpcClient) read() []byte {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	_, b, err := r.c.Read(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	return b
}

// call sends method(params) and returns the answer's result, or its error
// as "error CODE MESSAGE".
func (r *rpcClient) call(method, params string) string {
	r.t.Helper()
	if err := r.c.Write(context.Background(), websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":1,"method":"`+method+`","params":`+params+`}`)); err != nil {
		r.t.Fatal(err)
	}
	var a struct {
		Result json.RawMessage
		Error  *struct {
			Code    int
			Message string
		}
	}
	b := r.read()
	if err := json.Unmarshal(b, &a); err != nil {
		r.t.Fatalf("%v in %s", err, b)
	}
	if a.Error != nil {
		return fmt.Sprintf("error %d %s", a.Error.Code, a.Error.Message)
	}
	return string(a.Result)
}

func logsJSON(logs ...Log) string {
	var s []string
	for _, l := range logs {
		s = append(s, string(l.JSON()))
	}
	return "[" + strings.Join(s, ",") + "]"
}

// TestChainNodeServes: the chain's methods as a node at head 10 answers
// them, up to its head and not beyond.
func TestChainNodeServes(t *testing.T) {
	c := NewChain(2)
	n := c.NewNode(t, 10)
	n.SetChainID("0x7")
	r := dialNode(t, n.URL)
	b := func(i uint64) string { return string(c.Block(i).JSON()) }
	h := func(i uint64) string { return c.Block(i).Hash }
	a0 := `"address":"` + LogAddresses[0] + `"`
	tests := []struct{ method, params, want string }{
		{"eth_chainId", `[]`, `"0x7"`},
		{"eth_blockNumber", `[]`, `"0xa"`},
		{"eth_getBlockByNumber", `["0x3",false]`, b(3)},
		{"eth_getBlockByNumber", `["0xa",true]`, b(10)},
		{"eth_getBlockByNumber", `["0xb",false]`, `null`},
		{"eth_getBlockByNumber", `["latest",false]`, b(10)},
		{"eth_getBlockByNumber", `["finalized",false]`, b(10 - FinalizedDepth)},
		{"eth_getBlockByNumber", `["earliest",false]`, b(0)},
		{"eth_getBlockByHash", `["` + h(4) + `",false]`, b(4)},
		{"eth_getBlockByHash", `["` + strings.ToUpper(h(4)[2:]) + `",false]`, `null`},
		{"eth_getBlockByHash", `["` + h(11) + `",false]`, `null`},
		{"eth_getLogs", `[{"blockHash":"` + h(5) + `"}]`, logsJSON(c.Block(5).Logs...)},
		{"eth_getLogs", `[{"blockHash":"` + h(5) + `",` + a0 + `}]`, logsJSON(c.Block(5).Logs[0])},
		{"eth_getLogs", `[{"blockHash":"` + h(11) + `"}]`, `error -32000 unknown block`},
		{"eth_getLogs", `[{"fromBlock":"0x9","toBlock":"0xc",` + a0 + `}]`, logsJSON(c.Block(9).Logs[0], c.Block(10).Logs[0])},
		{"eth_getLogs", `[{"fromBlock":"0xa","topics":["` + LogTopics[1] + `"]}]`, logsJSON(c.Block(10).Logs[1])},
		{"eth_getLogs", `[{"fromBlock":"0xb","toBlock":"0xc"}]`, `[]`},
		{"eth_getLogs", `[{"fromBlock":"0x5","toBlock":"0x4"}]`, `error -32000 invalid block range params`},
		{"web3_clientVersion", `[]`, `{"method":"web3_clientVersion","params":[]}`},
	}
	for _, tt := range tests {
		if got := r.call(tt.method, tt.params); got != tt.want {
			t.Errorf("%s %s = %s, want %s", tt.method, tt.params, got, tt.want)
		}
	}
	if got := n.Answered("eth_getBlockByNumber"); got != 6 {
		t.Errorf("answered eth_getBlockByNumber %d times, want 6", got)
	}
	n.SetHead(12)
	if got := r.call("eth_getBlockByNumber", `["0xb",false]`); got != b(11) {
		t.Errorf("after SetHead(12), block 11 = %s", got)
	}
}

// TestChainNodeAdvance: Advance pushes the new block's logs to each logs
// subscription whose filter selects them, then its header to each
// newHeads subscription, on every connection; a block is pushed once, and
// nothing is pushed on SetHead.
func TestChainNodeAdvance(t *testing.T) {
	c := NewChain(3)
	n := c.NewNode(t, 10)
	r1, r2 := dialNode(t, n.URL), dialNode(t, n.URL)
	heads := r1.call("eth_subscribe", `["newHeads"]`)
	logsA := r1.call("eth_subscribe", `["logs",{"address":"`+LogAddresses[0]+`"}]`)
	logsB := r2.call("eth_subscribe", `["logs",{"topics":["`+LogTopics[1]+`"]}]`)
	heads2 := r2.call("eth_subscribe", `["newHeads"]`)
	n.Wait(t, "4 subscriptions live", func() bool {
		return len(n.Conn(t, 1).LiveSubs())+len(n.Conn(t, 2).LiveSubs()) == 4
	})
	push := func(sub string, result []byte) string {
		return string(PushFrame(sub, string(result)))
	}
	n.SetHead(11) // silently
	b := n.Advance()
	if b.Number != 12 || n.Head() != 12 {
		t.Fatalf("Advance gave block %d, head %d; want 12", b.Number, n.Head())
	}
	// Per connection: the logs (log order) then the header.
	want1 := []string{push(logsA, b.Logs[0].JSON()), push(logsA, b.Logs[2].JSON()), push(heads, b.HeaderJSON())}
	want2 := []string{push(logsB, b.Logs[1].JSON()), push(heads2, b.HeaderJSON())}
	for i, rw := range []struct {
		r    *rpcClient
		want []string
	}{{r1, want1}, {r2, want2}} {
		for j, w := range rw.want {
			if got := string(rw.r.read()); got != w {
				t.Errorf("connection %d frame %d:\n%s\nwant\n%s", i+1, j, got, w)
			}
		}
	}
	// Nothing more was pushed: the next frame is an answer.
	if got := r1.call("eth_blockNumber", `[]`); got != `"0xc"` {
		t.Errorf("eth_blockNumber after the pushes = %s", got)
	}
}
