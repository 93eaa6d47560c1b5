package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrSubscribeRange means eth_subscribe params whose fromBlock is a block
// number (a history subscription) but whose range muxd cannot serve as
// written: a malformed toBlock, toBlock below fromBlock, a blockHash beside
// them, or a fromBlock that is neither a tag nor a quantity.
var ErrSubscribeRange = errors.New("invalid subscription range")

// SubscribeRange is the block range of a history subscription: fromBlock
// From, and toBlock To when HasTo (absent or "latest": history then live).
type SubscribeRange struct {
	From  uint64
	To    uint64
	HasTo bool
}

// blockTags are the block tags a node reads in fromBlock and toBlock.
var blockTags = []string{"latest", "earliest", "pending", "safe", "finalized"}

// maxBlockNumber is the highest block number geth reads (an int64).
const maxBlockNumber = 1<<63 - 1

// SplitSubscribeRange reads the fromBlock and toBlock of eth_subscribe
// params, for "logs" (members of its filter) and "newHeads" (a muxd
// extension: ["newHeads", {"fromBlock": B}]). history is false, and params
// are to be used as they are, unless fromBlock is a block number: then
// stripped is params without fromBlock and toBlock (the filter the live
// upstream subscription shares with plain subscriptions; ["newHeads"] for
// newHeads) and r the range. Member names are matched without regard to
// case, as the node decodes a filter. A logs fromBlock of 0x0 is read as
// absent: go-ethereum's ethclient sends it for a FilterQuery without
// FromBlock. err (wrapping ErrSubscribeRange) is
// for a history subscription muxd cannot serve as written; params that
// are not a history subscription never give an error here (the node
// judges them, as before).
func SplitSubscribeRange(params []byte) (stripped []byte, r SubscribeRange, history bool, err error) {
	var v []json.RawMessage
	if json.Unmarshal(params, &v) != nil || len(v) != 2 {
		return nil, r, false, nil
	}
	var name string
	if json.Unmarshal(v[0], &name) != nil || (name != "logs" && name != "newHeads") {
		return nil, r, false, nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(v[1], &obj) != nil || obj == nil {
		return nil, r, false, nil
	}
	from, nFrom := foldedMember(obj, "fromBlock")
	if nFrom == 0 {
		return nil, r, false, nil
	}
	fromText, isString := jsonString(from)
	if nFrom == 1 && (bytes.Equal(bytes.TrimSpace(from), []byte("null")) || (isString && isTag(fromText))) {
		return nil, r, false, nil // a tag: the node's own behaviour
	}
	if nFrom > 1 {
		return nil, r, true, fmt.Errorf("%w: fromBlock given more than once", ErrSubscribeRange)
	}
	n, ok := ParseQuantity(fromText)
	if !isString || !ok || n > maxBlockNumber {
		return nil, r, true, fmt.Errorf("%w: fromBlock must be a block number (0x-hex quantity) or a tag", ErrSubscribeRange)
	}
	if n == 0 && name == "logs" {
		// What go-ethereum's ethclient sends for a FilterQuery without
		// FromBlock (with toBlock "latest"): read as absent, or every
		// SubscribeFilterLogs would ask for the whole chain. Block 0
		// holds no logs: fromBlock 0x1 asks for all of them.
		return nil, r, false, nil
	}
	r.From = n
	if to, nTo := foldedMember(obj, "toBlock"); nTo > 1 {
		return nil, r, true, fmt.Errorf("%w: toBlock given more than once", ErrSubscribeRange)
	} else if nTo == 1 && !bytes.Equal(bytes.TrimSpace(to), []byte("null")) {
		toText, isString := jsonString(to)
		switch {
		case isString && toText == "latest":
		case !isString:
			return nil, r, true, fmt.Errorf("%w: toBlock must be a block number or \"latest\"", ErrSubscribeRange)
		default:
			t, ok := ParseQuantity(toText)
			if !ok || t > maxBlockNumber {
				return nil, r, true, fmt.Errorf("%w: toBlock must be a block number or \"latest\"", ErrSubscribeRange)
			}
			if t < n {
				return nil, r, true, fmt.Errorf("%w: toBlock is below fromBlock", ErrSubscribeRange)
			}
			r.To, r.HasTo = t, true
		}
	}
	if name == "newHeads" {
		for k := range obj {
			if !strings.EqualFold(k, "fromBlock") && !strings.EqualFold(k, "toBlock") {
				return nil, r, true, fmt.Errorf("%w: newHeads takes fromBlock and toBlock only", ErrSubscribeRange)
			}
		}
		return []byte(`["newHeads"]`), r, true, nil
	}
	if _, n := foldedMember(obj, "blockHash"); n > 0 {
		return nil, r, true, fmt.Errorf("%w: blockHash cannot go with fromBlock", ErrSubscribeRange)
	}
	rest := make(map[string]json.RawMessage, len(obj))
	for k, x := range obj {
		if !strings.EqualFold(k, "fromBlock") && !strings.EqualFold(k, "toBlock") {
			rest[k] = x
		}
	}
	b, err := json.Marshal([]any{"logs", rest})
	if err != nil {
		return nil, r, true, fmt.Errorf("%w: %w", ErrSubscribeRange, err)
	}
	return b, r, true, nil
}

// foldedMember returns the member of obj named name without regard to
// case, and how many members are so named.
func foldedMember(obj map[string]json.RawMessage, name string) (json.RawMessage, int) {
	var v json.RawMessage
	n := 0
	for k, x := range obj {
		if strings.EqualFold(k, name) {
			v = x
			n++
		}
	}
	return v, n
}

func jsonString(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

func isTag(s string) bool {
	for _, t := range blockTags {
		if s == t {
			return true
		}
	}
	return false
}
