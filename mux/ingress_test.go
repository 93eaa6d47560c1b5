package mux_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/muxd/muxd/internal/testnode"
	"github.com/muxd/muxd/mux"
)

// ingNewUpstream is the fake node these tests use: it answers a batch
// with one array, as geth does, and eth_subscribe with a subscription
// followed by two pushes ({"number":"0x1"}, then "0x2").
func ingNewUpstream(t *testing.T) *testnode.Node {
	t.Helper()
	up := testnode.New(t)
	up.SetArrayHandler((*testnode.Conn).AnswerArray)
	up.SetHandler(ingSubscribeAndPush)
	return up
}

func ingSubscribeAndPush(fc *testnode.Conn, r testnode.Req) {
	if r.Method != "eth_subscribe" {
		fc.Answer(r)
		return
	}
	id := fc.Subscribe(r)
	for i := 1; i <= 2; i++ {
		fc.Push(id, `{"number":"0x`+string(rune('0'+i))+`"}`)
	}
}

// ingServer starts a Server on up (Run in the background) and waits until
// it is connected.
func ingServer(t *testing.T, up *testnode.Node, reg prometheus.Registerer, mod func(*mux.Config)) *mux.Server {
	t.Helper()
	cfg := mux.Config{
		Upstream:   up.URL,
		Logger:     slog.New(slog.DiscardHandler),
		Registerer: reg,
	}
	mux.WithoutHealthHeads(&cfg) // the tests count what the node receives
	if mod != nil {
		mod(&cfg)
	}
	srv, err := mux.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	if !up.Refused() {
		testnode.WaitConnected(t, srv, true)
	}
	return srv
}

// ingHTTP serves srv over HTTP and returns its base URL.
func ingHTTP(t *testing.T, srv *mux.Server) string {
	t.Helper()
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return hs.URL
}

func ingCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type ingResult struct {
	M string          `json:"method"`
	P json.RawMessage `json:"params"`
}

func ingCheckResult(t *testing.T, got ingResult, method, params string) {
	t.Helper()
	if got.M != method || string(got.P) != params {
		t.Errorf("result {m:%s p:%s}, want {m:%s p:%s}", got.M, got.P, method, params)
	}
}

// ingCheckCalls makes a single call and a batch through an rpc client.
func ingCheckCalls(t *testing.T, c *rpc.Client) {
	t.Helper()
	ctx := ingCtx(t)
	var r ingResult
	if err := c.CallContext(ctx, &r, "eth_getBalance", "0xabc", "latest"); err != nil {
		t.Fatal(err)
	}
	ingCheckResult(t, r, "eth_getBalance", `["0xabc","latest"]`)

	res := make([]ingResult, 4)
	batch := make([]rpc.BatchElem, len(res))
	for i := range batch {
		batch[i] = rpc.BatchElem{Method: "eth_blockNumber", Args: []any{i}, Result: &res[i]}
	}
	batch[2].Method = "net_version"
	if err := c.BatchCallContext(ctx, batch); err != nil {
		t.Fatal(err)
	}
	for i, b := range batch {
		if b.Error != nil {
			t.Fatalf("batch element %d: %v", i, b.Error)
		}
		ingCheckResult(t, res[i], b.Method, "["+string(rune('0'+i))+"]")
	}
}

