package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/sha3"

	"github.com/muxd/muxd/integration/gethnode"
	"github.com/muxd/muxd/internal/testnode"
	"github.com/muxd/muxd/mux"
)

func runProbeCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code = run(ctx, append([]string{"probe"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// tableRows returns the MATCHED column of every row of the probe's table,
// keyed by "mode reqid method".
func tableRows(t *testing.T, out string) map[string]string {
	t.Helper()
	rows := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || (f[0] != "batch" && f[0] != "single") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue // "batch returned in request order: …"
		}
		rows[f[0]+" "+f[1]+" "+f[2]] = f[4]
	}
	if len(rows) != 2*len(probeCalls()) {
		t.Fatalf("probe table has %d rows, want %d:\n%s", len(rows), 2*len(probeCalls()), out)
	}
	return rows
}

func requireAllYes(t *testing.T, code int, out, errs string) {
	t.Helper()
	if code != 0 {
		t.Fatalf("probe exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	for k, v := range tableRows(t, out) {
		if v != "yes" {
			t.Errorf("row %s matched=%s, want yes\n%s", k, v, out)
		}
	}
	if !strings.Contains(out, "responses with unknown ids: none") {
		t.Errorf("unknown ids reported:\n%s", out)
	}
}

func TestProbeGeth(t *testing.T) {
	node := gethnode.Start(t)
	t.Run("ws", func(t *testing.T) {
		code, out, errs := runProbeCmd(t, node.WSURL)
		requireAllYes(t, code, out, errs)
	})
	t.Run("http", func(t *testing.T) {
		code, out, errs := runProbeCmd(t, node.HTTPURL)
		requireAllYes(t, code, out, errs)
	})
	t.Run("json", func(t *testing.T) {
		code, out, errs := runProbeCmd(t, "--json", node.WSURL)
		if code != 0 {
			t.Fatalf("probe --json exit %d\n%s\n%s", code, out, errs)
		}
		var rep ProbeReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("--json output does not parse: %v\n%s", err, out)
		}
		if len(rep.Rows) != 2*len(probeCalls()) || rep.Unmatched != 0 || len(rep.UnknownIDs) != 0 {
			t.Fatalf("report %+v", rep)
		}
		for _, r := range rep.Rows {
			if !r.Matched || r.Error != "" {
				t.Errorf("row %+v", r)
			}
		}
	})
	t.Run("json-count", func(t *testing.T) {
		code, out, errs := runProbeCmd(t, node.WSURL, "--json", "--count", "2")
		if code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, out, errs)
		}
		var reps []ProbeReport
		if err := json.Unmarshal([]byte(out), &reps); err != nil || len(reps) != 2 || len(reps[1].Rows) == 0 {
			t.Fatalf("--count 2 --json: %v %+v\n%s", err, reps, out)
		}
	})
	t.Run("via-muxd", func(t *testing.T) {
		srv, err := mux.New(mux.Config{Upstream: node.WSURL, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); srv.Run(ctx) }()
		front := httptest.NewServer(srv)
		t.Cleanup(func() {
			front.CloseClientConnections()
			front.Close()
			cancel()
			<-done
		})
		for _, u := range []string{"ws" + strings.TrimPrefix(front.URL, "http"), front.URL} {
			code, out, errs := runProbeCmd(t, u)
			requireAllYes(t, code, out, errs)
		}
	})
}

// probeFake scripts the shared fake node to answer the probe's methods,
// and can tell it to lie.
type probeFake struct {
	// swapIDs: singles are answered in pairs (101<->102, 103<->104, …)
	// under each other's id; in a batch the ids of the first two web3_sha3
	// answers are swapped.
	swapIDs bool
	// swapResults: ids are kept, but each web3_sha3 answer carries the
	// result of another web3_sha3 request.
	swapResults bool

	mu   sync.Mutex                      // the handlers of different connections
	held map[*testnode.Conn]testnode.Req // a single waiting for its pair partner
}

func keccakHex(data string) string {
	raw, _ := hex.DecodeString(strings.TrimPrefix(data, "0x"))
	h := sha3.NewLegacyKeccak256()
	h.Write(raw)
	return "0x" + hex.EncodeToString(h.Sum(nil))
}

func (f *probeFake) result(r testnode.Req) string {
	switch r.Method {
	case "eth_blockNumber":
		return "0x10"
	case "eth_chainId":
		return "0x539"
	case "net_version":
		return "1337"
	case "web3_clientVersion":
		return "fake/v0"
	case "eth_gasPrice":
		return "0x3b9aca00"
	case "web3_sha3":
		var params []string
		if json.Unmarshal(r.Params, &params) == nil && len(params) == 1 {
			if f.swapResults {
				return keccakHex(params[0] + "00") // someone else's hash
			}
			return keccakHex(params[0])
		}
	}
	return ""
}

func probeAnswer(id json.RawMessage, result string) []byte {
	q, _ := json.Marshal(result)
	return testnode.ResultFrame(id, string(q))
}

// handleArray answers an array (the probe's batch) with one array.
func (f *probeFake) handleArray(fc *testnode.Conn, reqs []testnode.Req) {
	ids := make([]json.RawMessage, len(reqs))
	var shaIdx []int
	for i, q := range reqs {
		ids[i] = q.ID
		if q.Method == "web3_sha3" {
			shaIdx = append(shaIdx, i)
		}
	}
	if f.swapIDs && len(shaIdx) >= 2 {
		a, c := shaIdx[0], shaIdx[1]
		ids[a], ids[c] = ids[c], ids[a]
	}
	answers := make([][]byte, len(reqs))
	for i, q := range reqs {
		answers[i] = probeAnswer(ids[i], f.result(q))
	}
	fc.Send(testnode.ArrayFrame(answers))
}

