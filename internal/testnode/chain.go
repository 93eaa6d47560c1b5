package testnode

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// This file is a simulated chain that several fake nodes share (the
// failover tests): every node serves the same blocks, but each has a
// head of its own that the test moves (a node may lag behind the others,
// stall, or be on another chain id), and pushes a new head to its
// subscriptions only when the test advances it.

// Chain is a deterministic chain without reorgs: block n always has the
// same hash, parent hash and logs. It holds no state and is safe for
// concurrent use.
type Chain struct {
	logsPerBlock int
}

// NewChain returns a chain whose blocks each hold logsPerBlock logs.
func NewChain(logsPerBlock int) *Chain { return &Chain{logsPerBlock: logsPerBlock} }

// Block is one block of a Chain.
type Block struct {
	Number     uint64
	Hash       string // 0x + 64 lowercase hex digits
	ParentHash string
	Logs       []Log
}

// Log is one log of a block, as the chain has it (never removed: the
// chain has no reorgs).
type Log struct {
	Address     string
	Topics      []string
	Data        string
	BlockNumber uint64
	BlockHash   string
	TxHash      string
	TxIndex     uint64
	Index       uint64 // logIndex, within the block
}

// LogAddresses and LogTopics are what a chain's logs carry: log i of
// every block is emitted by LogAddresses[i%2] with topic0 LogTopics[i%2],
// and topic1 the block number, so that a filter by address or topic0
// selects every other log.
var (
	LogAddresses = [2]string{
		"0x00000000000000000000000000000000000000aa",
		"0x00000000000000000000000000000000000000bb",
	}
	LogTopics = [2]string{
		"0x" + strings.Repeat("a", 64),
		"0x" + strings.Repeat("b", 64),
	}
)

// FinalizedDepth is how far below a node's head its finalized (and safe)
// block is.
const FinalizedDepth = 4

// DefaultChainID is a ChainNode's chain id until SetChainID (geth --dev's).
const DefaultChainID = "0x539"

var zeroHash = "0x" + strings.Repeat("0", 64)

// fakeHash is a hash of what, looking like a keccak: 32 bytes, no pattern.
func fakeHash(what string) string {
	h := sha256.Sum256([]byte(what))
	return "0x" + hex.EncodeToString(h[:])
}

func quantity(n uint64) string { return "0x" + strconv.FormatUint(n, 16) }

// Block returns block n.
func (c *Chain) Block(n uint64) Block {
	b := Block{Number: n, Hash: fakeHash(fmt.Sprintf("block %d", n)), ParentHash: zeroHash}
	if n > 0 {
		b.ParentHash = fakeHash(fmt.Sprintf("block %d", n-1))
	}
	for i := range uint64(c.logsPerBlock) {
		b.Logs = append(b.Logs, Log{
			Address:     LogAddresses[i%2],
			Topics:      []string{LogTopics[i%2], fmt.Sprintf("0x%064x", n)},
			Data:        fmt.Sprintf("0x%064x", i),
			BlockNumber: n,
			BlockHash:   b.Hash,
			TxHash:      fakeHash(fmt.Sprintf("tx %d/%d", n, i)),
			TxIndex:     i,
			Index:       i,
		})
	}
	return b
}

// timestamp is block n's time: one block every 12 s.
func timestamp(n uint64) uint64 { return 1_700_000_000 + 12*n }

// JSON is the block as geth answers eth_getBlockByNumber(n, false) and
// eth_getBlockByHash: RPCMarshalBlock's members in alphabetical order
// (geth marshals a map). Its transactions list is empty: the chain's logs
// name transactions that no block lists.
func (b Block) JSON() []byte {
	z := zeroHash
	return fmt.Appendf(nil, `{"baseFeePerGas":"0x7","blobGasUsed":"0x0","difficulty":"0x0","excessBlobGas":"0x0","extraData":"0x","gasLimit":"0x1c9c380","gasUsed":"0x0","hash":%q,"logsBloom":%q,"miner":"0x0000000000000000000000000000000000000000","mixHash":%q,"nonce":"0x0000000000000000","number":%q,"parentBeaconBlockRoot":%q,"parentHash":%q,"receiptsRoot":%q,"requestsHash":%q,"sha3Uncles":%q,"size":"0x2a1","stateRoot":%q,"timestamp":%q,"transactions":[],"transactionsRoot":%q,"uncles":[],"withdrawals":[],"withdrawalsRoot":%q}`,
		b.Hash, zeroBloom, z, quantity(b.Number), z, b.ParentHash, z, z, z, z, quantity(timestamp(b.Number)), z, z)
}

