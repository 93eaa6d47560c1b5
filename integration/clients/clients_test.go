package clients_test

import (
	"strconv"
	"testing"
)

// Issue #33: muxd put the batch elements it answers itself (cache hits such
// as eth_chainId, denied methods, invalid elements) before the node's in a
// batch's answer array. JSON-RPC pairs by id, but libraries pair by
// position: ethers 5's JsonRpcBatchProvider gave eth_blockNumber the chain
// id and then failed every call with "underlying network changed"; web3.js
// 4's BatchRequest timed out over WebSocket and IPC and returned the array
// scrambled over HTTP. Each test runs the library against geth first (the
// behaviour muxd must not change), then through muxd.

// TestEthers5 runs ethers5.js: JsonRpcBatchProvider bursts over HTTP and
// WebSocketProvider basics.
func TestEthers5(t *testing.T) {
	node := requireNode(t)
	h := newHarness(t)
	chain := strconv.Itoa(devChainID)
	for _, target := range []struct{ name, http, ws string }{
		{"geth", h.node.HTTPURL, h.node.WSURL},
		{"muxd", h.HTTPURL, h.WSURL},
	} {
		t.Run(target.name, func(t *testing.T) {
			runScript(t, node, "ethers5.js", "--http", target.http, "--ws", target.ws, "--chain-id", chain, "--bursts", "20")
		})
	}
}

// TestWeb3js4 runs web3js4.js: BatchRequest with node-answered, cached and
// denied elements, over each transport (geth here serves no IPC).
func TestWeb3js4(t *testing.T) {
	node := requireNode(t)
	h := newHarness(t)
	chain := strconv.Itoa(devChainID)
	for _, c := range []struct{ name, transport, endpoint string }{
		{"geth/ws", "ws", h.node.WSURL},
		{"geth/http", "http", h.node.HTTPURL},
		{"muxd/ws", "ws", h.WSURL},
		{"muxd/http", "http", h.HTTPURL},
		{"muxd/ipc", "ipc", h.IPCPath},
	} {
		t.Run(c.name, func(t *testing.T) {
			runScript(t, node, "web3js4.js", "--transport", c.transport, "--endpoint", c.endpoint, "--chain-id", chain, "--tries", "10")
		})
	}
}