// handle answers a single request.
func (f *probeFake) handle(fc *testnode.Conn, r testnode.Req) {
	if !f.swapIDs {
		fc.Send(probeAnswer(r.ID, f.result(r)))
		return
	}
	f.mu.Lock()
	p, ok := f.held[fc]
	if !ok {
		f.held[fc] = r
		f.mu.Unlock()
		return
	}
	delete(f.held, fc)
	f.mu.Unlock()
	// Answer both under each other's id.
	fc.Send(probeAnswer(r.ID, f.result(p)))
	fc.Send(probeAnswer(p.ID, f.result(r)))
}

func startProbeFake(t *testing.T, f *probeFake) string {
	t.Helper()
	f.held = map[*testnode.Conn]testnode.Req{}
	n := testnode.New(t)
	n.SetHandler(f.handle)
	n.SetArrayHandler(f.handleArray)
	return n.URL
}

func TestProbeFakeHonest(t *testing.T) {
	code, out, errs := runProbeCmd(t, startProbeFake(t, &probeFake{}))
	requireAllYes(t, code, out, errs)
}

func TestProbeSwappedIDs(t *testing.T) {
	code, out, errs := runProbeCmd(t, "--timeout", "5s", startProbeFake(t, &probeFake{swapIDs: true}))
	if code != 1 {
		t.Fatalf("probe exit %d, want 1\n%s\n%s", code, out, errs)
	}
	rows := tableRows(t, out)
	var no []string
	for k, v := range rows {
		if v == "no" {
			no = append(no, k)
		}
	}
	if len(no) == 0 {
		t.Fatalf("no row shows matched=no:\n%s", out)
	}
	// The batch's swapped canaries are caught.
	for _, k := range []string{"batch 6 web3_sha3", "batch 7 web3_sha3"} {
		if rows[k] != "no" {
			t.Errorf("row %s = %s, want no\n%s", k, rows[k], out)
		}
	}
	// The singles' pairs that involve a canary are caught.
	for _, k := range []string{"single 106 web3_sha3", "single 107 web3_sha3", "single 108 web3_sha3"} {
		if rows[k] != "no" {
			t.Errorf("row %s = %s, want no\n%s", k, rows[k], out)
		}
	}
	if strings.Contains(out, "rows not matched: 0 ") {
		t.Errorf("summary claims no unmatched rows:\n%s", out)
	}
}

func TestProbeSwappedResults(t *testing.T) {
	code, out, errs := runProbeCmd(t, "--json", startProbeFake(t, &probeFake{swapResults: true}))
	if code != 1 {
		t.Fatalf("probe exit %d, want 1\n%s\n%s", code, out, errs)
	}
	var rep ProbeReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	var canaries int
	for _, r := range rep.Rows {
		if r.Method == "web3_sha3" {
			canaries++
			if r.Matched || !strings.Contains(r.Error, "another request") {
				t.Errorf("canary row %+v: want matched=false, error about another request", r)
			}
		} else if !r.Matched {
			t.Errorf("row %+v: want matched", r)
		}
	}
	if canaries != 6 || rep.Unmatched != 6 {
		t.Errorf("canaries %d, unmatched %d; want 6 and 6", canaries, rep.Unmatched)
	}
}

func TestProbeBadArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"ftp://127.0.0.1:1/"}, "scheme"},
		{[]string{"://nope"}, "bad URL"},
		{[]string{}, "usage"},
		{[]string{"ws://a", "ws://b"}, "usage"},
		{[]string{"ws://a", "--count", "0"}, "usage"},
		// With the flags before the URL: TestProbeCountZeroFlagsFirst.
	} {
		t.Run(fmt.Sprint(tc.args), func(t *testing.T) {
			code, out, errs := runProbeCmd(t, tc.args...)
			if code != 1 && code != 2 {
				t.Errorf("exit %d, want 1 or 2", code)
			}
			if !strings.Contains(errs, tc.want) {
				t.Errorf("stderr %q does not mention %q (stdout %q)", errs, tc.want, out)
			}
		})
	}
	// Nothing listening: a dial error, exit 1, none of the URL's secrets
	// (password, API key in the path or the query) in the output, for
	// either transport (coder/websocket reports ws:// as http://, net/http
	// masks the password its own way).
	l := httptest.NewServer(http.NotFoundHandler())
	host := strings.TrimPrefix(l.URL, "http://")
	l.Close()
	for _, scheme := range []string{"ws", "http"} {
		u := scheme + "://user:secretpw@" + host + "/key/abcdef0123456789?apikey=qwertyuiop"
		code, out, errs := runProbeCmd(t, u)
		if code != 1 {
			t.Errorf("%s probe of a closed port: exit %d, stderr %q", scheme, code, errs)
		}
		for _, secret := range []string{"secretpw", "abcdef0123456789", "qwertyuiop"} {
			if strings.Contains(out+errs, secret) {
				t.Errorf("%s probe output leaks %q: stdout %q stderr %q", scheme, secret, out, errs)
			}
		}
	}
}

// TestProbeCountZeroFlagsFirst: --count 0 before the URL is refused too
// (it once probed nothing and exited 0).
func TestProbeCountZeroFlagsFirst(t *testing.T) {
	code, out, errs := runProbeCmd(t, "--count", "0", "ws://a")
	if code != 2 || !strings.Contains(errs, "usage") {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and usage", code, out, errs)
	}
}
