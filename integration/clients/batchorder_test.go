package clients_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// The same ordering as TestEthers5 and TestWeb3js4, without Node: batches
// as raw bytes over WebSocket, HTTP and IPC, each answer array checked
// element by element against the request.

// batchElem is one element of a batch and what its answer must be.
type batchElem struct {
	raw  string // the element, as sent
	id   string // its id as sent; "" for a notification, which gets no answer
	kind string // what answers it; see checkElem
}

// batchRow is one batch. muxdOnly: geth answers it otherwise, by design
// (see DESIGN §1), so there is no baseline.
type batchRow struct {
	name     string
	elems    []batchElem
	muxdOnly bool
}

// call is a request element with id (the id's JSON bytes), or a
// notification when id is "".
func call(id, method, params string) string {
	if id == "" {
		return fmt.Sprintf(`{"jsonrpc":"2.0","method":%q,"params":%s}`, method, params)
	}
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":%q,"params":%s}`, id, method, params)
}

// Element constructors by kind, grouped by who answers them through muxd:
// the node (blockNumber, genesis), muxd from its cache once the method has
// been called (chainID, netVersion), muxd itself (denied, invalid).
var (
	blockNumber = func(id string) batchElem { return batchElem{call(id, "eth_blockNumber", "[]"), id, "blockNumber"} }
	chainID     = func(id string) batchElem { return batchElem{call(id, "eth_chainId", "[]"), id, "chainID"} }
	netVersion  = func(id string) batchElem { return batchElem{call(id, "net_version", "[]"), id, "netVersion"} }
	genesis     = func(id string) batchElem {
		return batchElem{call(id, "eth_getBlockByNumber", `["0x0",false]`), id, "genesis"}
	}
	denied = func(id string) batchElem { return batchElem{call(id, "admin_peers", "[]"), id, "denied"} }
	// noMethod has an id and no method: -32600 with that id, from geth
	// and from muxd.
	noMethod = func(id string) batchElem { return batchElem{`{"jsonrpc":"2.0","id":` + id + `}`, id, "invalid"} }
)

var batchRows = []batchRow{
	// The reproduction: muxd answered 2, 1.
	{name: "node then cached", elems: []batchElem{blockNumber("1"), chainID("2")}},
	{name: "cached then node", elems: []batchElem{chainID("1"), blockNumber("2")}},
	{name: "node then denied then invalid", elems: []batchElem{blockNumber("1"), denied("2"), noMethod("3")}},
	{name: "every kind with notifications", elems: []batchElem{
		blockNumber("1"),
		{call("", "eth_blockNumber", "[]"), "", "notification"},
		chainID(`"two"`),
		denied("3.0"),
		genesis("4"),
		noMethod("9"),
		{call("", "admin_peers", "[]"), "", "notification"},
		netVersion("18446744073709551616"),
		{`{"jsonrpc":"2.0","id":"a\"b","method":"eth_blockNumber"}`, `"a\"b"`, "blockNumber"},
		chainID("null"),
		blockNumber("11"),
	}},
	{name: "answered by muxd only", elems: []batchElem{denied("1"), chainID("2"), noMethod("3"), netVersion("4")}},
	// Non-object elements: geth rejects the whole batch; muxd answers each
	// with -32600 and id null and serves the rest (DESIGN §1).
	{name: "non-object elements", muxdOnly: true, elems: []batchElem{
		{`1`, "null", "invalid"}, blockNumber("5"), {`"x"`, "null", "invalid"}, chainID("6"),
	}},
}

// stableKinds are answers that never change: byte for byte what geth
// answers to the same batch.
var stableKinds = map[string]bool{"chainID": true, "netVersion": true, "genesis": true}

func (r batchRow) batch() []byte {
	parts := make([]string, len(r.elems))
	for i, e := range r.elems {
		parts[i] = e.raw
	}
	return []byte("[" + strings.Join(parts, ",") + "]")
}

