package chaos

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// chain is the lying node's block chain, shared by all its connections: a
// miner goroutine adds a block every 50-100 ms and now and then replaces
// the top one or two blocks (a shallow reorg). Blocks are never dropped
// from the store, so a block orphaned by a reorg can still be looked up by
// hash (the checks need it); it never becomes canonical again.
//
// Each change is an event (the blocks it orphaned, the blocks it added);
// a connection pushes the events that happen while it is up, so every cut
// of its socket makes a real gap for muxd to fill.
type chain struct {
	mu     sync.Mutex
	rng    *rand.Rand
	canon  []*block          // by number: the canonical chain
	byHash map[string]*block // every block ever made
	events []chainEvent
	notify chan struct{} // closed and replaced when an event is added
	reorgs int
}

// block is one block with what the node says about it.
type block struct {
	num    uint64
	hash   string
	parent string
	logs   []chainLog
	head   []byte // the newHeads object, as geth pushes it
	full   []byte // eth_getBlockByNumber(n, false) / eth_getBlockByHash(h, false)
}

// chainLog is one log of a block.
type chainLog struct {
	num     uint64
	hash    string // block hash
	index   uint64
	address string
	topics  []string
	raw     []byte // as eth_getLogs returns it and geth pushes it (removed false)
	removed []byte // the same with removed true
}

type chainEvent struct {
	orphaned []*block // ascending
	added    []*block // ascending, from the fork point
}

// Addresses and topics of the chain's logs: every log is emitted by one
// of chainAddrs with event topic one of chainEvents and a second topic one
// of chainSubjects.
var (
	chainAddrs    = []string{fmt.Sprintf("0x%040x", 0xa1), fmt.Sprintf("0x%040x", 0xa2), fmt.Sprintf("0x%040x", 0xa3)}
	chainEvents   = []string{fmt.Sprintf("0x%064x", 0xe1), fmt.Sprintf("0x%064x", 0xe2)}
	chainSubjects = []string{fmt.Sprintf("0x%064x", 0x51), fmt.Sprintf("0x%064x", 0x52), fmt.Sprintf("0x%064x", 0x53)}
)

func newChain() *chain {
	c := &chain{rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 13)), byHash: map[string]*block{}, notify: make(chan struct{})}
	genesis := c.makeBlock(0, "0x"+strings.Repeat("0", 64))
	c.canon = append(c.canon, genesis)
	for range 20 {
		c.canon = append(c.canon, c.makeBlock(uint64(len(c.canon)), c.canon[len(c.canon)-1].hash))
	}
	return c
}

