package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// nesting returns the deepest container nesting of a JSON text (strings are
// skipped), so that tests can leave aside inputs beyond maxDepth.
func nesting(b []byte) int {
	depth, max := 0, 0
	inStr := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inStr {
			switch c {
			case '\\':
				i++
			case '"':
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
		case '{', '[':
			depth++
			if depth > max {
				max = depth
			}
		case '}', ']':
			depth--
		}
	}
	return max
}

// nested returns n nested arrays around 1, e.g. [[1]] for n == 2.
func nested(n int) string {
	return strings.Repeat("[", n) + "1" + strings.Repeat("]", n)
}

func req(id string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"eth_blockNumber","params":[]}`
}

// checkSpans checks that every span of every message lies within the frame
// and inside its message.
func checkSpans(t testing.TB, frame []byte, f Frame) {
	t.Helper()
	for k, m := range f.Messages {
		if m.Start < 0 || m.End > len(frame) || m.Start >= m.End {
			t.Fatalf("message %d: bad extent [%d,%d) in %d bytes", k, m.Start, m.End, len(frame))
		}
		for name, s := range map[string]Span{
			"version": m.Version, "id": m.ID, "method": m.Method, "params": m.Params,
			"result": m.Result, "error": m.Error, "subscription": m.Subscription,
		} {
			if !s.Present() {
				if s != (Span{}) {
					t.Fatalf("message %d: absent %s has span %+v", k, name, s)
				}
				continue
			}
			if s.Off < m.Start || s.Off+s.Len > m.End {
				t.Fatalf("message %d: %s span %+v outside message [%d,%d)", k, name, s, m.Start, m.End)
			}
			if !json.Valid(s.In(frame)) {
				t.Fatalf("message %d: %s span %q is not a JSON value", k, name, s.In(frame))
			}
		}
	}
}

func TestScanClientValidIDs(t *testing.T) {
	for _, id := range []string{
		`1`, `"1"`, `1.0`, `18446744073709551616`, `"a\"b"`, `null`, `-5`, `1e3`,
		`0`, `-0`, `1E+3`, `2.5e-7`, `""`, `"\u00e9\\\/"`, `"é"`, `123456789012345678901234567890`,
	} {
		t.Run(id, func(t *testing.T) {
			frame := []byte(req(id))
			f, err := ScanClient(frame, nil)
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if f.Batch || len(f.Messages) != 1 {
				t.Fatalf("frame = %+v", f)
			}
			m := f.Messages[0]
			if m.Invalid != nil {
				t.Fatalf("Invalid = %v", m.Invalid)
			}
			if !m.HasID() || string(m.ID.In(frame)) != id {
				t.Fatalf("id = %q, want %q", m.ID.In(frame), id)
			}
			if m.Start != 0 || m.End != len(frame) {
				t.Fatalf("extent [%d,%d), want [0,%d)", m.Start, m.End, len(frame))
			}
			if !m.MethodIs(frame, "eth_blockNumber") || m.MethodName(frame) != "eth_blockNumber" {
				t.Fatalf("method = %q", m.Method.In(frame))
			}
			if string(m.Version.In(frame)) != `"2.0"` || string(m.Params.In(frame)) != `[]` {
				t.Fatalf("version %q params %q", m.Version.In(frame), m.Params.In(frame))
			}
			if m.Result.Present() || m.Error.Present() || m.Subscription.Present() {
				t.Fatalf("unexpected members: %+v", m)
			}
			checkSpans(t, frame, f)
			checkGethAgrees(t, frame, &m)
		})
	}
}

func TestScanClientValidShapes(t *testing.T) {
	for _, tc := range []struct {
		name, frame, id, method, params string
	}{
		{"no params", `{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`, `1`, `"eth_chainId"`, ``},
		{"object params", `{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":[1,{"b":null}]}}`, `1`, `"m"`, `{"a":[1,{"b":null}]}`},
		{"null params", `{"jsonrpc":"2.0","id":1,"method":"m","params":null}`, `1`, `"m"`, `null`},
		{"members reordered", `{"params":[true,false],"method":"m","id":"x","jsonrpc":"2.0"}`, `"x"`, `"m"`, `[true,false]`},
		{"unknown members", `{"jsonrpc":"2.0","id":1,"method":"m","idx":1,"i":2,"method2":3,"x":{"id":9}}`, `1`, `"m"`, ``},
		{"NUL key", `{"jsonrpc":"2.0","id":1,"method":"m","\u0000":1}`, `1`, `"m"`, ``},
		{"escaped non-name key", `{"jsonrpc":"2.0","id":1,"method":"m","\u0069dx":1,"\/id":2,"\ud83d\ude00":3}`, `1`, `"m"`, ``},
		{"escaped method", `{"jsonrpc":"2.0","id":1,"method":"eth\u005fchainId"}`, `1`, `"eth\u005fchainId"`, ``},
		{"escaped version (geth decodes it)", `{"jsonrpc":"2\u002e0","id":1,"method":"m"}`, `1`, `"m"`, ``},
		{"invalid utf8 in string", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":[\"\xff\xfe\"]}", `1`, `"m"`, "[\"\xff\xfe\"]"},
		{
			"whitespace everywhere",
			" \t\r\n{ \"jsonrpc\" :\t\"2.0\" ,\r\n \"id\"\n:\n7 , \"method\" : \"m\" , \"params\" : [ 1 , { \"a\" : [ ] } ] } \n\t",
			`7`, `"m"`, `[ 1 , { "a" : [ ] } ]`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame := []byte(tc.frame)
			f, err := ScanClient(frame, nil)
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			m := f.Messages[0]
			if m.Invalid != nil {
				t.Fatalf("Invalid = %v", m.Invalid)
			}
			if got := string(m.ID.In(frame)); got != tc.id {
				t.Errorf("id = %q, want %q", got, tc.id)
			}
			if got := string(m.Method.In(frame)); got != tc.method {
				t.Errorf("method = %q, want %q", got, tc.method)
			}
			if got := string(m.Params.In(frame)); got != tc.params {
				t.Errorf("params = %q, want %q", got, tc.params)
			}
			if got := string(frame[m.Start:m.End]); got != strings.TrimSpace(tc.frame) {
				t.Errorf("element = %q", got)
			}
			checkSpans(t, frame, f)
			checkGethAgrees(t, frame, &m)
		})
	}
}

