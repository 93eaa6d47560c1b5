package core

import (
	"errors"
	"testing"
)

func TestPolicyDenied(t *testing.T) {
	def, err := newPolicy(DefaultDenyMethods, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method string
		denied bool
	}{
		{"admin_peers", true},
		{"ADMIN_peers", true},
		{"Admin_Peers", true},
		{"admin_/peers", true},
		{"admin_", true},
		{"personal_sign", true},
		{"miner_start", true},
		{"debug_setHead", true},
		{"DEBUG_SETHEAD", true},
		{"debug_setGCPercent", true},
		{"debug_setMemoryLimit", true},
		{"debug_writeMemProfile", true},
		{"debug_startCPUProfile", true},
		{"debug_cpuProfile", true},
		{"debug_blockProfile", true},
		{"debug_setMutexProfileFraction", true},
		{"debug_goTrace", true},
		{"debug_startGoTrace", true},
		{"debug_freeOSMemory", true},
		{"debug_verbosity", true},
		{"debug_vmodule", true},
		{"debug_chaindbCompact", true},
		{"debug_clearTxpool", true},
		{"debug_standardTraceBlockToFile", true},
		{"debug_standardTraceBadBlockToFile", true},
		{"debug_traceBlockFromFile", true},
		{"debug_sync", true},
		{"debug_syncing", false}, // not a geth method; only debug_sync is
		{"debug_traceBadBlock", false},
		{"debug_traceTransaction", false},
		{"debug_traceCall", false},
		{"debug_traceBlockByNumber", false},
		{"debug_getRawBlock", false},
		{"debug_storageRangeAt", false},
		{"eth_call", false},
		{"eth_chainId", false},
		{"administrator", false}, // no "_" after admin
		{"xadmin_peers", false},
		{"", false},
	} {
		if got := def.denied(tc.method); got != tc.denied {
			t.Errorf("denied(%q) = %v, want %v", tc.method, got, tc.denied)
		}
	}
}

func TestGlobFold(t *testing.T) {
	for _, tc := range []struct {
		pat, name string
		want      bool
	}{
		{"*", "", true},
		{"*", "a/b", true},
		{"a*", "A", true},
		{"a*b", "axxb", true},
		{"a*b", "axxbc", false},
		{"a*b*c", "abbbcbc", true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"a[b]", "a[b]", true}, // brackets are literal
		{"a[b]", "ab", false},
		{`a\*`, `a\x`, true}, // backslash is literal, * still a wildcard
		{"eth_call", "eth_callx", false},
		{"eth_call", "ETH_CALL", true},
		{"**x", "yx", true},
	} {
		if got := globFold(tc.pat, tc.name); got != tc.want {
			t.Errorf("globFold(%q, %q) = %v, want %v", tc.pat, tc.name, got, tc.want)
		}
	}
}

func TestCheckDenyPattern(t *testing.T) {
	for _, tc := range []struct {
		pat string
		ok  bool
	}{
		{"admin_*", true},
		{"a[", true},
		{"", false},
		{"admin *", false},
		{"admin_\n", false},
		{"admín_*", false},
	} {
		err := CheckDenyPattern(tc.pat)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrDenyPattern)) {
			t.Errorf("CheckDenyPattern(%q) = %v, want ok=%v", tc.pat, err, tc.ok)
		}
	}
}
