package router

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestSubscriptionKey(t *testing.T) {
	tests := []struct {
		a, b string
		same bool
	}{
		{`["newHeads"]`, `[ "newHeads" ]`, true},
		{`["logs",{"address":"0xAB","topics":["0xCD"]}]`, `["logs",{"topics":["0xcd"],"address":"0xab"}]`, true},
		{`["logs",{"address":"0xab"}]`, `["logs",{"address":"0xac"}]`, false},
		{`["newPendingTransactions",true]`, `["newPendingTransactions"]`, false},
		{`["newHeads"]`, `["newheads"]`, false},                   // names are compared exactly
		{`["x",{"data":"0xAB"}]`, `["x",{"data":"0xab"}]`, false}, // hex is folded only for logs filters
		// Names equal but for case are one field to the node, the last
		// one winning: their order matters and they are never shared.
		{`["logs",{"address":"0x1","Address":"0x2"}]`, `["logs",{"Address":"0x2","address":"0x1"}]`, false},
		{`["logs",{"address":"0x1","addreſs":"0x2"}]`, `["logs",{"addreſs":"0x2","address":"0x1"}]`, false},
		{`["logs",{"address":"0x1","topics":[],"Address":"0x2"}]`, `["logs", {"address":"0x1", "topics":[], "Address":"0x2"}]`, true},
		{`["logs",{"address":"0x1","address":"0x2"}]`, `["logs",{"address":"0x2"}]`, true}, // an exact repeat: the last one, as the node reads it
	}
	for _, tt := range tests {
		ka, err := SubscriptionKey([]byte(tt.a))
		if err != nil {
			t.Fatalf("%s: %v", tt.a, err)
		}
		kb, err := SubscriptionKey([]byte(tt.b))
		if err != nil {
			t.Fatalf("%s: %v", tt.b, err)
		}
		if (ka == kb) != tt.same {
			t.Errorf("%s vs %s: same=%v, want %v (%s / %s)", tt.a, tt.b, ka == kb, tt.same, ka, kb)
		}
	}
	for _, bad := range []string{`[]`, `[1]`, `{}`, `"newHeads"`, `[""]`, `[`} {
		if _, err := SubscriptionKey([]byte(bad)); err == nil {
			t.Errorf("SubscriptionKey(%s) accepted", bad)
		}
	}
}

// TestCallKey: a call's key ignores whitespace and member order and
// nothing else.
func TestCallKey(t *testing.T) {
	tests := []struct {
		ma, pa, mb, pb string
		same           bool
	}{
		{"eth_call", `[{"to":"0x1","data":"0x2"},"latest"]`, "eth_call", `[ {"data":"0x2", "to":"0x1"} , "latest" ]`, true},
		{"eth_getBalance", `["0xab","latest"]`, "eth_getBalance", `["0xAB","latest"]`, false}, // hex case kept
		{"eth_getBalance", `["0xab","latest"]`, "eth_getCode", `["0xab","latest"]`, false},
		{"eth_feeHistory", `[4,"latest",[25]]`, "eth_feeHistory", `[4.0,"latest",[25]]`, false}, // number text kept
		{"eth_blockNumber", "", "eth_blockNumber", `[]`, false},                                 // absent vs empty
		{"eth_blockNumber", "", "eth_blockNumber", "", true},
	}
	raw := func(s string) []byte {
		if s == "" {
			return nil
		}
		return []byte(s)
	}
	for _, tt := range tests {
		ka, err := CallKey(tt.ma, raw(tt.pa))
		if err != nil {
			t.Fatalf("%s %s: %v", tt.ma, tt.pa, err)
		}
		kb, err := CallKey(tt.mb, raw(tt.pb))
		if err != nil {
			t.Fatalf("%s %s: %v", tt.mb, tt.pb, err)
		}
		if (ka == kb) != tt.same {
			t.Errorf("%s %s vs %s %s: same=%v, want %v", tt.ma, tt.pa, tt.mb, tt.pb, ka == kb, tt.same)
		}
	}
	if _, err := CallKey("eth_call", []byte(`[1] [2]`)); err == nil {
		t.Error("two values keyed")
	}
}

// FuzzSubscriptionKey feeds client eth_subscribe params (untrusted bytes)
// to SubscriptionKey: a key is valid JSON, an array led by the
// subscription name (gapfill reads keys back with encoding/json), the same
// on every call, and the same for the params with their whitespace
// removed.
func FuzzSubscriptionKey(f *testing.F) {
	for _, s := range []string{`["newHeads"]`, `["logs",{"address":"0xAb","topics":[["0xC",null],null]}]`,
		`["logs",{"Address":"0x1","address":"0x2"}]`, `["newPendingTransactions",true]`, ` [ "logs" , { "topics" : [ ] } ] `,
		`["syncing"]`, `[]`, `{}`, `["logs"]`, `[1]`, `[""]`, `["logs",{"fromBlock":1e400}]`, `["x",1.50,-0]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, params []byte) {
		key, err := SubscriptionKey(params)
		if again, err2 := SubscriptionKey(params); again != key || (err == nil) != (err2 == nil) {
			t.Fatalf("%s: keyed %q (%v), then %q (%v)", params, key, err, again, err2)
		}
		if err != nil {
			return
		}
		var v []json.RawMessage
		var name string
		if json.Unmarshal([]byte(key), &v) != nil || len(v) == 0 || json.Unmarshal(v[0], &name) != nil || name == "" {
			t.Fatalf("%s: key %q is not an array led by a name", params, key)
		}
		var compact bytes.Buffer
		if json.Compact(&compact, params) != nil {
			t.Fatalf("%s: keyed %q, but it is not valid JSON", params, key)
		}
		if k2, err := SubscriptionKey(compact.Bytes()); err != nil || k2 != key {
			t.Fatalf("%s: key %q; without whitespace %q (%v)", params, key, k2, err)
		}
	})
}