// answered is the elements that get an answer, in request order.
func (r batchRow) answered() []batchElem {
	var out []batchElem
	for _, e := range r.elems {
		if e.id != "" {
			out = append(out, e)
		}
	}
	return out
}

// exchanger sends one message and returns the one answer to it.
type exchanger func(t *testing.T, msg []byte) []byte

// TestBatchOrderRaw sends every batchRow to geth (WebSocket and HTTP: the
// baseline) and through muxd over WebSocket, HTTP and IPC, after
// eth_chainId and net_version have been called once on the connection, so
// muxd answers them from its cache. Every answer array must hold one answer
// per element with an id, in request order, each id byte-identical to the
// request's, notifications absent; the answers that never change must be
// byte for byte geth's.
func TestBatchOrderRaw(t *testing.T) {
	h := newHarness(t)
	targets := []struct {
		name string
		geth bool
		dial func(t *testing.T) exchanger
	}{
		{"geth/ws", true, func(t *testing.T) exchanger { return wsExchanger(t, h.node.WSURL) }},
		{"geth/http", true, func(t *testing.T) exchanger { return httpExchanger(h.node.HTTPURL) }},
		{"muxd/ws", false, func(t *testing.T) exchanger { return wsExchanger(t, h.WSURL) }},
		{"muxd/http", false, func(t *testing.T) exchanger { return httpExchanger(h.HTTPURL) }},
		{"muxd/ipc", false, func(t *testing.T) exchanger { return ipcExchanger(t, h.IPCPath) }},
	}
	// gethAnswers holds geth's answer elements by row name, for the
	// byte-for-byte comparison of the stable ones (from geth/ws, the first
	// target).
	gethAnswers := map[string][]json.RawMessage{}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			ex := tg.dial(t)
			// Put eth_chainId and net_version in muxd's cache (for geth,
			// the same calls, to keep the two runs alike).
			for _, m := range []string{"eth_chainId", "net_version"} {
				ans := ex(t, []byte(call("0", m, "[]")))
				if !bytes.Contains(ans, []byte(`"result"`)) {
					t.Fatalf("%s: %s", m, ans)
				}
			}
			for _, row := range batchRows {
				if tg.geth && row.muxdOnly {
					continue
				}
				t.Run(row.name, func(t *testing.T) {
					// A few times: an order that depended on timing would
					// show in one of them.
					for try := range 3 {
						got := checkBatch(t, row, ex(t, row.batch()))
						if got == nil {
							return // already reported
						}
						if tg.geth {
							if _, ok := gethAnswers[row.name]; !ok {
								gethAnswers[row.name] = got
							}
							continue
						}
						if want, ok := gethAnswers[row.name]; ok {
							for i, e := range row.answered() {
								if stableKinds[e.kind] && !bytes.Equal(got[i], want[i]) {
									t.Errorf("try %d: answer %d (%s) is not geth's:\nmuxd %s\ngeth %s", try, i, e.raw, got[i], want[i])
								}
							}
						}
					}
				})
			}
		})
	}
}

// rawAnswer is the part of one answer element the checks read; the id is
// kept as the bytes it was written with.
type rawAnswer struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

var quantity = regexp.MustCompile(`^"0x(0|[1-9a-f][0-9a-f]*)"$`)

