package gapfill

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/muxd/muxd/router"
)

// header is what the machine knows of a block header: its number, hash,
// parent hash, and its newHeads object (the result geth pushes).
type header struct {
	num    uint64
	hash   string // lowercase 0x-hex
	parent string
	raw    []byte
}

// logEntry is one log as geth pushes it and eth_getLogs returns it.
type logEntry struct {
	block   uint64
	hash    string // block hash, lowercase
	index   uint64
	removed bool
	raw     []byte
}

// headerFields are types.Header's JSON members in the order geth's
// gencodec marshaller writes them (core/types/gen_header_json.go, geth
// v1.17.10): the shape of a newHeads push. Optional members a block lacks
// are written as null, as geth does.
var headerFields = []string{
	"parentHash", "sha3Uncles", "miner", "stateRoot", "transactionsRoot",
	"receiptsRoot", "logsBloom", "difficulty", "number", "gasLimit", "gasUsed",
	"timestamp", "extraData", "mixHash", "nonce", "baseFeePerGas",
	"withdrawalsRoot", "blobGasUsed", "excessBlobGas", "parentBeaconBlockRoot",
	"requestsHash", "blockAccessListHash", "slotNumber", "hash",
}

// requiredHeaderFields must be present in a block for it to be turned into
// a newHeads object.
var requiredHeaderFields = []string{"parentHash", "number", "hash"}

// HeaderFromBlock turns an eth_getBlockByNumber(n, false) result (geth's
// RPCMarshalBlock: header members, alphabetical, plus size, transactions,
// uncles, withdrawals) into the object geth pushes for newHeads. It reports
// false when block is not a block object.
func HeaderFromBlock(block []byte) ([]byte, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(block, &m); err != nil || m == nil {
		return nil, false
	}
	for _, f := range requiredHeaderFields {
		if _, ok := m[f]; !ok {
			return nil, false
		}
	}
	out := make([]byte, 0, len(block))
	out = append(out, '{')
	for i, f := range headerFields {
		if i > 0 {
			out = append(out, ',')
		}
		out = strconv.AppendQuote(out, f)
		out = append(out, ':')
		v, ok := m[f]
		if !ok {
			out = append(out, "null"...)
			continue
		}
		out = appendCompact(out, v)
	}
	return append(out, '}'), true
}

func appendCompact(dst, v []byte) []byte {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return append(dst, v...)
	}
	return append(dst, b.Bytes()...)
}

// parseHeader reads number, hash and parentHash of a newHeads object (or a
// block). It reports false for anything else, such as a payload that is no
// header at all.
func parseHeader(raw []byte) (header, bool) {
	var h struct {
		Number     string `json:"number"`
		Hash       string `json:"hash"`
		ParentHash string `json:"parentHash"`
	}
	if json.Unmarshal(raw, &h) != nil || !isHash(h.Hash) || !isHash(h.ParentHash) {
		return header{}, false
	}
	n, ok := router.ParseQuantity(h.Number)
	if !ok {
		return header{}, false
	}
	return header{num: n, hash: strings.ToLower(h.Hash), parent: strings.ToLower(h.ParentHash), raw: raw}, true
}

// parseLog reads the position of a log. It reports false for anything that
// is not a mined log.
func parseLog(raw []byte) (logEntry, bool) {
	var l struct {
		BlockNumber string `json:"blockNumber"`
		BlockHash   string `json:"blockHash"`
		LogIndex    string `json:"logIndex"`
		Removed     bool   `json:"removed"`
	}
	if json.Unmarshal(raw, &l) != nil || !isHash(l.BlockHash) {
		return logEntry{}, false
	}
	b, ok1 := router.ParseQuantity(l.BlockNumber)
	i, ok2 := router.ParseQuantity(l.LogIndex)
	if !ok1 || !ok2 {
		return logEntry{}, false
	}
	return logEntry{block: b, hash: strings.ToLower(l.BlockHash), index: i, removed: l.Removed, raw: raw}, true
}

func isHash(s string) bool { return len(s) == 66 && (s[:2] == "0x" || s[:2] == "0X") }

// parseQuantityJSON reads a JSON string holding a quantity ("\"0x1a\"").
func parseQuantityJSON(raw []byte) (uint64, bool) {
	s, err := strconv.Unquote(string(raw))
	if err != nil {
		return 0, false
	}
	return router.ParseQuantity(s)
}