func TestScanClientMethodName(t *testing.T) {
	frame := []byte(`{"jsonrpc":"2.0","id":1,"method":"eth\u005fchainId"}`)
	f, err := ScanClient(frame, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := &f.Messages[0]
	if got := m.MethodName(frame); got != "eth_chainId" {
		t.Errorf("MethodName = %q", got)
	}
	if !m.MethodIs(frame, "eth_chainId") || m.MethodIs(frame, "eth_chainI") {
		t.Error("MethodIs wrong for escaped name")
	}
	// Escapes strconv does not know: decoded as the node decodes them.
	for raw, want := range map[string]string{`"a\/b"`: "a/b", `"\ud83d\ude00x"`: "\U0001F600x", `"plain"`: "plain"} {
		frame := []byte(`{"jsonrpc":"2.0","id":1,"method":` + raw + `}`)
		f, err := ScanClient(frame, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.Messages[0].MethodName(frame); got != want {
			t.Errorf("MethodName(%s) = %q, want %q", raw, got, want)
		}
		if !f.Messages[0].MethodIs(frame, want) {
			t.Errorf("MethodIs(%s, %q) = false", raw, want)
		}
	}
	var none Message
	if none.MethodName(frame) != "" || none.MethodIs(frame, "") {
		t.Error("absent method")
	}
}

func TestScanClientNotification(t *testing.T) {
	frame := []byte(` {"jsonrpc":"2.0","method":"eth_subscribe","params":["newHeads"]} `)
	f, err := ScanClient(frame, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := f.Messages[0]
	if m.Invalid != nil || m.HasID() || m.ID != (Span{}) {
		t.Fatalf("notification: %+v", m)
	}
	if !m.MethodIs(frame, "eth_subscribe") {
		t.Fatalf("method %q", m.Method.In(frame))
	}
}

func TestScanClientBatch(t *testing.T) {
	elems := []string{
		`{"jsonrpc":"2.0","id":1,"method":"a"}`,
		`{"jsonrpc":"2.0","method":"notify","params":[]}`,
		`5`,
		`{"jsonrpc":"1.0","id":"x","method":"b"}`,
		`{"jsonrpc":"2.0","id":{"o":1},"method":"c"}`,
		`{"jsonrpc":"2.0","id":"z","method":"d","params":{"k":[[]]}}`,
		`[1]`,
		`{"jsonrpc":"2.0","id":1,"method":"a"}`, // duplicate id: still its own entry
	}
	type want struct {
		id      string
		invalid bool
	}
	wants := []want{{`1`, false}, {``, false}, {``, true}, {`"x"`, true}, {``, true}, {`"z"`, false}, {``, true}, {`1`, false}}
	frame := []byte(" [ " + strings.Join(elems, " ,\n ") + " ] ")
	msgs := make([]Message, 0, 2) // too small: must grow
	f, err := ScanClient(frame, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Batch || len(f.Messages) != len(elems) {
		t.Fatalf("batch %v, %d messages", f.Batch, len(f.Messages))
	}
	checkSpans(t, frame, f)
	for k, m := range f.Messages {
		if got := string(frame[m.Start:m.End]); got != elems[k] {
			t.Errorf("element %d = %q, want %q", k, got, elems[k])
		}
		if got := string(m.ID.In(frame)); got != wants[k].id {
			t.Errorf("element %d id = %q, want %q", k, got, wants[k].id)
		}
		if (m.Invalid != nil) != wants[k].invalid {
			t.Errorf("element %d Invalid = %v", k, m.Invalid)
		}
		if m.Invalid != nil && !errors.Is(m.Invalid, ErrInvalid) {
			t.Errorf("element %d: %v does not wrap ErrInvalid", k, m.Invalid)
		}
	}
}

func TestScanClientBatchReusesMsgs(t *testing.T) {
	msgs := make([]Message, 0, 8)
	frame := []byte(`[` + req("1") + `,` + req("2") + `]`)
	f, err := ScanClient(frame, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if &f.Messages[0] != &msgs[:1][0] {
		t.Error("msgs was not reused")
	}
	// A second scan into the same slice must not keep the first's messages.
	f, err = ScanClient([]byte(req("3")), f.Messages)
	if err != nil || len(f.Messages) != 1 {
		t.Fatalf("err %v, %d messages", err, len(f.Messages))
	}
}

func TestScanEmptyBatch(t *testing.T) {
	for _, s := range []string{`[]`, `[ ]`, " \n[\t\r\n]\n "} {
		for name, scan := range map[string]func([]byte, []Message) (Frame, error){"client": ScanClient, "upstream": ScanUpstream} {
			f, err := scan([]byte(s), nil)
			if !errors.Is(err, ErrEmptyBatch) {
				t.Errorf("%s %q: err = %v, want ErrEmptyBatch", name, s, err)
			}
			if len(f.Messages) != 0 {
				t.Errorf("%s %q: %d messages", name, s, len(f.Messages))
			}
		}
	}
	if _, err := ScanClient([]byte(`[] []`), nil); !errors.Is(err, ErrParse) {
		t.Errorf("[] []: err = %v, want ErrParse", err)
	}
}

func TestScanClientNonObjects(t *testing.T) {
	frame := []byte(`[1,"x"]`)
	f, err := ScanClient(frame, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Batch || len(f.Messages) != 2 {
		t.Fatalf("%+v", f)
	}
	for k, want := range []string{`1`, `"x"`} {
		m := f.Messages[k]
		if !errors.Is(m.Invalid, ErrInvalid) || m.HasID() {
			t.Errorf("element %d: Invalid %v, id %q", k, m.Invalid, m.ID.In(frame))
		}
		if got := string(frame[m.Start:m.End]); got != want {
			t.Errorf("element %d = %q", k, got)
		}
	}
	// A top-level value that is neither object nor array is one invalid message.
	for _, s := range []string{`1`, ` "x" `, `null`, `true`, `false`, `-1.5e3`} {
		frame := []byte(s)
		f, err := ScanClient(frame, nil)
		if err != nil {
			t.Errorf("%q: err = %v", s, err)
			continue
		}
		if f.Batch || len(f.Messages) != 1 || !errors.Is(f.Messages[0].Invalid, ErrInvalid) || f.Messages[0].HasID() {
			t.Errorf("%q: %+v", s, f)
		}
		if m := f.Messages[0]; string(frame[m.Start:m.End]) != strings.TrimSpace(s) {
			t.Errorf("%q: extent [%d,%d)", s, m.Start, m.End)
		}
	}
}

// malformed are frames that are not JSON at all.
var malformed = []string{
	``, ` `, "\n\t",
	`{`, `[`, `{"jsonrpc":"2.0","id":1,"method":"m"`, `{"jsonrpc":"2.0","id":1,"method":"m`,
	`[{"jsonrpc":"2.0","id":1,"method":"m"}`, `[{"jsonrpc":"2.0","id":1,"method":"m"},`,
	`{"jsonrpc":"2.0","id":1,"method":"m"}}`, `{"jsonrpc":"2.0","id":1,"method":"m"} x`,
	`{"jsonrpc":"2.0","id":1,"method":"m"}{}`, `[1] 2`, `1 2`, `[1]]`,
	`{"a":}`, `{"a"}`, `{"a" 1}`, `{a:1}`, `{"a":1,}`, `{,"a":1}`, `{"a":1 "b":2}`, `{1:2}`,
	`[1,]`, `[,1]`, `[1 2]`, `[,]`, `{"a":[1,]}`, `{"a":[,]}`,
	`{"a":"\x"}`, `{"a":"\u12"}`, `{"a":"\u12g4"}`, `{"a":"\`, `{"a":"\u"}`, `{"a":"\'"}`, `{"\q":1}`,
	"{\"a\":\"\x00\"}", "{\"a\":\"\n\"}", "{\"a\":\"\t\"}", "{\"a\":\"\x1f\"}", "{\"a\x01\":1}",
	`{"id":01}`, `{"id":00}`, `{"id":-}`, `{"id":1.}`, `{"id":1e}`, `{"id":1e+}`, `{"id":.5}`, `{"id":+1}`,
	`{"id":-01}`, `{"id":0x10}`, `{"id":1.e3}`, `{"id":--1}`, `01`, `-`, `1.`, `1e`, `[01]`, `[-]`,
	`{"id":tru}`, `{"id":nul}`, `{"id":True}`, `{"id":NaN}`, `{"id":Infinity}`, `{"id":undefined}`,
	`{"id":nulll}`, `[truefalse]`, `nullx`,
	"\xef\xbb\xbf{}", "{\"a\":1}\x00", "{\v\"a\":1}", "{\u00a0\"a\":1}", `'x'`, `{"a":'x'}`,
	`]`, `}`, `[}`, `{]`, `[{]}`, `{"a":[}`,
}

func TestScanMalformed(t *testing.T) {
	for _, s := range malformed {
		for name, scan := range map[string]func([]byte, []Message) (Frame, error){"client": ScanClient, "upstream": ScanUpstream} {
			if _, err := scan([]byte(s), nil); !errors.Is(err, ErrParse) {
				t.Errorf("%s %q: err = %v, want ErrParse", name, s, err)
			}
		}
		if json.Valid([]byte(s)) {
			t.Errorf("%q is valid to encoding/json: bad test case", s)
		}
	}
}

func TestScanDepth(t *testing.T) {
	wrap := func(v string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"m","params":` + v + `}`
	}
	for _, tc := range []struct {
		name  string
		frame string
		depth int // total nesting
	}{
		{"array", nested(maxDepth), maxDepth},
		{"array too deep", nested(maxDepth + 1), maxDepth + 1},
		{"request", wrap(nested(maxDepth - 1)), maxDepth},
		{"request too deep", wrap(nested(maxDepth)), maxDepth + 1},
		{"batch", `[` + wrap(nested(maxDepth-2)) + `]`, maxDepth},
		{"batch too deep", `[` + wrap(nested(maxDepth-1)) + `]`, maxDepth + 1},
		{"upstream params", `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","result":` + nested(maxDepth-2) + `}}`, maxDepth},
		{"upstream params too deep", `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","result":` + nested(maxDepth-1) + `}}`, maxDepth + 1},
		{"upstream batch params", `[{"method":"eth_subscription","params":{"subscription":"0x1","result":` + nested(maxDepth-3) + `}}]`, maxDepth},
		{"upstream batch params too deep", `[{"method":"eth_subscription","params":{"subscription":"0x1","result":` + nested(maxDepth-2) + `}}]`, maxDepth + 1},
		{"object", strings.Repeat(`{"a":`, maxDepth) + `1` + strings.Repeat(`}`, maxDepth), maxDepth},
		{"object too deep", strings.Repeat(`{"a":`, maxDepth+1) + `1` + strings.Repeat(`}`, maxDepth+1), maxDepth + 1},
		{"far too deep", strings.Repeat(`[`, 100000), 100000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame := []byte(tc.frame)
			if tc.depth <= 10000 && nesting(frame) != tc.depth {
				t.Fatalf("bad test case: nesting %d, want %d", nesting(frame), tc.depth)
			}
			for name, scan := range map[string]func([]byte, []Message) (Frame, error){"client": ScanClient, "upstream": ScanUpstream} {
				_, err := scan(frame, nil)
				if tc.depth > maxDepth {
					if !errors.Is(err, ErrParse) {
						t.Errorf("%s: err = %v, want ErrParse", name, err)
					}
				} else if err != nil {
					t.Errorf("%s: err = %v", name, err)
				}
				// The node decodes with encoding/json: muxd must refuse
				// exactly what it refuses for depth, no more.
				if parsed, valid := !errors.Is(err, ErrParse), json.Valid(frame); parsed != valid {
					t.Errorf("%s: parsed %v, encoding/json valid %v", name, parsed, valid)
				}
			}
		})
	}
}

func TestScanClientInvalid(t *testing.T) {
	for _, tc := range []struct {
		name, frame string
		id          string // the id echoed, "" for none
	}{
		{"jsonrpc missing", `{"id":1,"method":"m"}`, `1`},
		{"jsonrpc 1.0", `{"jsonrpc":"1.0","id":1,"method":"m"}`, `1`},
		{"jsonrpc number", `{"jsonrpc":2.0,"id":1,"method":"m"}`, `1`},
		{"jsonrpc null", `{"jsonrpc":null,"id":"a","method":"m"}`, `"a"`},
		{"jsonrpc padded", `{"jsonrpc":" 2.0","id":1,"method":"m"}`, `1`},
		{"method missing", `{"jsonrpc":"2.0","id":1}`, `1`},
		{"method number", `{"jsonrpc":"2.0","id":1,"method":1}`, `1`},
		{"method null", `{"jsonrpc":"2.0","id":1,"method":null}`, `1`},
		{"method array", `{"jsonrpc":"2.0","id":1,"method":["m"]}`, `1`},
		{"method empty", `{"jsonrpc":"2.0","id":1,"method":""}`, `1`},
		{"method missing notification", `{"jsonrpc":"2.0","params":[]}`, ``},
		{"id object", `{"jsonrpc":"2.0","id":{"a":1},"method":"m"}`, ``},
		{"id empty object", `{"jsonrpc":"2.0","id":{},"method":"m"}`, ``},
		{"id array", `{"jsonrpc":"2.0","id":[1],"method":"m"}`, ``},
		{"id true", `{"jsonrpc":"2.0","id":true,"method":"m"}`, ``},
		{"id false", `{"jsonrpc":"2.0","id":false,"method":"m"}`, ``},
		{"id bool and bad version", `{"jsonrpc":"1.0","id":true,"method":"m"}`, ``},
		{"params string", `{"jsonrpc":"2.0","id":1,"method":"m","params":"x"}`, `1`},
		{"params number", `{"jsonrpc":"2.0","id":"n","method":"m","params":1}`, `"n"`},
		{"params bool", `{"jsonrpc":"2.0","id":1,"method":"m","params":true}`, `1`},
		{"duplicate id", `{"jsonrpc":"2.0","id":1,"method":"m","id":2}`, `2`},
		{"duplicate method", `{"jsonrpc":"2.0","id":1,"method":"m","method":"n"}`, `1`},
		{"duplicate jsonrpc", `{"jsonrpc":"2.0","id":1,"method":"m","jsonrpc":"2.0"}`, `1`},
		{"duplicate params", `{"jsonrpc":"2.0","id":1,"method":"m","params":[],"params":[1]}`, `1`},
		{"ID", `{"jsonrpc":"2.0","id":1,"method":"m","ID":2}`, `1`},
		{"ID alone", `{"jsonrpc":"2.0","ID":2,"method":"m"}`, ``},
		{"Id", `{"jsonrpc":"2.0","Id":2,"method":"m"}`, ``},
		{"Method", `{"jsonrpc":"2.0","id":1,"Method":"m"}`, `1`},
		{"Method and method", `{"jsonrpc":"2.0","id":1,"method":"m","Method":"eth_sendTransaction"}`, `1`},
		{"JSONRPC", `{"JSONRPC":"2.0","id":1,"method":"m"}`, `1`},
		{"Params", `{"jsonrpc":"2.0","id":1,"method":"m","Params":"x"}`, `1`},
		{"escaped id", `{"jsonrpc":"2.0","\u0069d":1,"method":"m"}`, ``},
		{"escaped id and id", `{"jsonrpc":"2.0","id":1,"method":"m","\u0069d":2}`, `1`},
		{"escaped upper id", `{"jsonrpc":"2.0","id":1,"method":"m","\u0049\u0044":2}`, `1`},
		{"escaped method", `{"jsonrpc":"2.0","id":1,"method":"m","m\u0065thod":"n"}`, `1`},
		{"escaped result", `{"jsonrpc":"2.0","id":1,"method":"m","r\u0065sult":1}`, `1`},
		{"long s params", `{"jsonrpc":"2.0","id":1,"method":"m","paramſ":"x"}`, `1`},
		{"long s jsonrpc", `{"jſonrpc":"1.0","jsonrpc":"2.0","id":1,"method":"m"}`, `1`},
		{"escaped long s", `{"jsonrpc":"2.0","id":1,"method":"m","param\u017f":"x"}`, `1`},
		{"result", `{"jsonrpc":"2.0","id":1,"method":"m","result":"0x1"}`, `1`},
		{"error", `{"jsonrpc":"2.0","id":1,"method":"m","error":{"code":1,"message":"x"}}`, `1`},
		{"response", `{"jsonrpc":"2.0","id":1,"result":"0x1"}`, `1`},
		{"empty object", `{}`, ``},
		{"empty object spaced", ` { } `, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame := []byte(tc.frame)
			f, err := ScanClient(frame, nil)
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			m := f.Messages[0]
			if m.Invalid == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(m.Invalid, ErrInvalid) {
				t.Fatalf("%v does not wrap ErrInvalid", m.Invalid)
			}
			if errors.Is(m.Invalid, ErrParse) {
				t.Fatalf("%v wraps ErrParse", m.Invalid)
			}
			if got := string(m.ID.In(frame)); got != tc.id {
				t.Errorf("id = %q, want %q", got, tc.id)
			}
			if !m.ID.Present() && m.ID != (Span{}) {
				t.Errorf("cleared id span %+v", m.ID)
			}
			checkSpans(t, frame, f)
			// The same request inside a batch gets the same verdict.
			bframe := []byte(`[` + req("0") + `,` + tc.frame + `]`)
			bf, err := ScanClient(bframe, nil)
			if err != nil {
				t.Fatalf("batch: err = %v", err)
			}
			bm := bf.Messages[1]
			if bm.Invalid == nil || string(bm.ID.In(bframe)) != tc.id || bf.Messages[0].Invalid != nil {
				t.Errorf("batch: %+v", bf.Messages)
			}
		})
	}
}

// gethMessage is how geth decodes a request (go-ethereum rpc.jsonrpcMessage).
type gethMessage struct {
	Version string          `json:"jsonrpc,omitempty"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
}

// checkGethAgrees checks that a request the scanner accepts means the same
// thing to encoding/json, as the node will read it: same id bytes, method
// and params.
func checkGethAgrees(t testing.TB, frame []byte, m *Message) {
	t.Helper()
	var g gethMessage
	if err := json.Unmarshal(frame[m.Start:m.End], &g); err != nil {
		t.Fatalf("%q: encoding/json: %v", frame, err)
	}
	if !bytes.Equal(g.ID, m.ID.In(frame)) {
		t.Fatalf("%q: node reads id %q, scanner %q", frame, g.ID, m.ID.In(frame))
	}
	if g.Version != "2.0" {
		t.Fatalf("%q: node reads jsonrpc %q", frame, g.Version)
	}
	if want := m.MethodName(frame); g.Method != want && !strings.ContainsRune(g.Method, '\uFFFD') {
		t.Fatalf("%q: node reads method %q, scanner %q", frame, g.Method, want)
	}
	if !bytes.Equal(g.Params, m.Params.In(frame)) {
		t.Fatalf("%q: node reads params %q, scanner %q", frame, g.Params, m.Params.In(frame))
	}
}

// TestScanClientMemberNames checks every kind of member name against
// encoding/json: a name that the node would read as a JSON-RPC member must
// make the request invalid, any other must be ignored.
func TestScanClientMemberNames(t *testing.T) {
	var keys []string
	for _, name := range []string{"jsonrpc", "id", "method", "params", "result", "error"} {
		keys = append(keys, name, strings.ToUpper(name), strings.ToUpper(name[:1])+name[1:],
			name+"x", "x"+name, name[1:], `\u00`+fmt.Sprintf("%02x", name[0])+name[1:],
			strings.ReplaceAll(name, "s", "ſ"), strings.ReplaceAll(name, "i", "İ"), strings.ReplaceAll(name, "i", "ı"),
			strings.ReplaceAll(name, "k", "K"), name+`\u0000`, name+" ")
	}
	keys = append(keys, "", "subscription", `\/`, `\ud800`, `\ud83d\ude00`, "K", `\u212a`)
	for _, key := range keys {
		var g gethMessage
		if err := json.Unmarshal([]byte(`{"`+key+`":"x"}`), &g); err != nil {
			t.Fatal(err)
		}
		member := g.Version != "" || g.Method != "" || g.ID != nil || g.Params != nil || g.Error != nil || g.Result != nil
		for _, frame := range []string{
			`{"jsonrpc":"2.0","id":1,"method":"m","params":[1],"` + key + `":"x"}`,
			`{"` + key + `":"x","jsonrpc":"2.0","id":1,"method":"m","params":[1]}`,
		} {
			b := []byte(frame)
			f, err := ScanClient(b, nil)
			if err != nil {
				t.Fatalf("%q: %v", frame, err)
			}
			if m := &f.Messages[0]; member != (m.Invalid != nil) {
				t.Errorf("key %q: node reads it as a member: %v; scanner says Invalid = %v", key, member, m.Invalid)
			}
		}
	}
}

func TestScanUpstream(t *testing.T) {
	type want struct {
		id, method, result, errv, sub string
	}
	hdr := `{"parentHash":"0x` + strings.Repeat("ab", 32) + `","number":"0x10","logsBloom":"0x00"}`
	for _, tc := range []struct {
		name, frame string
		want        want
	}{
		{"result", `{"jsonrpc":"2.0","id":5,"result":"0xabc"}`, want{id: `5`, result: `"0xabc"`}},
		{"object result", `{"jsonrpc":"2.0","id":"x","result":` + hdr + `}`, want{id: `"x"`, result: hdr}},
		{"null result", `{"jsonrpc":"2.0","id":1,"result":null}`, want{id: `1`, result: `null`}},
		{"error", `{"jsonrpc":"2.0","id":7,"error":{"code":-32000,"message":"nonce too low","data":{"x":[1]}}}`,
			want{id: `7`, errv: `{"code":-32000,"message":"nonce too low","data":{"x":[1]}}`}},
		{"id null", `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`,
			want{id: `null`, errv: `{"code":-32700,"message":"parse error"}`}},
		{"no jsonrpc", `{"id":1,"result":1}`, want{id: `1`, result: `1`}},
		{"empty object", `{}`, want{}},
		{"push", `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xcd0c3e8af590364c09d0fa6a1210faf5","result":` + hdr + `}}`,
			want{method: `"eth_subscription"`, sub: `"0xcd0c3e8af590364c09d0fa6a1210faf5"`}},
		{"push subscription after result", `{"jsonrpc":"2.0","method":"eth_subscription","params":{"result":` + hdr + `,"subscription":"0x1"}}`,
			want{method: `"eth_subscription"`, sub: `"0x1"`}},
		{"push nested decoys", `{"jsonrpc":"2.0","method":"eth_subscription","params":{"result":{"subscription":"0xbad","l":[{"subscription":"0xbad2"}]},"x":{"subscription":3},"subscription":"0xgood"}}`,
			want{method: `"eth_subscription"`, sub: `"0xgood"`}},
		{"push only nested", `{"jsonrpc":"2.0","method":"eth_subscription","params":{"result":{"subscription":"0xbad"}}}`,
			want{method: `"eth_subscription"`}},
		{"params array", `{"jsonrpc":"2.0","method":"eth_subscription","params":[{"subscription":"0xbad"}]}`,
			want{method: `"eth_subscription"`}},
		{"subscription outside params", `{"jsonrpc":"2.0","subscription":"0xbad","method":"eth_subscription","params":{"result":1}}`,
			want{method: `"eth_subscription"`}},
		{"empty params", `{"jsonrpc":"2.0","method":"eth_subscription","params":{}}`, want{method: `"eth_subscription"`}},
		{"repeats nested in the result", `{"jsonrpc":"2.0","id":1,"result":{"id":2,"id":3,"ID":4,"result":[{"error":1,"error":2}]}}`,
			want{id: `1`, result: `{"id":2,"id":3,"ID":4,"result":[{"error":1,"error":2}]}`}},
		{"repeats nested in a push's result", `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","result":{"subscription":"0x2","subscription":"0x3","Result":1}}}`,
			want{method: `"eth_subscription"`, sub: `"0x1"`}},
		{"other members twice", `{"jsonrpc":"2.0","id":1,"x":1,"x":2,"idx":3,"ids":4,"result":5}`, want{id: `1`, result: `5`}},
		{"push params with other members", `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","x":1,"x":2,"results":3,"result":4}}`,
			want{method: `"eth_subscription"`, sub: `"0x1"`}},
		{"whitespace", " { \"method\" : \"eth_subscription\" ,\n\"params\" : {\t\"result\" : [ ] , \"subscription\" :\r\n\"0x2\" } } ",
			want{method: `"eth_subscription"`, sub: `"0x2"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame := []byte(tc.frame)
			f, err := ScanUpstream(frame, nil)
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if f.Batch || len(f.Messages) != 1 {
				t.Fatalf("%+v", f)
			}
			m := f.Messages[0]
			if m.Invalid != nil {
				t.Errorf("Invalid = %v", m.Invalid)
			}
			got := want{string(m.ID.In(frame)), string(m.Method.In(frame)), string(m.Result.In(frame)), string(m.Error.In(frame)), string(m.Subscription.In(frame))}
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			checkSpans(t, frame, f)
		})
	}
}

// TestScanUpstreamAmbiguous: a message from the node that parsers may read
// more than one way is marked ambiguous, whatever else it holds, and only
// that message of an array: a JSON-RPC member twice (parsers differ on
// which one counts), a member named like one but for case or escapes (Go's
// encoding/json reads "ID" and "\u0069d" as the id), and in an object
// params, subscription or result twice or so named. The spans are still
// recorded, the last of a repeated member winning.
func TestScanUpstreamAmbiguous(t *testing.T) {
	for _, tc := range []struct {
		name, frame, reason string
	}{
		{"id twice", `{"jsonrpc":"2.0","id":1,"id":"b1","result":"0x1"}`, "duplicate id member"},
		{"id twice, apart", `{"jsonrpc":"2.0","id":1,"result":"0x1","id":2}`, "duplicate id member"},
		{"id twice, same value", `{"jsonrpc":"2.0","id":1,"id":1,"result":"0x1"}`, "duplicate id member"},
		{"result twice", `{"jsonrpc":"2.0","id":1,"result":"0x1","result":"0x2"}`, "duplicate result member"},
		{"error twice", `{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"a"},"error":{"code":2,"message":"b"}}`, "duplicate error member"},
		{"result and error twice", `{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"a"},"result":1,"error":null}`, "duplicate error member"},
		{"method twice", `{"jsonrpc":"2.0","method":"eth_subscription","method":"x","params":{"subscription":"0x1","result":1}}`, "duplicate method member"},
		{"params twice", `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xold"},"params":{"result":1}}`, "duplicate params member"},
		{"params twice, the second with the subscription", `{"jsonrpc":"2.0","method":"eth_subscription","params":[],"params":{"subscription":"0xnew"}}`, "duplicate params member"},
		{"jsonrpc twice", `{"jsonrpc":"2.0","jsonrpc":"1.0","id":1,"result":1}`, "duplicate jsonrpc member"},
		{"id in upper case", `{"jsonrpc":"2.0","id":1,"ID":2,"result":1}`, lookalikeMember},
		{"id in upper case alone", `{"jsonrpc":"2.0","ID":2,"result":1}`, lookalikeMember},
		{"id escaped", `{"jsonrpc":"2.0","id":1,"\u0069d":2,"result":1}`, lookalikeMember},
		{"id escaped alone", `{"jsonrpc":"2.0","i\u0064":2,"result":1}`, lookalikeMember},
		{"result in mixed case", `{"jsonrpc":"2.0","id":1,"result":1,"Result":2}`, lookalikeMember},
		{"error in upper case", `{"jsonrpc":"2.0","id":1,"result":1,"ERROR":{"code":1,"message":"m"}}`, lookalikeMember},
		{"params with a long s", `{"jsonrpc":"2.0","method":"eth_subscription","paramſ":{"subscription":"0x1","result":1}}`, lookalikeMember},
		{"method escaped", `{"jsonrpc":"2.0","\u006dethod":"eth_subscription","params":{"subscription":"0x1","result":1}}`, lookalikeMember},
		{"subscription twice", `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","subscription":"0x2","result":1}}`, "duplicate params.subscription"},
		{"subscription twice, apart", `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","result":1,"subscription":"0x2"}}`, "duplicate params.subscription"},
		{"push result twice", `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","result":1,"result":2}}`, "duplicate params.subscription or params.result"},
		{"subscription in mixed case", `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","Subscription":"0x2","result":1}}`, "differs from subscription or result"},
		{"subscription escaped", `{"jsonrpc":"2.0","method":"eth_subscription","params":{"\u0073ubscription":"0x2","result":1}}`, "differs from subscription or result"},
		{"push result with a long s", `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","reſult":1}}`, "differs from subscription or result"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, batch := range []bool{false, true} {
				frame := []byte(tc.frame)
				if batch {
					frame = []byte(`[{"jsonrpc":"2.0","id":8,"result":"0x8"},` + tc.frame + `,{"jsonrpc":"2.0","id":9,"result":"0x9"}]`)
				}
				f, err := ScanUpstream(frame, nil)
				if err != nil {
					t.Fatalf("%s: err = %v", frame, err)
				}
				checkSpans(t, frame, f)
				bad := 0
				if batch {
					bad = 1
					if len(f.Messages) != 3 || f.Messages[0].Invalid != nil || f.Messages[2].Invalid != nil {
						t.Fatalf("%s: the other elements are marked: %+v", frame, f.Messages)
					}
				}
				m := f.Messages[bad]
				if !errors.Is(m.Invalid, ErrAmbiguous) || !strings.Contains(m.Invalid.Error(), tc.reason) {
					t.Errorf("%s: Invalid = %v, want ErrAmbiguous: %s", frame, m.Invalid, tc.reason)
				}
				if string(frame[m.Start:m.End]) != tc.frame {
					t.Errorf("message %q, want %q", frame[m.Start:m.End], tc.frame)
				}
			}
		})
	}
	// What the last of a repeated member is recorded as.
	frame := []byte(`{"jsonrpc":"2.0","id":1,"id":"b1","result":"0x1","params":{"subscription":"0xa","subscription":"0xb"}}`)
	f, _ := ScanUpstream(frame, nil)
	if m := f.Messages[0]; string(m.ID.In(frame)) != `"b1"` || string(m.Subscription.In(frame)) != `"0xb"` {
		t.Errorf("id %s, subscription %s; want the last ones", m.ID.In(frame), m.Subscription.In(frame))
	}
}