// HeaderJSON is the block as geth pushes it for newHeads: types.Header's
// JSON, every member in struct order (gen_header_json.go), the optional
// ones the block lacks as null, hash last.
func (b Block) HeaderJSON() []byte {
	z := zeroHash
	return fmt.Appendf(nil, `{"parentHash":%q,"sha3Uncles":%q,"miner":"0x0000000000000000000000000000000000000000","stateRoot":%q,"transactionsRoot":%q,"receiptsRoot":%q,"logsBloom":%q,"difficulty":"0x0","number":%q,"gasLimit":"0x1c9c380","gasUsed":"0x0","timestamp":%q,"extraData":"0x","mixHash":%q,"nonce":"0x0000000000000000","baseFeePerGas":"0x7","withdrawalsRoot":%q,"blobGasUsed":"0x0","excessBlobGas":"0x0","parentBeaconBlockRoot":%q,"requestsHash":%q,"blockAccessListHash":null,"slotNumber":null,"hash":%q}`,
		b.ParentHash, z, z, z, z, zeroBloom, quantity(b.Number), quantity(timestamp(b.Number)), z, z, z, z, b.Hash)
}

var zeroBloom = "0x" + strings.Repeat("0", 512)

// JSON is the log as geth returns it from eth_getLogs and pushes it to a
// logs subscription: types.Log's members in struct order.
func (l Log) JSON() []byte {
	topics, _ := json.Marshal(l.Topics)
	return fmt.Appendf(nil, `{"address":%q,"topics":%s,"data":%q,"blockNumber":%q,"transactionHash":%q,"transactionIndex":%q,"blockHash":%q,"blockTimestamp":%q,"logIndex":%q,"removed":false}`,
		l.Address, topics, l.Data, quantity(l.BlockNumber), l.TxHash, quantity(l.TxIndex), l.BlockHash, quantity(timestamp(l.BlockNumber)), quantity(l.Index))
}

// LogFilter is the part of an eth_getLogs filter or a logs subscription's
// filter that selects logs by emitter: geth's rules, address any of a
// list, and each topic position null (any) or any of a list.
type LogFilter struct {
	Addresses []string   // lowercase; empty: any
	Topics    [][]string // lowercase; a nil position matches any topic
}

// ParseLogFilter reads the address and topics members of a filter object.
func ParseLogFilter(raw json.RawMessage) (LogFilter, error) {
	var f struct {
		Address json.RawMessage   `json:"address"`
		Topics  []json.RawMessage `json:"topics"`
	}
	var lf LogFilter
	if len(raw) == 0 || string(raw) == "null" {
		return lf, nil
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return lf, fmt.Errorf("filter: %w", err)
	}
	var err error
	if lf.Addresses, err = oneOrMany(f.Address); err != nil {
		return lf, fmt.Errorf("filter address: %w", err)
	}
	for i, t := range f.Topics {
		alts, err := oneOrMany(t)
		if err != nil {
			return lf, fmt.Errorf("filter topic %d: %w", i, err)
		}
		lf.Topics = append(lf.Topics, alts)
	}
	return lf, nil
}

// oneOrMany reads null, a string or a list of strings, lowercased.
func oneOrMany(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []string
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		list = []string{s}
	} else if err := json.Unmarshal(raw, &list); err != nil {
		return nil, err
	}
	for i := range list {
		list[i] = strings.ToLower(list[i])
	}
	return list, nil
}

