package mux

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/muxd/muxd/core"
	"github.com/muxd/muxd/internal/testnode"
)

// testLogger logs through t.Log while the test runs and drops whatever a
// lingering goroutine logs after it has ended (t.Log would panic then).
func testLogger(t *testing.T) *slog.Logger {
	w := &testLogWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testLogWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// harness is a running muxd in front of a fake upstream.
type harness struct {
	t     *testing.T
	fake  *fakeUpstream
	srv   *Server
	front *httptest.Server
	URL   string // ws:// URL of muxd
	// onAccept, when set, is called for every client connection muxd's
	// listener accepts (to shrink socket buffers).
	onAccept atomic.Pointer[func(net.Conn)]
	handlers sync.WaitGroup
}

// harnessOpts adjust a harness before it starts.
type harnessOpts struct {
	cfg      func(*Config)
	fake     func(*fakeUpstream)
	noWaitUp bool // do not wait for the upstream to be connected
}

// runServer runs srv until the test ends and serves handler on a loopback
// listener (through wrap, when set). The test's cleanup stops Run and
// waits for it, shuts the server (closing every client session now) and
// closes the listener.
func runServer(t *testing.T, srv *Server, handler http.Handler, wrap func(net.Listener) net.Listener) *httptest.Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- srv.Run(ctx) }()
	front := httptest.NewUnstartedServer(handler)
	if wrap != nil {
		front.Listener = wrap(front.Listener)
	}
	front.Start()
	t.Cleanup(func() {
		cancel()
		select {
		case <-runDone:
		case <-time.After(testTimeout):
			t.Error("Server.Run did not return")
		}
		sctx, scancel := context.WithCancel(context.Background())
		scancel()
		_ = srv.Shutdown(sctx)
		front.Close()
	})
	return front
}

func newHarness(t *testing.T, o harnessOpts) *harness {
	t.Helper()
	logger := testLogger(t)
	h := &harness{t: t, fake: newFakeUpstream(t)}
	if o.fake != nil {
		o.fake(h.fake)
	}
	cfg := Config{
		Upstream:       h.fake.URL,
		RequestTimeout: 10 * time.Second,
		PingInterval:   -1,
		Logger:         logger,
		// The tests count what the node receives; TestReadiness* turn
		// muxd's own newHeads subscription back on.
		noHealthHeads: true,
	}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.srv = srv

	// Registered first, so run last: after runServer's cleanup has
	// closed every session.
	t.Cleanup(func() { waitGroup(t, &h.handlers, "client sessions") })
	h.front = runServer(t, srv, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.handlers.Add(1)
		defer h.handlers.Done()
		srv.ServeWebSocket(w, r)
	}), func(ln net.Listener) net.Listener { return &hookListener{Listener: ln, h: h} })
	h.URL = "ws" + strings.TrimPrefix(h.front.URL, "http")
	if !o.noWaitUp {
		h.waitUp(t, true)
	}
	return h
}

// waitUp waits until the server's upstream state is want.
func (h *harness) waitUp(t *testing.T, want bool) {
	t.Helper()
	testnode.WaitConnected(t, h.srv, want)
}

// hookListener lets a test adjust accepted connections.
type hookListener struct {
	net.Listener
	h *harness
}

func (l *hookListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		if f := l.h.onAccept.Load(); f != nil {
			(*f)(c)
		}
	}
	return c, err
}

// locked runs f with srv.mu held.
func (h *harness) locked(f func()) {
	h.srv.mu.Lock()
	defer h.srv.mu.Unlock()
	f()
}

// stats is a snapshot of the routing core's tables.
func (h *harness) stats() (s core.Stats) {
	h.locked(func() { s = h.srv.core.Stats() })
	return s
}

// pendingLen is the size of the pending table.
func (h *harness) pendingLen() int { return h.stats().Pending }

// clientIDs returns the ids of the sessions muxd holds.
func (h *harness) clientIDs() (ids []uint64) {
	h.srv.peersMu.RLock()
	defer h.srv.peersMu.RUnlock()
	for id := range h.srv.peers {
		ids = append(ids, uint64(id))
	}
	return ids
}

// wsClient is a raw WebSocket client that sees muxd's frames byte for byte.
type wsClient struct {
	t    *testing.T
	conn *websocket.Conn
	n    atomic.Int64
}

func (h *harness) dial(t *testing.T) *wsClient {
	t.Helper()
	c, err := dialRaw(h.URL, nil)
	if err != nil {
		t.Fatalf("dial muxd: %v", err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return &wsClient{t: t, conn: c}
}

// dialRaw dials muxd; netDial, when set, replaces the TCP dial (to shrink
// buffers). Safe to call from any goroutine.
func dialRaw(url string, netDial func(ctx context.Context, network, addr string) (net.Conn, error)) (*websocket.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	opts := &websocket.DialOptions{CompressionMode: websocket.CompressionDisabled}
	if netDial != nil {
		opts.HTTPClient = &http.Client{Transport: &http.Transport{DialContext: netDial}}
	}
	c, _, err := websocket.Dial(ctx, url, opts)
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(-1)
	return c, nil
}

func (c *wsClient) send(msg string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		c.t.Fatalf("client write: %v", err)
	}
}

func (c *wsClient) recv() []byte {
	c.t.Helper()
	b, err := readFrame(c.conn)
	if err != nil {
		c.t.Fatalf("client read: %v", err)
	}
	return b
}

func readFrame(c *websocket.Conn) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, b, err := c.Read(ctx)
	return b, err
}

// call sends msg and returns the next frame.
func (c *wsClient) call(msg string) []byte {
	c.t.Helper()
	c.send(msg)
	return c.recv()
}

