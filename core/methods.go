package core

import (
	"strings"

	"github.com/muxd/muxd/router"
)

// KnownMethods bounds the method label of the metrics: anything else counts as "other", so
// a client sending random method names cannot grow the series without end.
// It maps each name to itself, so that dispatch can look a method up by its
// raw bytes and share one string instead of allocating one per request.
var KnownMethods = func() map[string]string {
	m := map[string]string{}
	for _, s := range []string{
		"eth_accounts", "eth_blobBaseFee", "eth_blockNumber", "eth_call", "eth_chainId",
		"eth_createAccessList", "eth_estimateGas", "eth_feeHistory", "eth_gasPrice",
		"eth_getBalance", "eth_getBlockByHash", "eth_getBlockByNumber", "eth_getBlockReceipts",
		"eth_getBlockTransactionCountByHash", "eth_getBlockTransactionCountByNumber",
		"eth_getCode", "eth_getFilterChanges", "eth_getFilterLogs", "eth_getLogs", "eth_getProof",
		"eth_getStorageAt", "eth_getTransactionByBlockHashAndIndex",
		"eth_getTransactionByBlockNumberAndIndex", "eth_getTransactionByHash",
		"eth_getTransactionCount", "eth_getTransactionReceipt", "eth_getUncleByBlockHashAndIndex",
		"eth_getUncleByBlockNumberAndIndex", "eth_getUncleCountByBlockHash",
		"eth_getUncleCountByBlockNumber", "eth_maxPriorityFeePerGas", "eth_newBlockFilter",
		"eth_newFilter", "eth_newPendingTransactionFilter", "eth_sendRawTransaction",
		"eth_sendTransaction", "eth_sign", "eth_signTransaction", "eth_simulateV1",
		"eth_subscribe", "eth_syncing", "eth_uninstallFilter", "eth_unsubscribe",
		"net_listening", "net_peerCount", "net_version", "web3_clientVersion", "web3_sha3",
		"txpool_content", "txpool_inspect", "txpool_status",
		"debug_traceBlockByHash", "debug_traceBlockByNumber", "debug_traceCall",
		"debug_traceTransaction", "trace_block", "trace_call", "trace_filter",
		"trace_replayTransaction", "trace_transaction",
	} {
		m[s] = s
	}
	return m
}()

// methodName returns m's method, without allocating for the known methods
// (the common case on the hot path).
func methodName(frame []byte, m *router.Message) string {
	if raw := m.Method.In(frame); len(raw) >= 2 {
		if name, ok := KnownMethods[string(raw[1:len(raw)-1])]; ok {
			return name
		}
	}
	return m.MethodName(frame)
}

// foreignSubscription reports whether a node may take method for a
// subscribe or unsubscribe other than the eth_ pair muxd shares among its
// clients: geth takes any name ending in _subscribe or _unsubscribe, in
// any namespace, for one (rpc/json.go; the namespace of an unsubscribe is
// not even looked at), and other nodes may not mind the case. Forwarded on
// the shared connection, such an unsubscribe could cancel the upstream
// subscription muxd holds for everyone (ids are guessable), and such a
// subscribe would leave one that nobody's client hears from (its pushes
// are not eth_subscription) and that outlives its client.
func foreignSubscription(method string) bool {
	if method == methodSubscribe || method == methodUnsubscribe {
		return false
	}
	return hasSuffixFold(method, "_subscribe") || hasSuffixFold(method, "_unsubscribe")
}

// hasSuffixFold is strings.HasSuffix with ASCII case ignored.
func hasSuffixFold(s, suffix string) bool {
	return len(s) >= len(suffix) && strings.EqualFold(s[len(s)-len(suffix):], suffix)
}

// errForeignSubscription refuses a foreign subscription method.
func errForeignSubscription(method string) router.RPCError {
	return router.MethodDenied(method).Because("only eth_subscribe and eth_unsubscribe are shared")
}

// Well-known method names that muxd treats specially.
const (
	methodSubscribe    = "eth_subscribe"
	methodUnsubscribe  = "eth_unsubscribe"
	methodSubscription = "eth_subscription"
)