// Matches reports whether the filter selects l.
func (f LogFilter) Matches(l Log) bool {
	if len(f.Addresses) > 0 && !contains(f.Addresses, strings.ToLower(l.Address)) {
		return false
	}
	if len(f.Topics) > len(l.Topics) {
		return false
	}
	for i, alts := range f.Topics {
		if len(alts) > 0 && !contains(alts, strings.ToLower(l.Topics[i])) {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ChainNode is a fake node (a [Node]) that serves a Chain as it knows it:
// up to its own head, under its own chain id. Its handler answers
// eth_chainId, eth_blockNumber, eth_getBlockByNumber, eth_getBlockByHash
// and eth_getLogs from the chain, and everything else (eth_subscribe,
// eth_unsubscribe, any other method) with the Node's default answer. A
// test that scripts some requests itself installs its own handler and
// calls Handle for the rest.
//
// The node's head moves only when the test says: Advance (one block,
// pushed to the subscriptions) or SetHead (silently, as a node that caught
// up while nobody was connected). A node the test does not advance while
// it advances others lags, and past a while is stalled.
type ChainNode struct {
	*Node
	Chain *Chain

	// advancing serializes Advance, so that the pushes of consecutive
	// blocks go out in order.
	advancing chan struct{}

	// guarded by Node.mu
	head     uint64
	chainID  string
	answered map[string]int // method -> answers written
}

// NewNode starts a fake node serving c, with its head at block head; the
// node is closed by t.Cleanup.
func (c *Chain) NewNode(t testing.TB, head uint64) *ChainNode {
	t.Helper()
	n := &ChainNode{Node: New(t), Chain: c, advancing: make(chan struct{}, 1),
		head: head, chainID: DefaultChainID, answered: map[string]int{}}
	n.SetHandler(n.Handle)
	return n
}

// Head is the number of the node's head block.
func (n *ChainNode) Head() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.head
}

// SetHead moves the node's head to block h without pushing anything.
func (n *ChainNode) SetHead(h uint64) {
	n.mu.Lock()
	n.head = h
	n.notifyLocked()
	n.mu.Unlock()
}

// SetChainID sets the chain id (a hex quantity) the node answers
// eth_chainId with from now on.
func (n *ChainNode) SetChainID(id string) {
	n.mu.Lock()
	n.chainID = id
	n.mu.Unlock()
}

// Answered is how many answers to method the node's handler has written
// (on any connection).
func (n *ChainNode) Answered(method string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.answered[method]
}

// WaitAnswered waits until the node has written k answers to method: what
// it pushes from then on reaches muxd after them.
func (n *ChainNode) WaitAnswered(t testing.TB, method string, k int) {
	t.Helper()
	n.Wait(t, fmt.Sprintf("%d answers to %s", k, method), func() bool { return n.Answered(method) >= k })
}

// Advance moves the node's head one block up and pushes the new block on
// every open connection: first its logs to each logs subscription whose
// filter selects them (in log order), then its header to each newHeads
// subscription, the order in which geth sends them. It returns the block.
// A push on a connection that is closing is lost, as it would be.
func (n *ChainNode) Advance() Block {
	n.advancing <- struct{}{}
	defer func() { <-n.advancing }()
	n.mu.Lock()
	n.head++
	b := n.Chain.Block(n.head)
	conns := make([]*Conn, 0, len(n.conns))
	for _, c := range n.conns {
		if !c.closed {
			conns = append(conns, c)
		}
	}
	n.notifyLocked()
	n.mu.Unlock()
	header := string(b.HeaderJSON())
	for _, fc := range conns {
		var heads []string
		for id, params := range fc.LiveSubs() {
			kind, filter := subscriptionOf(params)
			switch kind {
			case "newHeads":
				heads = append(heads, id)
			case "logs":
				for _, l := range b.Logs {
					if filter.Matches(l) && fc.Push(id, string(l.JSON())) != nil {
						break
					}
				}
			}
		}
		for _, id := range heads {
			_ = fc.Push(id, header)
		}
	}
	return b
}

// subscriptionOf reads eth_subscribe params: the kind and, for logs, the
// filter (a filter that does not parse selects nothing).
func subscriptionOf(params json.RawMessage) (string, LogFilter) {
	var p []json.RawMessage
	var kind string
	if json.Unmarshal(params, &p) != nil || len(p) == 0 || json.Unmarshal(p[0], &kind) != nil {
		return "", LogFilter{}
	}
	if kind != "logs" {
		return kind, LogFilter{}
	}
	var f json.RawMessage
	if len(p) > 1 {
		f = p[1]
	}
	lf, err := ParseLogFilter(f)
	if err != nil {
		return "", LogFilter{}
	}
	return kind, lf
}

// Handle is the node's handler: the chain's methods answered from the
// chain as the node knows it, everything else by Conn.Answer.
func (n *ChainNode) Handle(fc *Conn, r Req) {
	if r.IsNotification() {
		return
	}
	n.mu.Lock()
	head, chainID := n.head, n.chainID
	n.mu.Unlock()
	var p []json.RawMessage
	_ = json.Unmarshal(r.Params, &p)
	arg := func(i int) string {
		var s string
		if i < len(p) {
			_ = json.Unmarshal(p[i], &s)
		}
		return s
	}
	var answer []byte
	switch r.Method {
	case "eth_chainId":
		answer = ResultFrame(r.ID, strconv.Quote(chainID))
	case "eth_blockNumber":
		answer = ResultFrame(r.ID, strconv.Quote(quantity(head)))
	case "eth_getBlockByNumber":
		num, ok := blockTag(arg(0), head)
		answer = ResultFrame(r.ID, "null")
		if ok && num <= head {
			answer = ResultFrame(r.ID, string(n.Chain.Block(num).JSON()))
		}
	case "eth_getBlockByHash":
		answer = ResultFrame(r.ID, "null")
		if b, ok := n.byHash(arg(0), head); ok {
			answer = ResultFrame(r.ID, string(b.JSON()))
		}
	case "eth_getLogs":
		answer = n.getLogs(r.ID, p, head)
	default:
		fc.Answer(r)
		return
	}
	fc.Send(answer)
	n.mu.Lock()
	n.answered[r.Method]++
	n.notifyLocked()
	n.mu.Unlock()
}

// blockTag reads a block number or tag as the node with head head sees it.
func blockTag(tag string, head uint64) (uint64, bool) {
	switch tag {
	case "", "latest", "pending":
		return head, true
	case "earliest":
		return 0, true
	case "finalized", "safe":
		if head < FinalizedDepth {
			return 0, true
		}
		return head - FinalizedDepth, true
	}
	if !strings.HasPrefix(tag, "0x") {
		return 0, false
	}
	v, err := strconv.ParseUint(tag[2:], 16, 64)
	return v, err == nil
}

// byHash finds the block with hash h at or below head.
func (n *ChainNode) byHash(h string, head uint64) (Block, bool) {
	h = strings.ToLower(h)
	for num := uint64(0); num <= head; num++ {
		if b := n.Chain.Block(num); b.Hash == h {
			return b, true
		}
	}
	return Block{}, false
}

// getLogs answers eth_getLogs: by blockHash (a block the node does not
// have is geth's "unknown block" error), or over [fromBlock, toBlock]
// (default latest), cut at the node's head; then by address and topics.
func (n *ChainNode) getLogs(id json.RawMessage, p []json.RawMessage, head uint64) []byte {
	var f struct {
		FromBlock string  `json:"fromBlock"`
		ToBlock   string  `json:"toBlock"`
		BlockHash *string `json:"blockHash"`
	}
	if len(p) == 0 || json.Unmarshal(p[0], &f) != nil {
		return ErrorFrame(id, -32602, "invalid argument 0")
	}
	lf, err := ParseLogFilter(p[0])
	if err != nil {
		return ErrorFrame(id, -32602, "invalid argument 0: "+err.Error())
	}
	var from, to uint64
	if f.BlockHash != nil {
		b, ok := n.byHash(*f.BlockHash, head)
		if !ok {
			return ErrorFrame(id, -32000, "unknown block")
		}
		from, to = b.Number, b.Number
	} else {
		var ok1, ok2 bool
		from, ok1 = blockTag(f.FromBlock, head)
		to, ok2 = blockTag(f.ToBlock, head)
		if !ok1 || !ok2 || from > to {
			return ErrorFrame(id, -32000, "invalid block range params")
		}
		to = min(to, head)
	}
	var out []string
	for num := from; num <= to; num++ {
		for _, l := range n.Chain.Block(num).Logs {
			if lf.Matches(l) {
				out = append(out, string(l.JSON()))
			}
		}
	}
	return ResultFrame(id, "["+strings.Join(out, ",")+"]")
}
