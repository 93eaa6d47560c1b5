package main

// The simulated chain of workload (h): what the upstream answers to the
// reads of (h) at a given head, a pure function of the request and the
// head, so that a client can work out each answer the node gives and check
// the one it gets byte for byte.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// chainID is what the simulated node answers to eth_chainId (1337, as geth
// --dev).
const chainID = `"0x539"`

// chainMethods are the methods the simulated chain answers; the upstream
// started with -node-delay answers them after that delay and counts them.
var chainMethods = map[string]bool{
	"eth_blockNumber": true, "eth_getBlockByNumber": true, "eth_chainId": true, "eth_getBalance": true,
}

// blockHash is the hash of block n of the simulated chain.
func blockHash(n uint64) string {
	s := sha256.Sum256(strconv.AppendUint([]byte("bench block "), n, 10))
	return "0x" + hex.EncodeToString(s[:])
}

// appendBlock appends block n as eth_getBlockByNumber(…, false) returns it
// (about 1.3 KB, a real block's fields); a newHeads push carries the same
// object.
func appendBlock(b []byte, n uint64) []byte {
	h := blockHash(n)
	return fmt.Appendf(b, `{"baseFeePerGas":"0x7","difficulty":"0x0","extraData":"0x","gasLimit":"0x1c9c380","gasUsed":"0x5208",`+
		`"hash":%q,"logsBloom":"0x%s","miner":"0x0000000000000000000000000000000000000000","mixHash":"0x%s","nonce":"0x0000000000000000",`+
		`"number":"0x%x","parentHash":%q,"receiptsRoot":"0x%s","sha3Uncles":"0x1dcc4de8dec75d7aab85b567b6ccd41ad312451b948a7413f0a142fd40d49347",`+
		`"size":"0x2a1","stateRoot":"0x%s","timestamp":"0x%x","transactions":[],"transactionsRoot":"0x%s","uncles":[]}`,
		h, strings.Repeat("00", 256), h[2:], n, blockHash(n-1), h[2:], h[2:], 1700000000+n, h[2:])
}

// balanceAt is the balance of address addr at block n.
func balanceAt(addr string, n uint64) string {
	s := sha256.Sum256(fmt.Appendf(nil, "%s@%d", strings.ToLower(addr), n))
	return "0x" + strings.TrimLeft(hex.EncodeToString(s[:12]), "0")
}

// appendChainResult appends the result of method with params at head, or
// reports that the simulated chain does not answer it.
func appendChainResult(b []byte, method string, params json.RawMessage, head uint64) ([]byte, bool) {
	var ps []json.RawMessage
	if len(params) > 0 && json.Unmarshal(params, &ps) != nil {
		return b, false
	}
	tag := func(i int) (uint64, bool) { // a block tag or number, resolved at head
		var s string
		if i >= len(ps) || json.Unmarshal(ps[i], &s) != nil {
			return 0, false
		}
		switch s {
		case "latest", "pending", "safe", "finalized":
			return head, true
		}
		n, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
		return n, err == nil && strings.HasPrefix(s, "0x")
	}
	switch method {
	case "eth_chainId":
		return append(b, chainID...), true
	case "eth_blockNumber":
		return fmt.Appendf(b, `"0x%x"`, head), true
	case "eth_getBlockByNumber":
		n, ok := tag(0)
		if !ok {
			return b, false
		}
		if n > head {
			return append(b, "null"...), true
		}
		return appendBlock(b, n), true
	case "eth_getBalance":
		var addr string
		n, ok := tag(1)
		if !ok || json.Unmarshal(ps[0], &addr) != nil {
			return b, false
		}
		return strconv.AppendQuote(b, balanceAt(addr, n)), true
	}
	return b, false
}

// appendChainAnswer appends the node's whole answer to the request id
// method params at head: what the upstream writes, and what a client
// checks its answer against. ok is false for a request the simulated chain
// does not answer.
func appendChainAnswer(b []byte, id json.RawMessage, method string, params json.RawMessage, head uint64) ([]byte, bool) {
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, id...)
	b = append(b, `,"result":`...)
	b, ok := appendChainResult(b, method, params, head)
	return append(b, '}'), ok
}

// appendHeadPush appends the part of a newHeads push of head n after the
// subscription id (as pushBody does for the other workloads).
func appendHeadPush(b []byte, n uint64) []byte {
	b = append(b, `","result":`...)
	b = appendBlock(b, n)
	return append(b, "}}"...)
}
