package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// fuzzSeeds covers the cases of DESIGN.md section 1 and the scanner tables.
func fuzzSeeds() []string {
	seeds := []string{
		req(`1`), req(`"1"`), req(`1.0`), req(`18446744073709551616`), req(`"a\"b"`), req(`null`), req(`-5`), req(`1e3`),
		`{"jsonrpc":"2.0","method":"eth_subscribe","params":["newHeads"]}`,
		`[` + req(`1`) + `,{"jsonrpc":"2.0","method":"n"},5,` + req(`"x"`) + `]`,
		`[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","method":"b"}]`,
		`[]`, `[1,"x"]`, `[` + req(`1`) + `,` + req(`1`) + `]`,
		`{"jsonrpc":"2.0","id":1,"method":"m","ID":2}`, `{"jsonrpc":"2.0","\u0069d":1,"method":"m"}`,
		`{"jsonrpc":"2.0","id":1,"method":"m","paramſ":"x"}`, `{"jsonrpc":"2.0","id":1,"method":"m","\u0000":1}`,
		`{"jsonrpc":"2.0","id":1,"method":"eth\u005fcall","params":[{"to":"0x1"},"latest"]}`,
		`{"jsonrpc":"2.0","id":1,"method":"a\/b"}`, `{"jsonrpc":"2.0","id":1,"method":"\ud83d\ude00"}`,
		`{"jsonrpc":"2.0","id":1,"method":"m","result":1}`, `{"jsonrpc":"2.0","id":{},"method":"m"}`,
		`{"jsonrpc":"2.0","id":1,"result":"0x1"}`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"x"}}`,
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","result":{"subscription":"0x2"}}}`,
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{"result":[1,{"a":"b"}],"subscription":"0x1"}}`,
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1"},"params":[]}`,
		`[{"jsonrpc":"2.0","id":1,"result":1},{"jsonrpc":"2.0","id":2,"error":{"code":1,"message":"m"}}]`,
		newHeadsPush,
		" \t\n{ \"jsonrpc\" : \"2.0\" , \"id\" : 7 , \"method\" : \"m\" , \"params\" : [ ] } \r\n",
		nested(maxDepth), nested(maxDepth + 1), `[` + req(`1`)[:len(req(`1`))-1] + `,"params":` + nested(maxDepth-2) + `}]`,
	}
	seeds = append(seeds, malformed...)
	seeds = append(seeds, syntaxCases...)
	return seeds
}

// addSeeds gives a fuzz target the seed corpus.
func addSeeds(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add([]byte(s))
	}
}

// scanChecked runs scan on frame and checks what holds for both scanners:
// the frame is left as it was, the syntax verdict agrees with
// encoding/json, and every span lies inside the frame. ok is false when the
// frame was rejected.
func scanChecked(t *testing.T, frame []byte, scan func([]byte, []Message) (Frame, error)) (fr Frame, ok bool) {
	orig := bytes.Clone(frame)
	fr, err := scan(frame, nil)
	if !bytes.Equal(orig, frame) {
		t.Fatal("scanner modified the frame")
	}
	checkSyntaxVerdict(t, frame, err)
	if err != nil {
		return Frame{}, false
	}
	checkSpans(t, frame, fr)
	return fr, true
}

func FuzzScanClient(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, frame []byte) {
		fr, ok := scanChecked(t, frame, ScanClient)
		if !ok {
			return
		}
		for k := range fr.Messages {
			m := &fr.Messages[k]
			if m.Invalid != nil {
				if !errors.Is(m.Invalid, ErrInvalid) {
					t.Fatalf("%q: %v does not wrap ErrInvalid", frame, m.Invalid)
				}
				if m.ID.Present() && strings.IndexByte("\"-0123456789n", frame[m.ID.Off]) < 0 {
					t.Fatalf("%q: invalid id %q echoed", frame, m.ID.In(frame))
				}
				continue
			}
			if m.Ignored {
				// Neither answered nor forwarded: what the node would
				// make of it does not matter, as long as it has no id.
				if m.HasID() {
					t.Fatalf("%q: a message with an id ignored", frame)
				}
				continue
			}
			checkGethAgrees(t, frame, m)
			if !m.HasID() {
				continue
			}
			el, id := Element(frame, m)
			out := AppendSpliced(make([]byte, 0, len(el)), el, id, []byte(`7`))
			checkSameButID(t, el, out, `7`)
			// The spliced request scans as the same valid request.
			sf, err := ScanClient(out, nil)
			if err != nil || len(sf.Messages) != 1 || sf.Messages[0].Invalid != nil || string(sf.Messages[0].ID.In(out)) != `7` {
				t.Fatalf("spliced %q: %v %+v", out, err, sf)
			}
		}
	})
}