func (c *chain) randHash() string {
	var b [32]byte
	for i := 0; i < 32; i += 8 {
		v := c.rng.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return "0x" + hex.EncodeToString(b[:])
}

// makeBlock makes block num on parent and stores it (c.mu held or not
// shared yet).
func (c *chain) makeBlock(num uint64, parent string) *block {
	b := &block{num: num, hash: c.randHash(), parent: parent}
	q := func(v uint64) string { return strconv.Quote("0x" + strconv.FormatUint(v, 16)) }
	h := func() string { return strconv.Quote(c.randHash()) }
	ts := uint64(1_700_000_000) + num
	f := map[string]string{
		"parentHash": strconv.Quote(parent), "sha3Uncles": h(), "miner": strconv.Quote(chainAddrs[0]),
		"stateRoot": h(), "transactionsRoot": h(), "receiptsRoot": h(),
		"logsBloom":  strconv.Quote("0x" + strings.Repeat("0", 512)),
		"difficulty": q(0), "number": q(num), "gasLimit": q(30_000_000), "gasUsed": q(21_000 * num % 30_000_000),
		"timestamp": q(ts), "extraData": `"0x"`, "mixHash": h(), "nonce": `"0x0000000000000000"`,
		"baseFeePerGas": q(7 + num%5), "withdrawalsRoot": h(), "blobGasUsed": q(0), "excessBlobGas": q(0),
		"parentBeaconBlockRoot": h(), "requestsHash": h(), "hash": strconv.Quote(b.hash),
	}
	// The newHeads object: types.Header's JSON in geth's field order,
	// optional fields this block lacks as null, hash last.
	headOrder := []string{"parentHash", "sha3Uncles", "miner", "stateRoot", "transactionsRoot",
		"receiptsRoot", "logsBloom", "difficulty", "number", "gasLimit", "gasUsed",
		"timestamp", "extraData", "mixHash", "nonce", "baseFeePerGas",
		"withdrawalsRoot", "blobGasUsed", "excessBlobGas", "parentBeaconBlockRoot",
		"requestsHash", "blockAccessListHash", "slotNumber", "hash"}
	var head strings.Builder
	head.WriteByte('{')
	for i, k := range headOrder {
		if i > 0 {
			head.WriteByte(',')
		}
		v, ok := f[k]
		if !ok {
			v = "null"
		}
		fmt.Fprintf(&head, "%q:%s", k, v)
	}
	head.WriteByte('}')
	b.head = []byte(head.String())

	// The logs: 0-4 per block.
	var txs []string
	for i := range uint64(c.rng.IntN(5)) {
		tx := c.randHash()
		txs = append(txs, strconv.Quote(tx))
		l := chainLog{num: num, hash: b.hash, index: i,
			address: chainAddrs[c.rng.IntN(len(chainAddrs))],
			topics:  []string{chainEvents[c.rng.IntN(len(chainEvents))], chainSubjects[c.rng.IntN(len(chainSubjects))]}}
		base := fmt.Sprintf(`{"address":%q,"topics":[%q,%q],"data":"0x%064x","blockNumber":%s,"transactionHash":%q,"transactionIndex":%s,"blockHash":%q,"logIndex":%s,"removed":`,
			l.address, l.topics[0], l.topics[1], c.rng.Uint64(), q(num), tx, q(i), b.hash, q(i))
		l.raw = []byte(base + "false}")
		l.removed = []byte(base + "true}")
		b.logs = append(b.logs, l)
	}
	// The block as eth_getBlockBy* (false) returns it: header members
	// in alphabetical order, plus size, transactions, uncles, withdrawals.
	f["size"] = q(600 + uint64(len(txs))*100)
	f["transactions"] = "[" + strings.Join(txs, ",") + "]"
	f["uncles"] = "[]"
	f["withdrawals"] = "[]"
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var full strings.Builder
	full.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			full.WriteByte(',')
		}
		fmt.Fprintf(&full, "%q:%s", k, f[k])
	}
	full.WriteByte('}')
	b.full = []byte(full.String())
	c.byHash[b.hash] = b
	return b
}

// run mines until stop is closed.
func (c *chain) run(stop <-chan struct{}) {
	for {
		t := time.NewTimer(50*time.Millisecond + rand.N(50*time.Millisecond))
		select {
		case <-stop:
			t.Stop()
			return
		case <-t.C:
		}
		c.mine()
	}
}

// mine adds a block; one time in 12 it first orphans the top one or two.
func (c *chain) mine() {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ev chainEvent
	if c.rng.IntN(12) == 0 {
		depth := 1 + c.rng.IntN(2)
		top := len(c.canon) - depth
		ev.orphaned = slices.Clone(c.canon[top:])
		c.canon = c.canon[:top]
		c.reorgs++
		for range depth {
			nb := c.makeBlock(uint64(len(c.canon)), c.canon[len(c.canon)-1].hash)
			c.canon = append(c.canon, nb)
			ev.added = append(ev.added, nb)
		}
	}
	nb := c.makeBlock(uint64(len(c.canon)), c.canon[len(c.canon)-1].hash)
	c.canon = append(c.canon, nb)
	ev.added = append(ev.added, nb)
	c.events = append(c.events, ev)
	close(c.notify)
	c.notify = make(chan struct{})
}

// cursor returns the number of events so far and the channel closed on
// the next one.
func (c *chain) cursor() (int, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.events), c.notify
}

// eventsFrom returns the events from i on and the channel closed on the
// next one.
func (c *chain) eventsFrom(i int) ([]chainEvent, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.events[i:]), c.notify
}