func TestIngressHTTPClient(t *testing.T) {
	up := ingNewUpstream(t)
	srv := ingServer(t, up, nil, nil)
	c, err := rpc.DialHTTP(ingHTTP(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ingCheckCalls(t, c)

	// Denied methods are refused by muxd and never reach the node.
	err = c.CallContext(ingCtx(t), new(json.RawMessage), "admin_peers")
	var rerr rpc.Error
	if !errors.As(err, &rerr) || rerr.ErrorCode() != -32601 || rerr.Error() != "the method admin_peers does not exist/is not available" {
		t.Fatalf("admin_peers: %v, want -32601 the method admin_peers does not exist/is not available", err)
	}
	var r ingResult
	if err := c.CallContext(ingCtx(t), &r, "eth_chainId"); err != nil {
		t.Fatal(err)
	}
	if up.Seen("admin_peers") > 0 {
		t.Fatal("denied method reached the upstream")
	}
	if up.Seen("eth_chainId") == 0 {
		t.Fatal("eth_chainId never reached the upstream")
	}

	// Subscriptions need a connection that can carry notifications.
	err = c.CallContext(ingCtx(t), new(json.RawMessage), "eth_subscribe", "newHeads")
	if !errors.As(err, &rerr) || rerr.ErrorCode() != -32601 || rerr.Error() != "notifications not supported" {
		t.Fatalf("eth_subscribe over HTTP: %v, want -32601 notifications not supported", err)
	}
}

func TestIngressHTTPErrors(t *testing.T) {
	up := ingNewUpstream(t)
	srv := ingServer(t, up, nil, func(c *mux.Config) { c.MaxHTTPBodyBytes = 1024 })
	base := ingHTTP(t, srv)
	port := base[strings.LastIndex(base, ":")+1:]
	tests := []struct {
		name        string
		method      string
		path        string
		host        string
		contentType string
		body        string
		status      int
		wantBody    string // substring; "" with status 200 means an empty body
	}{
		{"GET other path", "GET", "/x", "", "", "", http.StatusMethodNotAllowed, "method not allowed"},
		{"GET root health check", "GET", "/", "", "", "", http.StatusOK, ""},
		{"PUT", "PUT", "/", "", "application/json", "{}", http.StatusMethodNotAllowed, ""},
		{"DELETE", "DELETE", "/", "", "application/json", "{}", http.StatusMethodNotAllowed, ""},
		// geth serves a call in a GET's body (only an empty GET is a
		// health check), and in any other method's but PUT and DELETE.
		{"GET with a call in its body", "GET", "/", "", "application/json", `{"jsonrpc":"2.0","id":7,"method":"eth_chainId"}`, http.StatusOK, `"id":7,"result":{"method":"eth_chainId"`},
		{"GET with a body of the wrong type", "GET", "/", "", "text/plain", `{"jsonrpc":"2.0","id":7,"method":"eth_chainId"}`, http.StatusUnsupportedMediaType, "content type"},
		{"GET with a query", "GET", "/?x=1", "", "", "", http.StatusUnsupportedMediaType, "content type"},
		{"PATCH with a call", "PATCH", "/", "", "application/json", `{"jsonrpc":"2.0","id":8,"method":"eth_chainId"}`, http.StatusOK, `"id":8,"result":{"method":"eth_chainId"`},
		{"OPTIONS without a body", "OPTIONS", "/", "", "", "", http.StatusOK, ""},
		{"OPTIONS with a call, no content type", "OPTIONS", "/", "", "", `{"jsonrpc":"2.0","id":9,"method":"eth_chainId"}`, http.StatusOK, `"id":9,"result":{"method":"eth_chainId"`},
		{"wrong content type", "POST", "/", "", "text/plain", `{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`, http.StatusUnsupportedMediaType, "content type"},
		{"json-rpc content type (geth accepts it)", "POST", "/", "", "application/json-rpc", `{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`, http.StatusOK, `"result":{"method":"eth_chainId"`},
		{"jsonrequest content type (geth accepts it)", "POST", "/", "", "application/jsonrequest", `{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`, http.StatusOK, `"result":{"method":"eth_chainId"`},
		{"json with charset", "POST", "/", "", "application/json; charset=utf-8", `{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`, http.StatusOK, `"result":{"method":"eth_chainId"`},
		{"body too large", "POST", "/", "", "application/json", `{"jsonrpc":"2.0","id":1,"method":"x","params":["` + strings.Repeat("a", 2048) + `"]}`, http.StatusRequestEntityTooLarge, ""},
		{"notification", "POST", "/", "", "application/json", `{"jsonrpc":"2.0","method":"eth_chainId"}`, http.StatusOK, ""},
		{"batch of notifications", "POST", "/", "", "application/json", `[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","method":"b"}]`, http.StatusOK, ""},
		{"malformed", "POST", "/", "", "application/json", `{"jsonrpc":`, http.StatusOK, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700`},
		// geth reads no request from a body with none and answers an
		// empty 200 (its decoder sees the end of the body).
		{"empty body", "POST", "/", "", "application/json", ``, http.StatusOK, ""},
		{"whitespace body", "POST", "/", "", "application/json", " \t\r\n ", http.StatusOK, ""},
		{"whitespace then garbage", "POST", "/", "", "application/json", " \n x", http.StatusOK, `"code":-32700`},
		{"empty batch", "POST", "/", "", "application/json", `[]`, http.StatusOK, `"code":-32600`},
		{"foreign host", "POST", "/", "evil.example", "application/json", `{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`, http.StatusForbidden, "invalid host"},
		{"foreign host with port", "POST", "/", "evil.example:" + port, "application/json", `{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`, http.StatusForbidden, ""},
		{"localhost with port", "POST", "/", "localhost:" + port, "application/json", `{"jsonrpc":"2.0","id":"h","method":"eth_chainId"}`, http.StatusOK, `"id":"h","result":{"method":"eth_chainId"`},
		{"ipv6 loopback", "POST", "/", "[::1]:" + port, "application/json", `{"jsonrpc":"2.0","id":2,"method":"eth_chainId"}`, http.StatusOK, `"id":2,`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(ingCtx(t), tt.method, base+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			if tt.host != "" {
				req.Host = tt.host
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d (body %q)", resp.StatusCode, tt.status, body)
			}
			if tt.wantBody == "" && tt.status == http.StatusOK && len(body) != 0 {
				t.Fatalf("body %q, want none", body)
			}
			if !strings.Contains(string(body), tt.wantBody) {
				t.Fatalf("body %q lacks %q", body, tt.wantBody)
			}
		})
	}
	// Notifications are answered (with nothing) before they are
	// forwarded: wait for the last one. The oversized body was refused
	// before it, on the same upstream connection, so it would be there.
	up.WaitSeen(t, "b", 1)
	if up.Seen("a") != 1 || up.Seen("x") > 0 {
		t.Errorf("the node saw %d of the notification a (want 1) and %d oversized calls (want 0)", up.Seen("a"), up.Seen("x"))
	}
}

// TestIngressHTTPRawRequests: requests shaped in ways an http.Client does
// not send, written on the socket; what geth answers, muxd answers.
func TestIngressHTTPRawRequests(t *testing.T) {
	up := ingNewUpstream(t)
	srv := ingServer(t, up, nil, func(c *mux.Config) { c.MaxHTTPBodyBytes = 1024 })
	addr := strings.TrimPrefix(ingHTTP(t, srv), "http://")
	call := `{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`
	tests := []struct {
		name    string
		request string
		status  int
		body    string // substring
	}{
		{
			// Refused on its header: the body announced never comes.
			name:    "content length over the limit",
			request: "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 99999999999\r\n\r\n{",
			status:  http.StatusRequestEntityTooLarge, body: "content length too large",
		},
		{
			// No Host header (HTTP/1.0): geth serves it.
			name:    "HTTP/1.0 without Host",
			request: "POST / HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(call)) + "\r\n\r\n" + call,
			status:  http.StatusOK, body: `"result":{"method":"eth_chainId"`,
		},
		{
			// Upgrade without Connection: upgrade is no handshake.
			name: "POST with an Upgrade header only",
			request: "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nUpgrade: websocket\r\nConnection: close\r\n" +
				"Content-Length: " + strconv.Itoa(len(call)) + "\r\n\r\n" + call,
			status: http.StatusOK, body: `"result":{"method":"eth_chainId"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			// A guard, not a measure: a server waiting for the body fails
			// the test instead of hanging it.
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(conn, tt.request); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no response: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status || !strings.Contains(string(body), tt.body) {
				t.Fatalf("%d %q, want %d with %q", resp.StatusCode, body, tt.status, tt.body)
			}
		})
	}
}

// rawWebSocket opens a WebSocket to srv by hand, for tests that send what
// a WebSocket library would not, or answer what it answers by itself.
func rawWebSocket(t *testing.T, srv *mux.Server) (net.Conn, *bufio.Reader) {
	t.Helper()
	addr := strings.TrimPrefix(ingHTTP(t, srv), "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second)) // a guard against a hang
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v %v", resp, err)
	}
	return conn, br
}

// rawFrame reads one unfragmented server frame (no mask, payload < 126).
func rawFrame(t *testing.T, br *bufio.Reader) (opcode byte, payload []byte) {
	t.Helper()
	head := make([]byte, 2)
	if _, err := io.ReadFull(br, head); err != nil {
		t.Fatalf("no frame: %v", err)
	}
	if head[1] > 125 {
		t.Fatalf("frame header % x: a payload this test does not read", head)
	}
	payload = make([]byte, head[1])
	if _, err := io.ReadFull(br, payload); err != nil {
		t.Fatal(err)
	}
	return head[0] & 0x0f, payload
}

// writeMasked writes one client frame with FIN set, masked with a zero key.
func writeMasked(t *testing.T, conn net.Conn, opcode byte, payload []byte) {
	t.Helper()
	frame := append([]byte{0x80 | opcode, 0x80 | byte(len(payload)), 0, 0, 0, 0}, payload...)
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
}

// TestIngressWebSocketUnmaskedFrame: a client frame without a mask breaks
// RFC 6455, which wants the connection closed with 1002, as geth does;
// coder/websocket refuses the frame without closing, at a message's start
// or within it.
func TestIngressWebSocketUnmaskedFrame(t *testing.T) {
	masked := func(first byte, payload string) []byte { // a zero mask key
		return append([]byte{first, 0x80 | byte(len(payload)), 0, 0, 0, 0}, payload...)
	}
	for _, tt := range []struct {
		name   string
		frames [][]byte
	}{
		{"a text frame", [][]byte{{0x81, 0x02, '{', '}'}}},
		{"a continuation", [][]byte{masked(0x01, "{"), {0x80, 0x01, '}'}}},
		{"a ping within a message", [][]byte{masked(0x01, "{"), {0x89, 0x00}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := ingServer(t, ingNewUpstream(t), nil, nil)
			conn, br := rawWebSocket(t, srv)
			for _, f := range tt.frames {
				if _, err := conn.Write(f); err != nil {
					t.Fatal(err)
				}
			}
			op, payload := rawFrame(t, br)
			if op != 0x8 || len(payload) < 2 {
				t.Fatalf("frame %x % x, want a close frame with a code", op, payload)
			}
			if code := int(payload[0])<<8 | int(payload[1]); code != 1002 {
				t.Fatalf("closed with %d %q, want 1002", code, payload[2:])
			}
		})
	}
}

// TestIngressWebSocketClientPing: a silent client is pinged every
// ClientPingInterval; one that answers stays, one that answers nothing is
// closed with 1001 "ping timeout" and counted.
func TestIngressWebSocketClientPing(t *testing.T) {
	const every = 50 * time.Millisecond
	t.Run("answers", func(t *testing.T) {
		srv := ingServer(t, ingNewUpstream(t), nil, func(c *mux.Config) { c.ClientPingInterval = every })
		conn, br := rawWebSocket(t, srv)
		for pings := 0; pings < 3; {
			op, payload := rawFrame(t, br)
			if op != 0x9 {
				t.Fatalf("frame %x %q, want a ping", op, payload)
			}
			writeMasked(t, conn, 0xA, payload)
			pings++
		}
		writeMasked(t, conn, 0x1, []byte(`{"jsonrpc":"2.0","id":7,"method":"eth_chainId"}`))
		for {
			op, payload := rawFrame(t, br)
			if op == 0x9 {
				writeMasked(t, conn, 0xA, payload)
				continue
			}
			if op != 0x1 || !strings.Contains(string(payload), `"id":7`) {
				t.Fatalf("frame %x %q, want the answer to id 7", op, payload)
			}
			break
		}
		if n := pingTimeouts(t, srv); n != 0 {
			t.Errorf("ping timeouts %v for a client that answered every ping", n)
		}
	})
	t.Run("silent", func(t *testing.T) {
		srv := ingServer(t, ingNewUpstream(t), nil, func(c *mux.Config) { c.ClientPingInterval = every })
		_, br := rawWebSocket(t, srv)
		op, _ := rawFrame(t, br)
		if op != 0x9 {
			t.Fatalf("frame %x, want a ping", op)
		}
		op, payload := rawFrame(t, br) // not answered
		if op != 0x8 || len(payload) < 2 {
			t.Fatalf("frame %x % x, want a close frame", op, payload)
		}
		if code := int(payload[0])<<8 | int(payload[1]); code != 1001 || string(payload[2:]) != "ping timeout" {
			t.Fatalf("closed with %d %q, want 1001 ping timeout", code, payload[2:])
		}
		if n := pingTimeouts(t, srv); n != 1 {
			t.Errorf("ping timeouts %v, want 1", n)
		}
	})
}

func TestIngressWebSocketOrigin(t *testing.T) {
	up := ingNewUpstream(t)
	tests := []struct {
		name    string
		allowed []string
		origin  string
		ok      bool
	}{
		{"no origin", nil, "", true},
		{"foreign origin refused", nil, "https://evil.example", false},
		{"foreign origin allowed", []string{"evil.example"}, "https://evil.example", true},
		{"other origin still refused", []string{"good.example"}, "https://evil.example", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := ingServer(t, up, nil, func(c *mux.Config) { c.AllowedOrigins = tt.allowed })
			u := "ws" + strings.TrimPrefix(ingHTTP(t, srv), "http")
			h := http.Header{}
			if tt.origin != "" {
				h.Set("Origin", tt.origin)
			}
			c, resp, err := websocket.Dial(ingCtx(t), u, &websocket.DialOptions{HTTPHeader: h})
			if !tt.ok {
				if err == nil {
					c.CloseNow()
					t.Fatal("foreign origin was accepted")
				}
				if resp == nil || resp.StatusCode != http.StatusForbidden {
					t.Fatalf("refusal: %v, want 403", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseNow()
			ctx := ingCtx(t)
			if err := c.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`)); err != nil {
				t.Fatal(err)
			}
			_, msg, err := c.Read(ctx)
			if err != nil || !strings.Contains(string(msg), `"method":"eth_chainId"`) {
				t.Fatalf("answer %s, %v", msg, err)
			}
		})
	}
}

func TestIngressIPCClient(t *testing.T) {
	up := ingNewUpstream(t)
	srv := ingServer(t, up, nil, nil)
	path := mux.IPCPathForTest(t)
	mux.ServeIPCAtForTest(t, srv, path)

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want socket 0600", fi.Mode())
	}

	c, err := rpc.DialIPC(ingCtx(t), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ingCheckCalls(t, c)

	ch := make(chan json.RawMessage, 4)
	sub, err := c.EthSubscribe(ingCtx(t), ch, "newHeads")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		select {
		case h := <-ch:
			if want := `{"number":"0x` + string(rune('0'+i)) + `"}`; string(h) != want {
				t.Fatalf("push %d: %s, want %s", i, h, want)
			}
		case err := <-sub.Err():
			t.Fatal(err)
		case <-time.After(10 * time.Second):
			t.Fatalf("push %d never came", i)
		}
	}
	sub.Unsubscribe()
}

func TestIngressIPCListen(t *testing.T) {
	t.Run("stale socket replaced", func(t *testing.T) {
		path := mux.IPCPathForTest(t)
		old, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		old.(*net.UnixListener).SetUnlinkOnClose(false)
		old.Close()
		if _, err := os.Lstat(path); err != nil {
			t.Fatalf("stale socket file not left behind: %v", err)
		}
		ln, err := mux.ListenIPC(path, 0o600)
		if err != nil {
			t.Fatalf("stale socket not replaced: %v", err)
		}
		ln.Close()
	})
	t.Run("live socket kept", func(t *testing.T) {
		path := mux.IPCPathForTest(t)
		live, err := mux.ListenIPC(path, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { live.Close() })
		if ln, err := mux.ListenIPC(path, 0o600); !errors.Is(err, mux.ErrSocketInUse) {
			if ln != nil {
				ln.Close()
			}
			t.Fatalf("second listener on a live socket: %v, want ErrSocketInUse", err)
		}
		if _, err := os.Lstat(path); err != nil {
			t.Fatalf("live socket file removed: %v", err)
		}
	})
	t.Run("regular file kept", func(t *testing.T) {
		path := mux.IPCPathForTest(t)
		if err := os.WriteFile(path, []byte("data"), 0o600); err != nil {
			t.Fatal(err)
		}
		if ln, err := mux.ListenIPC(path, 0o600); err == nil {
			ln.Close()
			t.Fatal("a regular file was replaced by a socket")
		}
	})
	t.Run("mode", func(t *testing.T) {
		path := mux.IPCPathForTest(t)
		ln, err := mux.ListenIPC(path, 0o660)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o660 {
			t.Fatalf("mode %v, %v; want 0660", fi.Mode(), err)
		}
	})
}

// TestIngressIPCMalformed: bad JSON on a stream cannot be skipped, so the
// connection is answered -32700 and closed, but only after the answer to a
// request sent before it.
func TestIngressIPCMalformed(t *testing.T) {
	up := ingNewUpstream(t)
	hold := testnode.NewHolder("slow")
	up.SetHandler(hold.Handle)
	srv := ingServer(t, up, nil, nil)
	path := mux.IPCPathForTest(t)
	mux.ServeIPCAtForTest(t, srv, path)

	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, `{"jsonrpc":"2.0","id":1,"method":"slow"}`+"\n"+`{bad`+"\n"); err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(conn)
	// The node answers the call only once the parse error has been read.
	if sc.Scan() {
		lines = append(lines, sc.Text())
	}
	for _, l := range hold.TakeN(t, 1) {
		l.Conn.Answer(l.Req)
	}
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("connection not closed after the answers: %v (got %q)", err, lines)
	}
	want := []string{
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"method":"slow","params":null}}`,
	}
	if len(lines) != 2 || lines[0] != want[0] || lines[1] != want[1] {
		t.Fatalf("got %q, want %q", lines, want)
	}
}

// ingMetric returns the value of the series name{labels} in reg; the test
// fails if there is no such series.
func ingMetric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok := testnode.Series(t, reg, name, labels)
	if !ok {
		// A renamed or missing series must not read as a count of zero.
		t.Fatalf("no series %s%v", name, labels)
	}
	return v
}

// pingTimeouts reads muxd_client_ping_timeouts_total.
func pingTimeouts(t *testing.T, srv *mux.Server) float64 {
	t.Helper()
	var m dto.Metric
	if err := srv.Metrics().PingTimeouts.Write(&m); err != nil {
		t.Fatal(err)
	}
	return testnode.MetricValue(&m)
}

func TestIngressMetrics(t *testing.T) {
	up := ingNewUpstream(t)
	reg := prometheus.NewRegistry()
	srv := ingServer(t, up, reg, nil)
	base := ingHTTP(t, srv)
	c, err := rpc.DialHTTP(base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	const n = 5
	for i := 0; i < n; i++ {
		if err := c.CallContext(ingCtx(t), new(ingResult), "eth_blockNumber"); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.CallContext(ingCtx(t), new(json.RawMessage), "admin_peers"); err == nil {
		t.Fatal("admin_peers was not refused")
	}
	resp, err := http.Post(base, "application/json", strings.NewReader("{"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"muxd_requests_total", map[string]string{"method": "eth_blockNumber"}, n},
		{"muxd_requests_total", map[string]string{"method": "other"}, 0},
		{"muxd_responses_total", map[string]string{"code": "ok"}, n},
		{"muxd_responses_total", map[string]string{"code": "-32601"}, 1},
		{"muxd_responses_total", map[string]string{"code": "-32700"}, 1},
		{"muxd_request_duration_seconds", nil, n},
		{"muxd_requests_in_flight", nil, 0},
		{"muxd_upstream_connected", nil, 1},
		{"muxd_clients", map[string]string{"transport": "http"}, 0},
		{"muxd_upstream_frames_sent_total", nil, n},
		{"muxd_dropped_total", map[string]string{"reason": "unknown_id"}, 0},
	}
	for _, tt := range tests {
		if got := ingMetric(t, reg, tt.name, tt.labels); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
	if got := srv.Metrics().DroppedCount(mux.DropUnknownID); got != 0 {
		t.Errorf("DroppedCount(unknown_id) = %v", got)
	}
}

func TestIngressReadiness(t *testing.T) {
	up := ingNewUpstream(t)
	up.Refuse(true)
	reg := prometheus.NewRegistry()
	srv := ingServer(t, up, reg, nil)
	if srv.Ready() {
		t.Fatal("ready before the upstream was ever up")
	}
	up.Refuse(false)
	testnode.WaitConnected(t, srv, true)
	if !srv.Ready() || ingMetric(t, reg, "muxd_upstream_connected", nil) != 1 {
		t.Fatal("not ready with the upstream up")
	}

	up.Refuse(true)
	up.Conn(t, 1).Drop() // the only connection muxd has made
	testnode.WaitConnected(t, srv, false)
	if srv.Ready() || ingMetric(t, reg, "muxd_upstream_connected", nil) != 0 {
		t.Fatal("still ready after the upstream dropped")
	}

	up.Refuse(false)
	testnode.WaitConnected(t, srv, true)
	if !srv.Ready() {
		t.Fatal("not ready after the upstream came back")
	}
	if got := ingMetric(t, reg, "muxd_upstream_reconnects_total", nil); got < 1 {
		t.Errorf("muxd_upstream_reconnects_total = %v, want >= 1", got)
	}
	c, err := rpc.DialHTTP(ingHTTP(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var r ingResult
	if err := c.CallContext(ingCtx(t), &r, "eth_chainId"); err != nil {
		t.Fatal(err)
	}
	ingCheckResult(t, r, "eth_chainId", "null")
}
