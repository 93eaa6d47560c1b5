package core

import (
	"errors"
	"fmt"
	"strings"
)

// ErrDenyPattern marks a deny_methods pattern that cannot be used.
var ErrDenyPattern = errors.New("bad deny pattern")

// DefaultRetryMethods are the read-only methods that are sent again on the
// next connection when the upstream is lost with them in flight. Anything
// else (eth_sendRawTransaction above all) may or may not have been executed,
// so it fails at once.
var DefaultRetryMethods = []string{
	"eth_chainId", "eth_blockNumber", "eth_call", "eth_getBalance",
	"eth_getBlockByNumber", "eth_getBlockByHash", "eth_getBlockReceipts", "eth_getTransactionReceipt",
	"eth_getTransactionByHash", "eth_getTransactionCount", "eth_getLogs",
	"eth_getCode", "eth_getStorageAt", "eth_estimateGas", "eth_gasPrice",
	"eth_feeHistory", "eth_maxPriorityFeePerGas", "eth_syncing",
	"net_version", "net_listening", "web3_clientVersion",
}

// DefaultDenyMethods are refused with -32601 and never sent upstream: node
// administration, key management, and the debug_ methods that change the
// node or its host rather than read the chain: debug_setHead rewinds the
// chain, the debug_set* knobs change the node's runtime, the profilers and
// Go tracers write files on the node's disk and cost it CPU, and
// freeOSMemory, verbosity, vmodule and chaindbCompact act on the process;
// clearTxpool empties the node's mempool (every client's pending
// transactions), standardTrace*ToFile write a trace file per transaction on
// the node's disk, traceBlockFromFile reads any path on the node's host,
// and sync sets the node's sync target.
// The read-only debug_ methods indexers use (debug_trace* but
// traceBlockFromFile, debug_getRaw*, debug_storageRangeAt, …) pass.
var DefaultDenyMethods = []string{
	"admin_*", "personal_*", "miner_*",
	"debug_set*", "debug_*profile*", "debug_*gotrace", "debug_freeOSMemory",
	"debug_verbosity", "debug_vmodule", "debug_chaindbCompact",
	"debug_clearTxpool", "debug_standardTrace*", "debug_traceBlockFromFile", "debug_sync",
}

// policy answers the per-method questions: may it be called, may it be
// retried on a new connection.
type policy struct {
	deny  []string // lower-cased patterns
	retry map[string]bool
	// deniedKnown is the verdict for every known method, worked out once;
	// other names go through the patterns each time.
	deniedKnown map[string]bool
}

func newPolicy(deny, retry []string) (policy, error) {
	p := policy{retry: make(map[string]bool, len(retry)), deniedKnown: map[string]bool{}}
	for _, pat := range deny {
		if err := CheckDenyPattern(pat); err != nil {
			return policy{}, err
		}
		p.deny = append(p.deny, strings.ToLower(pat))
	}
	for name := range KnownMethods {
		p.deniedKnown[name] = p.match(name)
	}
	for _, m := range retry {
		p.retry[m] = true
	}
	return p, nil
}

// CheckDenyPattern reports whether pat can be used in DenyMethods: a
// non-empty pattern of printable ASCII, where '*' stands for any run of
// characters and '?' for one; everything else, '[' and '\' included, is
// literal.
func CheckDenyPattern(pat string) error {
	if pat == "" {
		return fmt.Errorf("%w: empty", ErrDenyPattern)
	}
	for i := 0; i < len(pat); i++ {
		if c := pat[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w %q: byte %#x at %d is not printable ASCII", ErrDenyPattern, pat, c, i)
		}
	}
	return nil
}

func (p policy) denied(method string) bool {
	if d, ok := p.deniedKnown[method]; ok {
		return d
	}
	return p.match(method)
}

// match reports whether method matches a deny pattern. Matching ignores
// ASCII case and '*' crosses every character, '/' included: the verdict
// must not depend on how the node happens to treat "ADMIN_peers" or
// "admin_/peers" (geth answers -32601 to both today).
func (p policy) match(method string) bool {
	for _, pat := range p.deny {
		if globFold(pat, method) {
			return true
		}
	}
	return false
}

// globFold matches name against a lower-case pattern whose only wildcards
// are '*' (any run, empty included) and '?' (one byte), ignoring ASCII case
// in name. It backtracks only to the last '*', so it is linear in practice
// and never worse than len(pat)*len(name).
func globFold(pat, name string) bool {
	pi, ni := 0, 0
	starP, starN := -1, 0
	for ni < len(name) {
		if pi < len(pat) {
			switch c := pat[pi]; {
			case c == '*':
				starP, starN = pi, ni
				pi++
				continue
			case c == '?' || c == lowerASCII(name[ni]):
				pi++
				ni++
				continue
			}
		}
		if starP < 0 {
			return false
		}
		starN++
		pi, ni = starP+1, starN
	}
	for pi < len(pat) && pat[pi] == '*' {
		pi++
	}
	return pi == len(pat)
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func (p policy) retryable(method string) bool { return p.retry[method] }