// barrier sends a fresh request and checks that the very next frame is its
// answer: whatever muxd had to deliver before it has then been delivered,
// and anything else would have come first.
func (c *wsClient) barrier() {
	c.t.Helper()
	id := fmt.Sprintf(`"barrier-%d"`, c.n.Add(1))
	got := c.call(`{"jsonrpc":"2.0","id":` + id + `,"method":"barrier","params":[]}`)
	r := parseResp(c.t, got)
	if string(r.ID) != id || r.echoMethod() != "barrier" {
		c.t.Fatalf("expected the barrier's answer (id %s), got %s", id, got)
	}
}

// resp is one response or notification as a client sees it. ID keeps the
// exact bytes of the id member (nil when absent).
type resp struct {
	Raw     []byte
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// echoed is the fake upstream's default result.
type echoed struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

func (r resp) echo() (echoed, bool) {
	var e echoed
	if r.Result == nil || json.Unmarshal(r.Result, &e) != nil || e.Method == "" {
		return echoed{}, false
	}
	return e, true
}

func (r resp) echoMethod() string { e, _ := r.echo(); return e.Method }

// echoParams is the compacted params the fake echoed.
func (r resp) echoParams() string {
	e, ok := r.echo()
	if !ok {
		return ""
	}
	return compact(e.Params)
}

func (r resp) reason() string {
	if r.Error == nil {
		return ""
	}
	var d struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(r.Error.Data, &d)
	return d.Reason
}

func compact(b []byte) string {
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return string(b)
	}
	return out.String()
}

func decodeResp(b []byte) (resp, error) {
	var r resp
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return resp{}, fmt.Errorf("%w in %s", err, b)
	}
	if r.JSONRPC != "2.0" {
		return resp{}, fmt.Errorf("jsonrpc is not 2.0 in %s", b)
	}
	r.Raw = b
	return r, nil
}

// parseResp decodes a frame that must be one JSON object.
func parseResp(t *testing.T, b []byte) resp {
	t.Helper()
	r, err := decodeResp(b)
	if err != nil {
		t.Fatalf("not a response object: %v", err)
	}
	return r
}

// parseBatch decodes a frame that must be a JSON array of objects.
func parseBatch(t *testing.T, b []byte) []resp {
	t.Helper()
	out, err := decodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func decodeBatch(b []byte) ([]resp, error) {
	if t := bytes.TrimSpace(b); len(t) == 0 || t[0] != '[' {
		return nil, fmt.Errorf("not an array: %s", b)
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(b, &elems); err != nil {
		return nil, fmt.Errorf("bad array %s: %v", b, err)
	}
	out := make([]resp, 0, len(elems))
	for _, e := range elems {
		r, err := decodeResp(e)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// wantError checks r is an error with the given id bytes, code and message
// (message "" is not checked).
func wantError(t *testing.T, r resp, id string, code int, msg string) {
	t.Helper()
	if r.Error == nil || r.Result != nil {
		t.Fatalf("want error %d, got %s", code, r.Raw)
	}
	if string(r.ID) != id {
		t.Errorf("error id = %s, want %s (in %s)", r.ID, id, r.Raw)
	}
	if r.Error.Code != code {
		t.Errorf("error code = %d, want %d (in %s)", r.Error.Code, code, r.Raw)
	}
	if msg != "" && r.Error.Message != msg {
		t.Errorf("error message = %q, want %q (in %s)", r.Error.Message, msg, r.Raw)
	}
}

// wantEcho checks r is the fake's echo of method/params under id.
func wantEcho(t *testing.T, r resp, id, method, params string) {
	t.Helper()
	if string(r.ID) != id {
		t.Errorf("id = %s, want %s (in %s)", r.ID, id, r.Raw)
	}
	if r.Error != nil || r.echoMethod() != method || r.echoParams() != compact([]byte(params)) {
		t.Errorf("want echo of %s %s, got %s", method, params, r.Raw)
	}
}

// subIDPattern is what a client subscription id must look like.
var subIDPattern = regexp.MustCompile(`^"0x[0-9a-f]{32}"$`)

// pushOf decodes an eth_subscription notification and returns its
// subscription id (JSON string) and raw result.
func pushOf(t *testing.T, b []byte) (string, string) {
	t.Helper()
	r := parseResp(t, b)
	if r.Method != "eth_subscription" || r.ID != nil {
		t.Fatalf("want an eth_subscription push, got %s", b)
	}
	var p struct {
		Subscription json.RawMessage `json:"subscription"`
		Result       json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(r.Params, &p); err != nil {
		t.Fatalf("push params: %v in %s", err, b)
	}
	return string(p.Subscription), compact(p.Result)
}

// subscribe sends eth_subscribe with params and returns the client's
// subscription id.
func (c *wsClient) subscribe(id, params string) string {
	c.t.Helper()
	r := parseResp(c.t, c.call(`{"jsonrpc":"2.0","id":`+id+`,"method":"eth_subscribe","params":`+params+`}`))
	if r.Error != nil || string(r.ID) != id {
		c.t.Fatalf("subscribe: got %s", r.Raw)
	}
	sub := string(r.Result)
	if !subIDPattern.MatchString(sub) {
		c.t.Fatalf("subscription id %s is not 0x + 32 hex digits", sub)
	}
	return sub
}

// readUntilClosed reads until the connection fails and returns how many
// frames it read and the error.
func readUntilClosed(c *websocket.Conn) (int, error) {
	n := 0
	for {
		if _, err := readFrame(c); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return n, fmt.Errorf("connection still open after %v", testTimeout)
			}
			return n, nil
		}
		n++
	}
}