func TestScanUpstreamBatch(t *testing.T) {
	elems := []string{
		`{"jsonrpc":"2.0","id":1,"result":"0x1"}`,
		`{"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"x"}}`,
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x9","result":{}}}`,
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"batch too large"}}`,
	}
	frame := []byte("[\n" + strings.Join(elems, ",\n") + "\n]")
	f, err := ScanUpstream(frame, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Batch || len(f.Messages) != len(elems) {
		t.Fatalf("%+v", f)
	}
	checkSpans(t, frame, f)
	ids := []string{`1`, `2`, ``, `null`}
	for k, m := range f.Messages {
		if got := string(frame[m.Start:m.End]); got != elems[k] {
			t.Errorf("element %d = %q", k, got)
		}
		if got := string(m.ID.In(frame)); got != ids[k] {
			t.Errorf("element %d id = %q", k, got)
		}
	}
	if m := f.Messages[2]; string(m.Subscription.In(frame)) != `"0x9"` {
		t.Errorf("subscription = %q", m.Subscription.In(frame))
	}
	if m := f.Messages[1]; !m.Error.Present() || m.Result.Present() {
		t.Errorf("error response: %+v", m)
	}
}

func TestScanUpstreamMalformed(t *testing.T) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"result":}`,
		`{"jsonrpc":"2.0","id":1,"result":"0x1"`,
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1",}}`,
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription"}}`,
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1"}`,
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1" "result":1}}`,
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{subscription:1}}`,
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{"a":1}x}`,
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{`,
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{"a"`,
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{"a":`,
		`[{"jsonrpc":"2.0","id":1,"result":1},]`,
		`{"jsonrpc":"2.0","id":1,"result":1} {"jsonrpc":"2.0","id":2,"result":2}`,
	} {
		if _, err := ScanUpstream([]byte(s), nil); !errors.Is(err, ErrParse) {
			t.Errorf("%q: err = %v, want ErrParse", s, err)
		}
		if json.Valid([]byte(s)) {
			t.Errorf("%q is valid to encoding/json: bad test case", s)
		}
	}
}

// syntaxCases is a table of inputs, valid and not, on which the scanner
// must agree with encoding/json about JSON syntax.
var syntaxCases = []string{
	`{}`, `[]`, `[[]]`, `[{}]`, `{"a":{}}`, `0`, `-0`, `-0.0e-0`, `1E9`, `1e+9`, `1.5`, `"x"`, `""`, `null`, `true`, `false`,
	`{"a":[1,2,{"b":"c"}],"d":null}`, ` [ 1 , 2 ] `, "\t{\n}\r", `"\u0000"`, `"\uD800"`, `"\uDFFF\uD800"`, `"\\\"\/\b\f\n\r\t"`,
	"\"\xff\"", "\"\xc3\x28\"", "\"\x7f\"", `"€"`, `{"":""}`, `[1,[2,[3,[4]]]]`, `123456789012345678901234567890`, `1.0000000000000000000001`,
	`{"a":1,"a":2}`, `[null,true,false]`,
	`{"jsonrpc":"2.0","id":1,"method":"m","params":["0x0",{"a":[]}]}`, `[{"jsonrpc":"2.0","id":1,"method":"m"},1,"x",[],{}]`,
	`{"a":"\u00e9"}`, `{"a":"\u00E9"}`,
	`-`, `--1`, `+1`, `.1`, `1.`, `1.e1`, `1e`, `1e+`, `1e-`, `01`, `-01`, `00`, `0x1`, `1_000`, `Infinity`, `NaN`,
	`tru`, `True`, `nul`, `nulll`, `falsey`, `"`, `"\"`, `"\u"`, `"\u123"`, `"\u123x"`, `"\a"`, `"\x41"`, `"\'"`, "\"\t\"", "\"\n\"",
	`{`, `}`, `[`, `]`, `{]`, `[}`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{,}`, `[,]`, `[1,]`, `[1 2]`, `{"a" "b"}`, `{'a':1}`, `{a:1}`,
	`[] []`, `{} {}`, `1 2`, `"a" "b"`, "\x00", "{}\x00", "\xef\xbb\xbf[]", "\v[]", "\f[]", "[]\f", `/* */[]`, `[]//`,
	strings.Repeat("[", 50) + strings.Repeat("]", 50), strings.Repeat("[", 50) + strings.Repeat("]", 49),
	strings.Repeat(`{"a":`, 30) + `1` + strings.Repeat(`}`, 30), strings.Repeat(`{"a":`, 30) + `1` + strings.Repeat(`}`, 29),
}

func TestScanAgreesWithEncodingJSON(t *testing.T) {
	cases := append([]string(nil), syntaxCases...)
	cases = append(cases, malformed...)
	for _, s := range cases {
		b := []byte(s)
		if nesting(b) > maxDepth {
			continue
		}
		valid := json.Valid(b)
		for name, scan := range map[string]func([]byte, []Message) (Frame, error){"client": ScanClient, "upstream": ScanUpstream} {
			f, err := scan(b, nil)
			got := err == nil || errors.Is(err, ErrEmptyBatch)
			if got != valid {
				t.Errorf("%s %q: scanner err %v, json.Valid %v", name, s, err, valid)
			}
			if err != nil && !errors.Is(err, ErrParse) && !errors.Is(err, ErrEmptyBatch) {
				t.Errorf("%s %q: unexpected error %v", name, s, err)
			}
			if err == nil {
				checkSpans(t, b, f)
			}
		}
	}
}

// naivePlainRun is plainRun one byte at a time: the definition it must match.
func naivePlainRun(b []byte, i int) int {
	for i < len(b) && b[i] != '"' && b[i] != '\\' && b[i] >= 0x20 {
		i++
	}
	return i
}

// TestPlainRun puts every byte value at every position of a 20-byte run of
// plain bytes (ASCII and UTF-8 high bytes, next to the stop values), from
// every start offset in the first word, and compares with the byte loop:
// the word-at-a-time test must neither miss a stop byte nor stop early.
func TestPlainRun(t *testing.T) {
	for _, fill := range []byte{'a', 0x20, 0x21, 0x23, 0x5b, 0x5d, 0x7f, 0x80, 0xa2, 0xdc, 0xff} {
		for c := 0; c < 256; c++ {
			for at := 0; at < 20; at++ {
				b := bytes.Repeat([]byte{fill}, 20)
				b[at] = byte(c)
				for start := 0; start < 9; start++ {
					if got, want := plainRun(b, start), naivePlainRun(b, start); got != want {
						t.Fatalf("fill %#02x, byte %#02x at %d, start %d: plainRun = %d, want %d", fill, c, at, start, got, want)
					}
				}
			}
		}
	}
	// runs shorter than a word, and the empty tail
	for n := 0; n < 8; n++ {
		b := bytes.Repeat([]byte("0"), n)
		if got := plainRun(b, 0); got != n {
			t.Errorf("plain run of %d: plainRun = %d", n, got)
		}
	}
}

// TestScanPlainMembers: member names matched whole with their colon
// (plainMember) and the "2.0" version matched whole are read exactly as the
// same message written with spaces, which goes the general way.
func TestScanPlainMembers(t *testing.T) {
	// Spaces before a colon send every key the general way; spaces after
	// it keep the plain match and test the skip past them.
	layouts := []*strings.Replacer{
		strings.NewReplacer(`":`, `" :`, `,"`, ` , "`, `{"`, `{ "`),
		strings.NewReplacer(`":`, `": `, `,"`, `, "`),
	}
	cases := []struct {
		name, plain string
		upstream    bool
	}{
		{"request", `{"jsonrpc":"2.0","id":7,"method":"eth_call","params":[{"to":"0x1"},"latest"]}`, false},
		{"notification", `{"jsonrpc":"2.0","method":"eth_call","params":[]}`, false},
		{"members reordered", `{"params":[],"method":"m","id":"a","jsonrpc":"2.0"}`, false},
		{"duplicate id", `{"jsonrpc":"2.0","id":1,"id":2,"method":"m","params":[]}`, false},
		{"version not 2.0", `{"jsonrpc":"2.0x","id":1,"method":"m","params":[]}`, false},
		{"version 2", `{"jsonrpc":"2","id":1,"method":"m","params":[]}`, false},
		{"names with a prefix of a member", `{"jsonrpc":"2.0","idx":1,"id":1,"methods":1,"method":"m","params":[]}`, false},
		{"result", `{"jsonrpc":"2.0","id":9,"result":"0x00"}`, true},
		{"error", `{"jsonrpc":"2.0","id":9,"error":{"code":-32000,"message":"x"}}`, true},
		{"push", `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xab","result":{"number":"0x1"}}}`, true},
	}
	scans := map[bool]func([]byte, []Message) (Frame, error){false: ScanClient, true: ScanUpstream}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			scan := scans[tc.upstream]
			pb := []byte(tc.plain)
			pf, perr := scan(pb, nil)
			if perr != nil {
				t.Fatal(perr)
			}
			p := &pf.Messages[0]
			for _, layout := range layouts {
				sb := []byte(layout.Replace(tc.plain))
				sf, serr := scan(sb, nil)
				if serr != nil {
					t.Fatalf("spaced %q: %v", sb, serr)
				}
				s := &sf.Messages[0]
				for _, sp := range [][2]Span{{p.Version, s.Version}, {p.ID, s.ID}, {p.Method, s.Method}, {p.Params, s.Params}, {p.Result, s.Result}, {p.Error, s.Error}, {p.Subscription, s.Subscription}} {
					if !bytes.Equal(sp[0].In(pb), bytes.ReplaceAll(sp[1].In(sb), []byte(" "), nil)) {
						t.Errorf("plain %q, spaced %q", sp[0].In(pb), sp[1].In(sb))
					}
				}
				if (p.Invalid == nil) != (s.Invalid == nil) || p.Ignored != s.Ignored {
					t.Errorf("plain: %v %v; spaced %q: %v %v", p.Invalid, p.Ignored, sb, s.Invalid, s.Ignored)
				}
			}
		})
	}
	// Cut anywhere, a plain message is a parse error, never a read past
	// its end (the cut has no capacity beyond it, so such a read panics).
	for _, tc := range cases {
		for n := range len(tc.plain) {
			b := []byte(tc.plain)[:n:n]
			if _, err := scans[tc.upstream](b, nil); !errors.Is(err, ErrParse) {
				t.Errorf("%q: %v, want ErrParse", b, err)
			}
		}
	}
}