// checkBatch checks the answer to row's batch and returns its elements,
// or nil after reporting why they are not right.
func checkBatch(t *testing.T, row batchRow, answer []byte) []json.RawMessage {
	t.Helper()
	var elems []json.RawMessage
	if err := json.Unmarshal(answer, &elems); err != nil {
		t.Errorf("answer is not an array (%v): %s", err, answer)
		return nil
	}
	want := row.answered()
	ids := make([]string, len(elems))
	answers := make([]rawAnswer, len(elems))
	for i, el := range elems {
		if err := json.Unmarshal(el, &answers[i]); err != nil {
			t.Errorf("answer %d: %v: %s", i, err, el)
			return nil
		}
		ids[i] = string(answers[i].ID)
	}
	wantIDs := make([]string, len(want))
	for i, e := range want {
		wantIDs[i] = e.id
	}
	if strings.Join(ids, " ") != strings.Join(wantIDs, " ") {
		t.Errorf("answer ids %s, want request order %s\nbatch:  %s\nanswer: %s", strings.Join(ids, " "), strings.Join(wantIDs, " "), row.batch(), answer)
		return nil
	}
	ok := true
	for i, e := range want {
		if why := checkElem(e.kind, answers[i]); why != "" {
			t.Errorf("answer %d to %s: %s: %s", i, e.raw, why, elems[i])
			ok = false
		}
	}
	if !ok {
		return nil
	}
	return elems
}

// checkElem says what is wrong with a, the answer to an element of kind,
// or "".
func checkElem(kind string, a rawAnswer) string {
	wantResult := func(ok bool, what string) string {
		if a.Error != nil || !ok {
			return "want " + what
		}
		return ""
	}
	wantError := func(code int, msg string) string {
		if a.Error == nil || a.Result != nil || a.Error.Code != code || !strings.Contains(a.Error.Message, msg) {
			return fmt.Sprintf("want error %d %q", code, msg)
		}
		return ""
	}
	switch kind {
	case "blockNumber":
		return wantResult(quantity.Match(a.Result), "a block number")
	case "chainID":
		return wantResult(string(a.Result) == fmt.Sprintf(`"0x%x"`, devChainID), fmt.Sprintf("result 0x%x", devChainID))
	case "netVersion":
		return wantResult(string(a.Result) == fmt.Sprintf(`"%d"`, devChainID), fmt.Sprintf(`result "%d"`, devChainID))
	case "genesis":
		return wantResult(bytes.Contains(a.Result, []byte(`"number":"0x0"`)), "block 0")
	case "denied":
		return wantError(-32601, "the method admin_peers does not exist/is not available")
	case "invalid":
		return wantError(-32600, "")
	}
	return "unknown kind " + kind
}

// wsExchanger dials url; the connection is closed at cleanup.
func wsExchanger(t *testing.T, url string) exchanger {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	c.SetReadLimit(-1)
	t.Cleanup(func() { c.CloseNow() })
	return func(t *testing.T, msg []byte) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Write(ctx, websocket.MessageText, msg); err != nil {
			t.Fatalf("ws write: %v", err)
		}
		_, ans, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("ws read (answer to %s): %v", msg, err)
		}
		return ans
	}
}

// httpExchanger POSTs each message to url.
func httpExchanger(url string) exchanger {
	client := &http.Client{Timeout: 30 * time.Second}
	return func(t *testing.T, msg []byte) []byte {
		t.Helper()
		resp, err := client.Post(url, "application/json", bytes.NewReader(msg))
		if err != nil {
			t.Fatalf("http post: %v", err)
		}
		defer resp.Body.Close()
		ans, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("http answer to %s: %s %v: %s", msg, resp.Status, err, ans)
		}
		return ans
	}
}

// ipcExchanger connects to the socket at path; the connection is closed at
// cleanup. Messages go as geth's IPC takes them, one JSON value after
// another, and each answer is the next JSON value read.
func ipcExchanger(t *testing.T, path string) exchanger {
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("dial ipc %s: %v", path, err)
	}
	t.Cleanup(func() { conn.Close() })
	dec := json.NewDecoder(conn)
	return func(t *testing.T, msg []byte) []byte {
		t.Helper()
		// A guard against a hang: a missing answer fails the test.
		conn.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := conn.Write(append(msg, '\n')); err != nil {
			t.Fatalf("ipc write: %v", err)
		}
		var ans json.RawMessage
		if err := dec.Decode(&ans); err != nil {
			t.Fatalf("ipc read (answer to %s): %v", msg, err)
		}
		return ans
	}
}
