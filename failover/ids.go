package failover

import "github.com/muxd/muxd/router"

// The upstream id space. Every request muxd writes on an upstream
// connection has an id from one namespace, split by the JSON type of the
// id so that no owner can take another's:
//
//   - JSON numbers (plain decimal, router.AppendUpstreamID) are the
//     core's: the ids it rewrites clients' requests to, and those of its
//     own requests (resubscribes, backfills, the finalized block).
//   - JSON strings beginning "muxd-" are the shell's own requests, all
//     named here: the two health requests Upstreams writes on every
//     connection (HealthChainID, HealthHeadsID), and keepalive's probe
//     (ProbeID, which package mux hands to package reconnect).
//
// Upstreams.Frame takes the answers of the second kind and hands every
// other message to the core; an id of neither kind is the core's to drop.
const (
	HealthChainID = `"muxd-health-chain"` // eth_chainId, with more than one upstream
	HealthHeadsID = `"muxd-health-heads"` // eth_subscribe newHeads: the connection's head
	ProbeID       = `"muxd-keepalive"`    // keepalive's probe (reconnect.Config.ProbeID)
)

// The health requests, as written.
const (
	healthChainIDReq = `{"jsonrpc":"2.0","id":` + HealthChainID + `,"method":"eth_chainId"}`
	healthHeadsReq   = `{"jsonrpc":"2.0","id":` + HealthHeadsID + `,"method":"eth_subscribe","params":["newHeads"]}`
)

// IDOwner is who owns an upstream id (see the id space above).
type IDOwner uint8

// The owners of upstream ids.
const (
	OwnerNone        IDOwner = iota // no one: not an id muxd writes
	OwnerCore                       // a number: the core's
	OwnerHealthChain                // HealthChainID
	OwnerHealthHeads                // HealthHeadsID
	OwnerProbe                      // ProbeID
)

// Owner returns who owns the raw JSON id raw.
func Owner(raw []byte) IDOwner {
	switch string(raw) {
	case HealthChainID:
		return OwnerHealthChain
	case HealthHeadsID:
		return OwnerHealthHeads
	case ProbeID:
		return OwnerProbe
	}
	if _, ok := router.ParseUpstreamID(raw); ok {
		return OwnerCore
	}
	return OwnerNone
}
