package router

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// bigResult is a 2 KB result with escapes, nesting and numbers, to show
// that splicing leaves it alone.
var bigResult = func() string {
	var sb strings.Builder
	sb.WriteString(`{"logs":[`)
	for i := 0; sb.Len() < 2048; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"address":"0x5fbdb2315678afecb367f032d93f642f64180aa3","data":"0x` + strings.Repeat("0f", 32) +
			`","id":1,"note":"a\"b\\c\u00e9","n":-1.5e-3}`)
	}
	sb.WriteString(`],"id":"inner"}`)
	return sb.String()
}()

func TestAppendSplicedResponse(t *testing.T) {
	frame := []byte(`{"jsonrpc":"2.0", "id" : 42 ,"result":` + bigResult + `}`)
	f, err := ScanUpstream(frame, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := f.Messages[0]
	if string(m.ID.In(frame)) != `42` || string(m.Result.In(frame)) != bigResult {
		t.Fatalf("id %q", m.ID.In(frame))
	}
	for _, id := range []string{`"a\"b"`, `18446744073709551616`, `1.0`, `null`, `"1"`, `7`} {
		dst := []byte("prefix:")
		out := AppendSpliced(dst, frame, m.ID, []byte(id))
		want := `prefix:{"jsonrpc":"2.0", "id" : ` + id + ` ,"result":` + bigResult + `}`
		if string(out) != want {
			t.Fatalf("id %s: got %q", id, out)
		}
		if !json.Valid(out[len("prefix:"):]) {
			t.Fatalf("id %s: not valid JSON", id)
		}
		var g gethMessage
		if err := json.Unmarshal(out[len("prefix:"):], &g); err != nil || string(g.ID) != id || string(g.Result) != bigResult {
			t.Fatalf("id %s: decoded %v %q", id, err, g.ID)
		}
	}
	// The input is not modified.
	if !bytes.Equal(frame, []byte(`{"jsonrpc":"2.0", "id" : 42 ,"result":`+bigResult+`}`)) {
		t.Fatal("frame modified")
	}
}

func TestAppendSplicedEdges(t *testing.T) {
	msg := []byte(`abcdef`)
	for _, tc := range []struct {
		at   Span
		repl string
		want string
	}{
		{Span{0, 1}, "X", "Xbcdef"},
		{Span{5, 1}, "XY", "abcdeXY"},
		{Span{2, 2}, "", "abef"},
		{Span{3, 0}, "--", "abc--def"},
		{Span{0, 6}, "z", "z"},
	} {
		if got := string(AppendSpliced(nil, msg, tc.at, []byte(tc.repl))); got != tc.want {
			t.Errorf("%+v %q: got %q, want %q", tc.at, tc.repl, got, tc.want)
		}
	}
	// Reusing a buffer with capacity does not allocate a new one.
	buf := make([]byte, 0, 64)
	out := AppendSpliced(buf, msg, Span{1, 1}, []byte("B"))
	if &out[0] != &buf[:1][0] {
		t.Error("buffer not reused")
	}
}

func TestElementSplice(t *testing.T) {
	elems := []string{
		`{"jsonrpc":"2.0","id":1,"method":"a"}`,
		`{"jsonrpc":"2.0","method":"notify"}`,
		`{ "jsonrpc" : "2.0" , "id" : "third" , "method" : "c" , "params" : [ "id" , 3 ] }`,
		`{"jsonrpc":"2.0","id":4,"method":"d"}`,
	}
	frame := []byte("[ " + strings.Join(elems, " , ") + " ]")
	f, err := ScanClient(frame, nil)
	if err != nil {
		t.Fatal(err)
	}
	el, id := Element(frame, &f.Messages[2])
	if string(el) != elems[2] {
		t.Fatalf("element = %q", el)
	}
	if string(id.In(el)) != `"third"` {
		t.Fatalf("rebased id = %q", id.In(el))
	}
	out := AppendSpliced(nil, el, id, AppendUpstreamID(nil, 99))
	if want := `{ "jsonrpc" : "2.0" , "id" : 99 , "method" : "c" , "params" : [ "id" , 3 ] }`; string(out) != want {
		t.Fatalf("spliced = %q", out)
	}
	// Every element with an id splices to valid JSON with just the id changed.
	for k := range f.Messages {
		m := &f.Messages[k]
		el, id := Element(frame, m)
		if !m.HasID() {
			if id != (Span{}) {
				t.Errorf("element %d without id: span %+v", k, id)
			}
			continue
		}
		out := AppendSpliced(nil, el, id, []byte(`7`))
		checkSameButID(t, el, out, `7`)
	}
}

// checkSameButID checks that out decodes to orig with id replaced by id.
func checkSameButID(t testing.TB, orig, out []byte, id string) {
	t.Helper()
	if !json.Valid(out) {
		t.Fatalf("spliced %q is not valid JSON", out)
	}
	a, b := decodeMap(t, orig), decodeMap(t, out)
	a["id"] = json.Number(id)
	if !jsonEqual(a, b) {
		t.Fatalf("spliced %q\n  decodes to %v\n  want      %v", out, b, a)
	}
}

func decodeMap(t testing.TB, b []byte) map[string]any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	return m
}