func quantity(n uint64) string { return "0x" + strconv.FormatUint(n, 16) }

// asRemoved returns a copy of a log's raw object with "removed" set true.
func asRemoved(raw []byte) []byte {
	if i := bytes.LastIndex(raw, []byte(`"removed":false`)); i >= 0 {
		out := make([]byte, 0, len(raw)+1)
		out = append(out, raw[:i]...)
		out = append(out, `"removed":true`...)
		return append(out, raw[i+len(`"removed":false`):]...)
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return raw
	}
	m["removed"] = json.RawMessage("true")
	b, err := json.Marshal(m)
	if err != nil {
		return raw
	}
	return b
}

// PushedHead reads the number, hash and parent hash (lowercase) of the head
// in a newHeads push's params, as the machine does; package core's head
// view reads heads with it too.
func PushedHead(params []byte) (number uint64, hash, parent string, ok bool) {
	r, ok := pushResult(params)
	if !ok {
		return 0, "", "", false
	}
	h, ok := parseHeader(r)
	return h.num, h.hash, h.parent, ok
}

// pushResult returns params.result of an eth_subscription push's params.
func pushResult(params []byte) ([]byte, bool) {
	var p struct {
		Result json.RawMessage `json:"result"`
	}
	if json.Unmarshal(params, &p) != nil || len(p.Result) == 0 {
		return nil, false
	}
	return p.Result, true
}

// subscriptionName returns the subscription name of a key (canonical
// eth_subscribe params) and, for logs, its filter object's members as the
// node reads them (see logsFilter).
func subscriptionName(key string) (string, map[string]json.RawMessage) {
	var v []json.RawMessage
	if json.Unmarshal([]byte(key), &v) != nil || len(v) == 0 {
		return "", nil
	}
	var name string
	if json.Unmarshal(v[0], &name) != nil {
		return "", nil
	}
	if name != "logs" {
		return name, nil
	}
	if len(v) > 1 {
		return name, logsFilter(v[1])
	}
	return name, map[string]json.RawMessage{}
}

// filterMembers are the members of a logs filter the node knows; it
// matches their names without regard to case (Go's encoding/json, as geth
// decodes), the last of several spellings winning.
var filterMembers = []string{"address", "topics", "fromBlock", "toBlock", "blockHash"}

// logsFilter returns the members of the filter object raw as the node
// reads them, for the backfill's eth_getLogs: a known member under its
// own name (`ADDRESS` is `address`), the last spelling given winning,
// and without its range members in any spelling (`blockhash`,
// `FromBlock`), which the backfill sets itself. Other members stay as
// written (the node ignores them). Something that is not an object is an
// empty filter.
func logsFilter(raw json.RawMessage) map[string]json.RawMessage {
	f := map[string]json.RawMessage{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return f
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return map[string]json.RawMessage{}
		}
		name, _ := t.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return map[string]json.RawMessage{}
		}
		for _, m := range filterMembers {
			if strings.EqualFold(name, m) {
				name = m
				break
			}
		}
		switch name {
		case "fromBlock", "toBlock", "blockHash":
			continue
		}
		f[name] = val
	}
	return f
}

// getLogsParams builds eth_getLogs params: the key's filter over
// [from, to].
func getLogsParams(filter map[string]json.RawMessage, from, to uint64) []byte {
	return filterParams(filter, "fromBlock", quantity(from), "toBlock", quantity(to))
}

// getLogsByHashParams builds eth_getLogs params: the key's filter in the
// block with hash.
func getLogsByHashParams(filter map[string]json.RawMessage, hash string) []byte {
	return filterParams(filter, "blockHash", hash)
}

// filterParams builds eth_getLogs params: the key's filter plus the given
// members (name, string value, ...).
func filterParams(filter map[string]json.RawMessage, members ...string) []byte {
	f := make(map[string]json.RawMessage, len(filter)+len(members)/2)
	for k, v := range filter {
		f[k] = v
	}
	for i := 0; i+1 < len(members); i += 2 {
		f[members[i]] = json.RawMessage(strconv.Quote(members[i+1]))
	}
	b, _ := json.Marshal([]any{f})
	return b
}
