package router

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestCallKeyCanonical: the exact key of params written in different
// ways, and params CallKey refuses.
func TestCallKeyCanonical(t *testing.T) {
	tests := []struct {
		name, params, want string
	}{
		{"absent", "", "m\x00"},
		{"empty array", `[]`, "m\x00[]"},
		{"whitespace", " [ 1 ,\t\"a b\" ,\n true , null ] ", "m\x00[1,\"a b\",true,null]"},
		{"members sorted", `[{"to":"0x1","data":"0x2"},"latest"]`, "m\x00[{\"data\":\"0x2\",\"to\":\"0x1\"},\"latest\"]"},
		{"nested objects sorted", `{"b":{"y":1,"x":[{"d":4,"c":3}]},"a":[]}`, "m\x00{\"a\":[],\"b\":{\"x\":[{\"c\":3,\"d\":4}],\"y\":1}}"},
		{"empty object", `[{ }]`, "m\x00[{}]"},
		{"escapes kept", `["\u0061\"\\"]`, "m\x00[\"\\u0061\\\"\\\\\"]"},
		{"number text kept", `[1.0,1e2,-0]`, "m\x00[1.0,1e2,-0]"},
		{"case apart, sorted", `[{"toBlock":"0x2","fromBlock":"0x1"}]`, "m\x00[{\"fromBlock\":\"0x1\",\"toBlock\":\"0x2\"}]"},
		{"more than 8 members", `{"i":9,"h":8,"g":7,"f":6,"e":5,"d":4,"c":3,"b":2,"a":1}`, "m\x00{\"a\":1,\"b\":2,\"c\":3,\"d\":4,\"e\":5,\"f\":6,\"g\":7,\"h\":8,\"i\":9}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var params []byte
			if tt.params != "" {
				params = []byte(tt.params)
			}
			got, err := CallKey("m", params)
			if err != nil || got != tt.want {
				t.Errorf("CallKey(%s) = %q, %v; want %q", tt.params, got, err, tt.want)
			}
		})
	}
	// Members that may name the same field keep their order: the node
	// reads the last one. Two ways of writing such an object never share
	// a key (the second of each pair was keyed as the first before).
	for _, pair := range [][2]string{
		{`[{"blockHash":"0x1","blockhash":"0x2"}]`, `[{"blockhash":"0x2","blockHash":"0x1"}]`},
		{`[{"to":"0x1","TO":"0x2","data":"0x3"}]`, `[{"TO":"0x2","to":"0x1","data":"0x3"}]`},
		{`[{"a":1,"a":2}]`, `[{"a":2,"a":1}]`},
		{`[{"blockHash":"0x1","block\u0048ash":"0x2"}]`, `[{"block\u0048ash":"0x2","blockHash":"0x1"}]`},
		{`[{"blockHash":"0x1","blockHaſh":"0x2"}]`, `[{"blockHaſh":"0x2","blockHash":"0x1"}]`},
		{`{"k":1,"K":2}`, `{"K":2,"k":1}`},
	} {
		a, errA := CallKey("m", []byte(pair[0]))
		b, errB := CallKey("m", []byte(pair[1]))
		if errA != nil || errB != nil || a == b {
			t.Errorf("CallKey(%s) = %q, %v and CallKey(%s) = %q, %v: want two different keys", pair[0], a, errA, pair[1], b, errB)
		}
		if want := "m\x00" + pair[1]; b != want {
			t.Errorf("CallKey(%s) = %q, want the order written %q", pair[1], b, want)
		}
	}
	for _, bad := range []string{`[1] [2]`, `[1,]`, `{"a" 1}`, `{"a":1,}`, `[`, `"abc`, ``, ` `, `{1:2}`, `[1 2]`} {
		if k, err := CallKey("m", []byte(bad)); err == nil {
			t.Errorf("CallKey(%q) = %q, want an error", bad, k)
		}
	}
	deep := strings.Repeat("[", maxCanonicalDepth+2) + strings.Repeat("]", maxCanonicalDepth+2)
	if _, err := CallKey("m", []byte(deep)); err == nil {
		t.Error("nesting past the scanner's limit keyed")
	}
}

// FuzzCallKey: for any JSON value CallKey keys, the key's params are valid
// JSON that decodes to the same value, and keying them again changes
// nothing; for anything that is not one JSON value, it refuses.
func FuzzCallKey(f *testing.F) {
	for _, s := range []string{`[{"to":"0x1","data":"0x2"},"latest"]`, ` { "b" : [ 1 , 2 ] , "a" : "\u00e9" } `, `[]`, `[1] [2]`, `"x"`, `{"a":{"c":1,"b":2}}`, `[{"s":2,"S":1}]`, `{"blockhash":"0x2","blockHash":"0x1"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, params []byte) {
		if len(params) == 0 {
			return
		}
		key, err := CallKey("m", params)
		valid := json.Valid(params)
		if err != nil {
			if valid && bytes.Count(params, []byte("[")) < maxCanonicalDepth {
				t.Fatalf("CallKey refused valid JSON %q: %v", params, err)
			}
			return
		}
		if !valid {
			t.Fatalf("CallKey keyed invalid JSON %q as %q", params, key)
		}
		canon := []byte(strings.TrimPrefix(key, "m\x00"))
		decode := func(b []byte) any {
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.UseNumber()
			var v any
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("decode %q: %v", b, err)
			}
			return v
		}
		if a, b := decode(params), decode(canon); !reflect.DeepEqual(a, b) {
			t.Fatalf("CallKey(%q) = %q: decodes to %v, not %v", params, canon, b, a)
		}
		// As geth decodes params into structs: fields matched ignoring
		// case, the last member winning. Two calls share a key only when
		// each decodes as its key does.
		if a, b := decodeFields(params), decodeFields(canon); !reflect.DeepEqual(a, b) {
			t.Fatalf("CallKey(%q) = %q: decodes into a struct as %#v, not %#v", params, canon, b, a)
		}
		again, err := CallKey("m", canon)
		if err != nil || again != key {
			t.Fatalf("keying %q again: %q, %v", canon, again, err)
		}
	})
}

// fieldProbe is decoded into as geth decodes params: encoding/json matches
// member names to fields ignoring case (Unicode folding included).
type fieldProbe struct {
	BlockHash, To, S, K any
}

// decodeFields decodes b as geth would decode params made of objects: each
// object into a fieldProbe, arrays element by element, other values as
// they are.
func decodeFields(b []byte) any {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) > 0 && b[0] == '{':
		var p fieldProbe
		if json.Unmarshal(b, &p) != nil {
			return "undecodable"
		}
		return p
	case len(b) > 0 && b[0] == '[':
		var elems []json.RawMessage
		if json.Unmarshal(b, &elems) != nil {
			return "undecodable"
		}
		out := make([]any, len(elems))
		for i, e := range elems {
			out[i] = decodeFields(e)
		}
		return out
	}
	var v any
	if json.Unmarshal(b, &v) != nil {
		return "undecodable"
	}
	return v
}