func jsonEqual(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

func TestParseUpstreamID(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true},
		{"1", 1, true},
		{"42", 42, true},
		{"18446744073709551615", 1<<64 - 1, true},
		{"18446744073709551614", 1<<64 - 2, true},
		{"9999999999999999999", 9999999999999999999, true},
		{"18446744073709551616", 0, false},
		{"18446744073709551620", 0, false},
		{"28446744073709551615", 0, false},
		{"99999999999999999999", 0, false},
		{"184467440737095516150", 0, false},
		{"01", 0, false},
		{"00", 0, false},
		{"-1", 0, false},
		{"-0", 0, false},
		{"+1", 0, false},
		{`"1"`, 0, false},
		{"1.0", 0, false},
		{"1e3", 0, false},
		{"null", 0, false},
		{"", 0, false},
		{" 1", 0, false},
		{"1 ", 0, false},
		{"0x1", 0, false},
	} {
		got, ok := ParseUpstreamID([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseUpstreamID(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	// Round trip with AppendUpstreamID.
	for _, n := range []uint64{0, 1, 9, 10, 1 << 32, 1<<64 - 1} {
		if got, ok := ParseUpstreamID(AppendUpstreamID(nil, n)); !ok || got != n {
			t.Errorf("round trip %d: %d %v", n, got, ok)
		}
	}
}

func TestIsNull(t *testing.T) {
	if !IsNull([]byte("null")) || IsNull([]byte("nul")) || IsNull([]byte(`"null"`)) || IsNull(nil) {
		t.Fatal("IsNull")
	}
}

func TestAppendErrorResponse(t *testing.T) {
	type wire struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  json.RawMessage `json:"result"`
		Error   *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Data    *struct {
				Reason string `json:"reason"`
			} `json:"data"`
		} `json:"error"`
	}
	errs := []RPCError{
		ErrorParse, ErrorInvalidRequest, ErrorEmptyBatch, MethodDenied("admin_peers"), ErrorNoNotifications,
		ErrorTimeout, ErrorUnavailable, ErrorLimit,
		ErrorUnavailable.Because("connection lost"),
		{Code: -1, Message: "quote \" backslash \\ ctl \x01\n tab\t é", Reason: "why \"\x7f\x00"},
	}
	for _, e := range errs {
		for _, id := range []string{"", `1`, `"1"`, `1.0`, `18446744073709551616`, `"a\"b"`, `null`, `-5`, `1e3`, `"\u00e9"`} {
			var idb []byte
			if id != "" {
				idb = []byte(id)
			}
			for name, out := range map[string][]byte{
				"append": AppendErrorResponse([]byte("x"), idb, e)[1:],
				"new":    ErrorResponse(idb, e),
			} {
				var w wire
				if err := json.Unmarshal(out, &w); err != nil || !json.Valid(out) {
					t.Fatalf("%s %q: %v", name, out, err)
				}
				wantID := id
				if id == "" {
					wantID = "null"
				}
				if string(w.ID) != wantID {
					t.Errorf("%s %q: id %q, want %q", name, out, w.ID, wantID)
				}
				if w.JSONRPC != "2.0" || w.Result != nil || w.Error == nil {
					t.Fatalf("%s %q: bad shape", name, out)
				}
				if w.Error.Code != e.Code || w.Error.Message != e.Message {
					t.Errorf("%s %q: code %d message %q", name, out, w.Error.Code, w.Error.Message)
				}
				switch {
				case e.Reason == "" && w.Error.Data != nil:
					t.Errorf("%s %q: unexpected data", name, out)
				case e.Reason != "" && (w.Error.Data == nil || w.Error.Data.Reason != e.Reason):
					t.Errorf("%s %q: reason lost", name, out)
				}
				// The id bytes are echoed exactly.
				if !bytes.Contains(out, []byte(`"id":`+wantID+`,`)) {
					t.Errorf("%s %q: id bytes not echoed", name, out)
				}
			}
		}
	}
	if got := string(ErrorResponse(nil, ErrorEmptyBatch)); got != `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"empty batch"}}` {
		t.Errorf("empty batch = %s", got)
	}
	if got := string(ErrorResponse([]byte(`"x"`), ErrorUnavailable.Because("connection lost"))); got != `{"jsonrpc":"2.0","id":"x","error":{"code":-32002,"message":"upstream unavailable","data":{"reason":"connection lost"}}}` {
		t.Errorf("unavailable = %s", got)
	}
}

func TestRPCErrorCodes(t *testing.T) {
	for _, tc := range []struct {
		e       RPCError
		code    int
		message string
	}{
		{ErrorParse, -32700, "parse error"},
		{ErrorInvalidRequest, -32600, "invalid request"},
		{ErrorEmptyBatch, -32600, "empty batch"},
		{ErrorNoNotifications, -32601, "notifications not supported"},
		{ErrorTimeout, -32002, "request timed out"},
		{ErrorUnavailable, -32002, "upstream unavailable"},
		{ErrorLimit, -32005, "limit exceeded"},
	} {
		if tc.e.Code != tc.code || tc.e.Message != tc.message || tc.e.Reason != "" {
			t.Errorf("%+v, want %d %q", tc.e, tc.code, tc.message)
		}
	}
	// A denied method gets geth's words for a method it does not serve
	// (clients classify -32601 by them), the method as decoded from the
	// request, escaped as JSON; the reason says muxd refused it.
	for method, want := range map[string]string{
		"admin_peers":   `{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"the method admin_peers does not exist/is not available","data":{"reason":"denied"}}}`,
		"admin_\"x\"\n": `{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"the method admin_\"x\"\u000a does not exist/is not available","data":{"reason":"denied"}}}`,
	} {
		if got := string(ErrorResponse([]byte("1"), MethodDenied(method))); got != want {
			t.Errorf("MethodDenied(%q):\n got %s\nwant %s", method, got, want)
		}
	}
	e := ErrorTimeout.Because("deadline")
	if e.Error() != "request timed out (deadline)" || ErrorTimeout.Error() != "request timed out" || ErrorTimeout.Reason != "" {
		t.Errorf("Because/Error: %q", e.Error())
	}
}

func TestAppendResultResponse(t *testing.T) {
	for _, id := range []string{"", `1`, `"a\"b"`} {
		out := AppendResultResponse(nil, []byte(id), []byte(bigResult))
		var g gethMessage
		if err := json.Unmarshal(out, &g); err != nil {
			t.Fatalf("%q: %v", out, err)
		}
		want := id
		if id == "" {
			want = "null"
		}
		if string(g.ID) != want || string(g.Result) != bigResult || g.Version != "2.0" {
			t.Errorf("%q: id %q", out[:40], g.ID)
		}
	}
}