func FuzzScanUpstream(f *testing.F) {
	addSeeds(f)
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"id":"b1","result":"0x1"}`,
		`[{"jsonrpc":"2.0","id":1,"result":1},{"jsonrpc":"2.0","id":2,"id":1,"result":2}]`,
		`{"jsonrpc":"2.0","id":1,"result":1,"Result":2}`, `{"jsonrpc":"2.0","i\u0064":1,"result":1}`,
		`{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"},"error":null}`,
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","subscription":"0x2","result":1}}`,
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{"Subscription":"0x1","result":1,"re\u0073ult":2}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		fr, ok := scanChecked(t, frame, ScanUpstream)
		if !ok {
			return
		}
		for k := range fr.Messages {
			m := &fr.Messages[k]
			el := frame[m.Start:m.End]
			if el[0] != '{' {
				if !errors.Is(m.Invalid, ErrInvalid) {
					t.Fatalf("%q: non-object element is not invalid: %v", frame, m.Invalid)
				}
				continue
			}
			// encoding/json decodes escapes in member names and, into a
			// struct, matches them without regard to case: the scanner
			// must mark exactly the messages such a decoder may read
			// otherwise than one that takes names as written.
			obj, twoWays := readTwoWays(t, el, "jsonrpc", "id", "method", "params", "result", "error")
			var params map[string]json.RawMessage
			if p := obj["params"]; !twoWays && len(p) > 0 && p[0] == '{' {
				params, twoWays = readTwoWays(t, p, "subscription", "result")
			}
			if twoWays {
				if !errors.Is(m.Invalid, ErrAmbiguous) {
					t.Fatalf("%q: ambiguous message not marked: %v", el, m.Invalid)
				}
				continue
			}
			if m.Invalid != nil {
				t.Fatalf("%q: upstream object marked invalid: %v", el, m.Invalid)
			}
			// Names are then what they look like, each at most once, and
			// encoding/json must find the same members the scanner did.
			for name, sp := range map[string]Span{"jsonrpc": m.Version, "id": m.ID, "method": m.Method, "params": m.Params, "result": m.Result, "error": m.Error} {
				if !bytes.Equal(obj[name], sp.In(frame)) {
					t.Fatalf("%q: %s is %q, scanner %q", el, name, obj[name], sp.In(frame))
				}
			}
			if sub := params["subscription"]; !bytes.Equal(sub, m.Subscription.In(frame)) {
				t.Fatalf("%q: params.subscription is %q, scanner %q", el, sub, m.Subscription.In(frame))
			}
		}
	})
}

// readTwoWays decodes the JSON object obj into its members by name (the
// last of a name winning) and reports whether a decoder may read one of
// names in it otherwise than as written once: a name twice, or a member
// that names it only once escapes are decoded or case folded.
func readTwoWays(t *testing.T, obj []byte, names ...string) (map[string]json.RawMessage, bool) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(obj))
	if _, err := dec.Token(); err != nil {
		t.Fatalf("%q: %v", obj, err)
	}
	members := map[string]json.RawMessage{}
	seen := map[string]bool{}
	twoWays := false
	for dec.More() {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%q: %v", obj, err)
		}
		key := tok.(string)
		raw := bytes.TrimLeft(obj[start:dec.InputOffset()], " \t\r\n,")
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%q: %v", obj, err)
		}
		members[key] = v
		for _, n := range names {
			if strings.EqualFold(key, n) {
				twoWays = twoWays || seen[n] || string(raw) != `"`+n+`"`
				seen[n] = true
			}
		}
	}
	return members, twoWays
}

// checkSyntaxVerdict checks the scanner's verdict on JSON syntax against
// encoding/json.
func checkSyntaxVerdict(t *testing.T, frame []byte, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, ErrParse) && !errors.Is(err, ErrEmptyBatch) {
		t.Fatalf("%q: unexpected error %v", frame, err)
	}
	valid := json.Valid(frame)
	if err == nil || errors.Is(err, ErrEmptyBatch) {
		if !valid {
			t.Fatalf("%q: scanner accepts what is not JSON", frame)
		}
		if nesting(frame) > maxDepth {
			t.Fatalf("%q: accepted nesting %d > %d", frame, nesting(frame), maxDepth)
		}
	} else if valid && nesting(frame) <= maxDepth {
		t.Fatalf("%q: valid JSON rejected: %v", frame, err)
	}
}

// FuzzPlainRun: the word-at-a-time string scan stops exactly where the byte
// loop does, for any bytes and any start.
func FuzzPlainRun(f *testing.F) {
	f.Add([]byte(`0x70a08231000000000000000000000000f39fd6e5"`), 0)
	f.Add([]byte("abc\\\"def\x01"), 2)
	f.Add([]byte("\xff\xfe\x80\x7f\x20\x1f"), 0)
	f.Fuzz(func(t *testing.T, b []byte, start int) {
		if start < 0 || start > len(b) {
			return
		}
		if got, want := plainRun(b, start), naivePlainRun(b, start); got != want {
			t.Fatalf("plainRun(%q, %d) = %d, want %d", b, start, got, want)
		}
	})
}