func (c *chain) headNumber() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return uint64(len(c.canon) - 1)
}

func (c *chain) byNumber(n uint64) *block {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n >= uint64(len(c.canon)) {
		return nil
	}
	return c.canon[n]
}

func (c *chain) block(hash string) *block {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byHash[strings.ToLower(hash)]
}

// canonical reports whether the block with hash is on the canonical chain.
func (c *chain) canonical(hash string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.byHash[hash]
	return b != nil && b.num < uint64(len(c.canon)) && c.canon[b.num] == b
}

// ancestor returns the block numbered n on the branch of hash (hash's own
// block when n is its number), or nil.
func (c *chain) ancestor(hash string, n uint64) *block {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.byHash[hash]
	for b != nil && b.num > n {
		b = c.byHash[b.parent]
	}
	if b == nil || b.num != n {
		return nil
	}
	return b
}

// logFilter is an eth_getLogs / logs subscription filter.
type logFilter struct {
	Address   json.RawMessage   `json:"address"`
	Topics    []json.RawMessage `json:"topics"`
	FromBlock string            `json:"fromBlock"`
	ToBlock   string            `json:"toBlock"`
	BlockHash string            `json:"blockHash"`
	Tag       string            `json:"tag"`
	addrs     []string
	topics    [][]string // nil entry: any
}

// parseFilter reads a filter object; it reports false for anything else.
func parseFilter(raw []byte) (*logFilter, bool) {
	var f logFilter
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &f) != nil {
		return nil, false
	}
	anyOf := func(v json.RawMessage) ([]string, bool) {
		if len(v) == 0 || string(v) == "null" {
			return nil, true
		}
		var s string
		if json.Unmarshal(v, &s) == nil {
			return []string{strings.ToLower(s)}, true
		}
		var ss []string
		if json.Unmarshal(v, &ss) != nil {
			return nil, false
		}
		for i := range ss {
			ss[i] = strings.ToLower(ss[i])
		}
		if len(ss) == 0 {
			return nil, true
		}
		return ss, true
	}
	var ok bool
	if f.addrs, ok = anyOf(f.Address); !ok {
		return nil, false
	}
	for _, t := range f.Topics {
		ts, ok := anyOf(t)
		if !ok {
			return nil, false
		}
		f.topics = append(f.topics, ts)
	}
	return &f, true
}

// matches applies geth's filter rules to l.
func (f *logFilter) matches(l *chainLog) bool {
	if f.addrs != nil && !slices.Contains(f.addrs, l.address) {
		return false
	}
	if len(f.topics) > len(l.topics) {
		return false
	}
	for i, ts := range f.topics {
		if ts != nil && !slices.Contains(ts, l.topics[i]) {
			return false
		}
	}
	return true
}

// getLogs answers eth_getLogs for f: the canonical logs in the range (or
// of the block hash) that match, as a JSON array; ok false for a range it
// cannot read.
func (c *chain) getLogs(f *logFilter) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var blocks []*block
	if f.BlockHash != "" {
		b := c.byHash[strings.ToLower(f.BlockHash)]
		if b == nil {
			return nil, false
		}
		blocks = []*block{b}
	} else {
		head := uint64(len(c.canon) - 1)
		num := func(s string) (uint64, bool) {
			switch s {
			case "", "latest":
				return head, true
			case "earliest":
				return 0, true
			}
			if !strings.HasPrefix(s, "0x") {
				return 0, false
			}
			n, err := strconv.ParseUint(s[2:], 16, 64)
			return n, err == nil
		}
		from, ok1 := num(f.FromBlock)
		to, ok2 := num(f.ToBlock)
		if !ok1 || !ok2 {
			return nil, false
		}
		to = min(to, head)
		for n := from; n <= to; n++ {
			blocks = append(blocks, c.canon[n])
		}
	}
	out := []byte{'['}
	for _, b := range blocks {
		for i := range b.logs {
			if f.matches(&b.logs[i]) {
				if len(out) > 1 {
					out = append(out, ',')
				}
				out = append(out, b.logs[i].raw...)
			}
		}
	}
	return append(out, ']'), true
}
