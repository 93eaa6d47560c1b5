package mux

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/muxd/muxd/internal/testnode"
)

// TestShutdownPastGrace: requests still in flight when the grace period
// ends each get -32002 (reason "shutdown") before their client is closed,
// over WebSocket and HTTP alike; nothing is dropped without an answer.
func TestShutdownPastGrace(t *testing.T) {
	hold := newHolder("eth_call", "eth_subscribe")
	h := newHarness(t, harnessOpts{})
	h.fake.SetHandler(hold.Handle)
	fc := h.fake.Conn(t, 1)
	c := h.dial(t)
	c.send(`{"jsonrpc":"2.0","id":"call","method":"eth_call","params":[{}]}`)
	c.send(`{"jsonrpc":"2.0","id":"sub","method":"eth_subscribe","params":["newHeads"]}`)

	front := httptest.NewServer(h.srv)
	t.Cleanup(front.Close)
	httpBody := make(chan string, 1)
	go func() {
		res, err := http.Post(front.URL, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"eth_call","params":[{"h":1}]}`))
		if err != nil {
			httpBody <- "error: " + err.Error()
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		httpBody <- string(b)
	}()
	fc.WaitReqs(t, 3)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := h.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	got := map[string]resp{}
	for range 2 {
		r := parseResp(t, c.recv())
		got[string(r.ID)] = r
	}
	for _, id := range []string{`"call"`, `"sub"`} {
		r, ok := got[id]
		if !ok {
			t.Fatalf("no answer for %s: %v", id, got)
		}
		wantError(t, r, id, -32002, "upstream unavailable")
		if r.reason() != "shutdown" {
			t.Errorf("%s: reason %q, want shutdown", id, r.reason())
		}
	}
	if _, err := readFrame(c.conn); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Errorf("after the answers: %v, want close 1001", err)
	}
	select {
	case b := <-httpBody:
		r := parseResp(t, []byte(b))
		wantError(t, r, `7`, -32002, "upstream unavailable")
	case <-time.After(testTimeout):
		t.Fatal("HTTP client got no answer")
	}
}

// TestShutdownAnswersWhatIsReadAfterTheSweep: once the grace is over, a
// request a session reads is answered -32002 (reason "shutdown") by muxd at
// once and never goes upstream, and the session closes only once that
// answer is written after everything queued before it.
func TestShutdownAnswersWhatIsReadAfterTheSweep(t *testing.T) {
	var logs testnode.LockedBuffer
	hold := newHolder("held")
	h := newHarness(t, harnessOpts{cfg: func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	}})
	h.fake.SetHandler(hold.Handle)
	conn := dialIPCForTest(t, h.srv)
	// The node echoes "big" at once: 1 MiB that this client does not read
	// yet, so muxd's writer is stuck writing it and the session stays
	// open past the sweep. "held" is in flight when the grace ends.
	big := strings.Repeat("a", 1<<20)
	go io.WriteString(conn, `{"jsonrpc":"2.0","id":1,"method":"big","params":["`+big+`"]}`+
		`{"jsonrpc":"2.0","id":2,"method":"held","params":[]}`)
	hold.TakeN(t, 1)
	var c *Client
	eventually(t, "the answer to big being written", func() bool {
		h.srv.peersMu.RLock()
		defer h.srv.peersMu.RUnlock()
		for _, p := range h.srv.peers {
			c = p
		}
		return c != nil && c.writeStarted.Load() != 0
	})

	// The client reads its answers only below, after the sweep: under
	// -race on a busy box that may take longer than AnswerFlush.
	h.srv.answerFlush = time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the grace is over at once
	shutDone := make(chan error, 1)
	go func() { shutDone <- h.srv.Shutdown(ctx) }()
	logs.WaitFor(t, "shutdown grace over")
	if _, err := io.WriteString(conn, `{"jsonrpc":"2.0","id":3,"method":"after","params":[]}`+"\n"); err != nil {
		t.Fatal(err)
	}
	// The core has taken it (its answer numbered, or, forwarded, in
	// flight) before this client reads: the writer, stuck until then,
	// cannot close the session first.
	eventually(t, "the request read after the sweep taken", func() bool {
		h.srv.mu.Lock()
		defer h.srv.mu.Unlock()
		inflight, seq := h.srv.core.Owed(c.id)
		return seq >= 3 || inflight > 0
	})

	answers := readIPCUntilEOF(t, conn)
	if len(answers) != 3 {
		t.Fatalf("got %d answers before the close, want 3", len(answers))
	}
	if r := parseResp(t, answers[0]); string(r.ID) != "1" || r.echoMethod() != "big" {
		t.Errorf("first answer %.200s, want the echo of big", answers[0])
	}
	for i, id := range []string{"2", "3"} {
		r := parseResp(t, answers[i+1])
		wantError(t, r, id, -32002, "upstream unavailable")
		if r.reason() != "shutdown" {
			t.Errorf("%s: reason %q, want shutdown", id, r.reason())
		}
	}
	if n := h.fake.Seen("after"); n != 0 {
		t.Errorf("the request read after the sweep went upstream (%d)", n)
	}
	select {
	case err := <-shutDone:
		if err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Shutdown did not return")
	}
}

// TestIPCParseErrorWaitsForSubscribe: after malformed JSON an IPC stream is
// closed, but only once an eth_subscribe still waiting for the node has had
// its answer.
func TestIPCParseErrorWaitsForSubscribe(t *testing.T) {
	hold := newHolder("eth_subscribe")
	h := newHarness(t, harnessOpts{})
	h.fake.SetHandler(hold.Handle)
	fc := h.fake.Conn(t, 1)
	dir, err := os.MkdirTemp("", "muxd-ipc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := ListenIPC(filepath.Join(dir, "s.ipc"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go h.srv.ServeIPC(ln)
	conn, err := net.Dial("unix", filepath.Join(dir, "s.ipc"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(testTimeout))
	if _, err := io.WriteString(conn, `{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}`+"\n"); err != nil {
		t.Fatal(err)
	}
	fc.WaitReqs(t, 1)
	if _, err := io.WriteString(conn, "{bad\n"); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	line, err := rd.ReadBytes('\n')
	if err != nil {
		t.Fatalf("first line: %v", err)
	}
	wantError(t, parseResp(t, line), "null", -32700, "parse error")
	for _, l := range hold.TakeN(t, 1) {
		fc.Subscribe(l.Req)
	}
	line, err = rd.ReadBytes('\n')
	if err != nil {
		t.Fatalf("subscribe answer lost: %v", err)
	}
	if r := parseResp(t, line); string(r.ID) != "1" || !subIDPattern.MatchString(string(r.Result)) {
		t.Fatalf("second line %s, want the subscription id for id 1", line)
	}
	_, err = rd.ReadBytes('\n')
	wantClosed(t, err, "after the parse error was answered")
}

// TestIPCMessageTooLarge: a value larger than MaxMessageBytes on an IPC
// stream is not buffered whole: the client gets -32005, the earlier request
// still its answer, and then the connection is closed.
func TestIPCMessageTooLarge(t *testing.T) {
	h := newHarness(t, harnessOpts{cfg: func(c *Config) { c.MaxMessageBytes = 1 << 10 }})
	conn := dialIPCForTest(t, h.srv)
	go func() {
		io.WriteString(conn, `{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}`)
		// An unterminated string that would grow without end.
		io.WriteString(conn, `{"jsonrpc":"2.0","id":2,"method":"x","params":["`)
		chunk := strings.Repeat("a", 64<<10)
		for i := 0; i < 64; i++ { // 4 MiB, far past the 1 KiB limit
			if _, err := io.WriteString(conn, chunk); err != nil {
				return
			}
		}
	}()
	rd := bufio.NewReader(conn)
	var lines []resp
	for {
		line, err := rd.ReadBytes('\n')
		if err != nil {
			wantClosed(t, err, "after -32005")
			break
		}
		lines = append(lines, parseResp(t, line))
	}
	if len(lines) != 2 {
		t.Fatalf("got %d answers, want the call's and -32005: %v", len(lines), lines)
	}
	byID := map[string]resp{}
	for _, r := range lines {
		byID[string(r.ID)] = r
	}
	if r := byID["1"]; r.echoMethod() != "eth_chainId" {
		t.Errorf("call answer %s", r.Raw)
	}
	wantError(t, byID["null"], "null", -32005, "limit exceeded")
}

// wantClosed fails unless err, from a read of an IPC stream, says muxd
// closed it, rather than that the test's read deadline passed with the
// stream still open.
func wantClosed(t *testing.T, err error, when string) {
	t.Helper()
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection still open %s (read: %v)", when, err)
	}
}

// TestMessageTooLargeKeepsID: a request over max_message_bytes is refused
// under its own id, wherever the id sits (before or after the params that
// make it large), so that its client can match the refusal to its call; a
// batch, or a message whose id cannot be told, is refused under null. On
// WebSocket and on IPC (a message up to 64 KiB past the limit), the session
// goes on.
func TestMessageTooLargeKeepsID(t *testing.T) {
	const limit = 4 << 10
	h := newHarness(t, harnessOpts{cfg: func(c *Config) { c.MaxMessageBytes = limit }})
	pad := `"0x` + strings.Repeat("ab", limit) + `"`
	tests := []struct{ msg, id string }{
		{`{"jsonrpc":"2.0","id":42,"method":"web3_sha3","params":[` + pad + `]}`, `42`},
		{`{"method":"web3_sha3","params":[` + pad + `],"id":"after \"params\"","jsonrpc":"2.0"}`, `"after \"params\""`},
		{`[{"jsonrpc":"2.0","id":1,"method":"web3_sha3","params":[` + pad + `]}]`, `null`},
		{`{"jsonrpc":"2.0","method":"web3_sha3","params":[` + pad + `]}`, `null`},
	}
	check := func(t *testing.T, got resp, want string) {
		t.Helper()
		wantError(t, got, want, -32005, "limit exceeded")
		if got.reason() != "message too large" {
			t.Errorf("%s: want reason message too large", got.Raw)
		}
	}
	t.Run("websocket", func(t *testing.T) {
		c := h.dial(t)
		for _, tt := range tests {
			check(t, parseResp(t, c.call(tt.msg)), tt.id)
		}
		if r := parseResp(t, c.call(`{"jsonrpc":"2.0","id":9,"method":"eth_chainId","params":[]}`)); r.Error != nil {
			t.Errorf("after the refusals: %s", r.Raw)
		}
	})
	t.Run("ipc", func(t *testing.T) {
		conn := dialIPCForTest(t, h.srv)
		rd := bufio.NewReader(conn)
		for _, tt := range tests {
			io.WriteString(conn, tt.msg)
			line, err := rd.ReadBytes('\n')
			if err != nil {
				t.Fatalf("no answer to a message too large: %v", err)
			}
			check(t, parseResp(t, line), tt.id)
		}
	})
}
