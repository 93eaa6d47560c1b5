package main

// The three child processes: the fast upstream, the dumb 1:1 relay (the
// baseline) and muxd. Each listens on 127.0.0.1:0 and prints
// "READY <host:port>" on stdout once it can take clients.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/muxd/muxd/mux"
)

// childEnv marks a process started by the bench as a child, so that a test
// binary (whose flags are the test's) can dispatch to the role in TestMain.
const childEnv = "MUXD_BENCH_CHILD"

// childMain runs the role named by -role in args and returns the exit code.
func childMain(args []string) int {
	fs := flag.NewFlagSet("bench-child", flag.ContinueOnError)
	role := fs.String("role", "", "upstream | relay | muxd")
	upstream := fs.String("upstream", "", "upstream ws:// URL (relay, muxd)")
	nodeDelay := fs.Duration("node-delay", 0, "upstream: answer the simulated chain's reads after this long, and count calls by method (workload h)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	raiseNofile(0)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// MUXD_BENCH_PROFILE_DIR: write a CPU profile of this child there as
	// <role>-<pid>.cpu, and its allocations since start as
	// <role>-<pid>.allocs (stop() ends children with SIGTERM first, so they
	// are flushed).
	if dir := os.Getenv("MUXD_BENCH_PROFILE_DIR"); dir != "" {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.cpu", *role, os.Getpid())))
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench %s: %v\n", *role, err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "bench %s: %v\n", *role, err)
			return 1
		}
		defer pprof.StopCPUProfile()
		defer writeAllocs(filepath.Join(dir, fmt.Sprintf("%s-%d.allocs", *role, os.Getpid())))
	}
	var err error
	switch *role {
	case "upstream":
		err = runUpstream(ctx, *nodeDelay)
	case "relay":
		err = runRelay(ctx, *upstream)
	case "muxd":
		err = runMuxd(ctx, *upstream)
	default:
		err = fmt.Errorf("unknown role %q", *role)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "bench %s: %v\n", *role, err)
		return 1
	}
	return 0
}

// writeAllocs writes the allocation profile to path (MUXD_BENCH_PROFILE_DIR).
func writeAllocs(path string) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	}
}

func listenAndAnnounce(ctx context.Context, h http.Handler) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: h, ErrorLog: nil}
	go func() {
		<-ctx.Done()
		hs.Close()
	}()
	fmt.Printf("READY %s\n", ln.Addr())
	err = hs.Serve(ln)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

var acceptOpts = &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled}
var dialOpts = &websocket.DialOptions{CompressionMode: websocket.CompressionDisabled}

const readLimit = 64 << 20

// ---- upstream ---------------------------------------------------------

// upstreamServer is a minimal JSON-RPC node: every request is answered at
// once with its params echoed as the result; eth_subscribe gets a
// subscription id, and /ctl/push sends one ~2 KB newHeads-like
// notification to every subscription.
//
// With a delay (-node-delay, workload h) it is a node with a simulated
// chain instead: single requests of chainMethods are answered after the
// delay with what the chain holds at the head (appendChainAnswer), every
// single request is counted by method (/ctl/stats), and /ctl/push?seq=n
// makes block n the head and pushes it, a real block with its hash and
// parent hash, to every subscription.
type upstreamServer struct {
	accepted atomic.Int64 // WebSocket connections accepted since start
	current  atomic.Int64
	nextSub  atomic.Uint64

	delay time.Duration // 0: no simulated chain
	head  atomic.Uint64 // the simulated chain's head

	mu    sync.Mutex
	conns map[*upConn]struct{}
	calls map[string]int64 // single requests received by method, with a delay only
}

type upConn struct {
	out  chan [][]byte // each is one message, in parts
	done chan struct{}
	subs []string // guarded by upstreamServer.mu
}

func (c *upConn) send(parts ...[]byte) {
	select {
	case c.out <- parts:
	case <-c.done:
	}
}

func runUpstream(ctx context.Context, delay time.Duration) error {
	u := &upstreamServer{conns: make(map[*upConn]struct{}), delay: delay, calls: make(map[string]int64)}
	return listenAndAnnounce(ctx, u)
}

func (u *upstreamServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/ctl/stats":
		u.mu.Lock()
		subs := 0
		for c := range u.conns {
			subs += len(c.subs)
		}
		calls := maps.Clone(u.calls)
		u.mu.Unlock()
		json.NewEncoder(w).Encode(upstreamStats{Accepted: u.accepted.Load(), Current: u.current.Load(), Subs: subs, Calls: calls})
		return
	case "/ctl/push":
		seq, _ := strconv.Atoi(r.URL.Query().Get("seq"))
		n, ts := u.push(seq)
		json.NewEncoder(w).Encode(pushReply{Subs: n, TS: ts})
		return
	}
	conn, err := websocket.Accept(w, r, acceptOpts)
	if err != nil {
		return
	}
	conn.SetReadLimit(readLimit)
	u.accepted.Add(1)
	u.current.Add(1)
	defer u.current.Add(-1)
	c := &upConn{out: make(chan [][]byte, 1024), done: make(chan struct{})}
	u.mu.Lock()
	u.conns[c] = struct{}{}
	u.mu.Unlock()
	ctx := context.Background()
	go func() {
		for {
			select {
			case parts := <-c.out:
				if writeParts(ctx, conn, parts) != nil {
					conn.CloseNow()
					return
				}
			case <-c.done:
				return
			}
		}
	}()
	defer func() {
		u.mu.Lock()
		delete(u.conns, c)
		u.mu.Unlock()
		close(c.done)
		conn.CloseNow()
	}()
	for {
		_, msg, err := conn.Read(ctx)
		if err != nil {
			return
		}
		// Each message is handled on its own goroutine, as geth's RPC
		// handler does (rpc/handler.go, startCallProc, for a single call
		// and for a whole batch alike): one connection's messages run
		// concurrently, and their answers go out as they are ready.
		// Answering them one after another on this reader would put
		// everything muxd sends, on its one connection, on one of the
		// node's cores, where the relay's hundred connections use all.
		go u.handle(c, msg)
	}
}

// handle answers one message from c.
func (u *upstreamServer) handle(c *upConn, msg []byte) {
	if big, ok := largeAnswer(msg); ok {
		c.send(big...)
		return
	}
	if u.delay > 0 && u.chainAnswer(c, msg) {
		return
	}
	if resp := u.answer(c, msg); resp != nil {
		c.send(resp)
	}
}

// writeParts writes one message made of parts: one WebSocket frame when it
// is a single part, one fragment per part otherwise (a large answer's body
// is shared between answers and never copied).
func writeParts(ctx context.Context, conn *websocket.Conn, parts [][]byte) error {
	if len(parts) == 1 {
		return conn.Write(ctx, websocket.MessageText, parts[0])
	}
	w, err := conn.Writer(ctx, websocket.MessageText)
	if err != nil {
		return err
	}
	for _, p := range parts {
		if _, err := w.Write(p); err != nil {
			return err
		}
	}
	return w.Close()
}

// largeMethod asks the upstream for an answer whose result is about
// params[0] bytes: an array of eth_getLogs-shaped log objects.
const largeMethod = "bench_large"

var largeRequestKey = []byte(`"method":"` + largeMethod + `","params":[`)

// largeAnswer answers a bench_large request: the answer's parts, the big
// body shared by every answer of that size. Requests are written by
// appendLarge, so a fixed shape is enough: id before method, one number
// in params.
func largeAnswer(msg []byte) ([][]byte, bool) {
	i := bytes.Index(msg, largeRequestKey)
	if i < 0 {
		return nil, false
	}
	rest := msg[i+len(largeRequestKey):]
	j := bytes.IndexByte(rest, ']')
	if j < 0 {
		return nil, false
	}
	n, err := strconv.Atoi(string(rest[:j]))
	if err != nil || n < 0 {
		return nil, false
	}
	idAt := bytes.Index(msg, []byte(`"id":`))
	if idAt < 0 || idAt > i {
		return nil, false
	}
	id := bytes.TrimSuffix(msg[idAt+len(`"id":`):i], []byte(","))
	head := make([]byte, 0, 32+len(id))
	head = append(head, `{"jsonrpc":"2.0","id":`...)
	head = append(head, id...)
	return [][]byte{head, largeBody(n)}, true
}

var largeBodies sync.Map // int -> []byte

// largeBody is `,"result":[...]}` with about n bytes of result.
func largeBody(n int) []byte {
	if b, ok := largeBodies.Load(n); ok {
		return b.([]byte)
	}
	b := make([]byte, 0, n+1024)
	b = append(b, `,"result":[`...)
	for k := 0; len(b) < n; k++ {
		if k > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"address":"0x6b175474e89094c44da98b954eedeac495271d0f","topics":["0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef","0x000000000000000000000000%040x","0x000000000000000000000000f39fd6e51aad88f6f4ce6ab8827279cfffb92266"],"data":"0x%064x","blockNumber":"0x1234567","transactionHash":"0x%064x","transactionIndex":"0x%x","blockHash":"0x88e96d4537bea4d9c05d12549907b32561d3bf31f45aae734cdc119f13406cb6","logIndex":"0x%x","removed":false}`, k, k*7919, k*104729, k%500, k)
	}
	b = append(b, "]}"...)
	largeBodies.Store(n, b)
	return b
}

type upstreamStats struct {
	Accepted int64 `json:"accepted"`
	Current  int64 `json:"current"`
	Subs     int   `json:"subs"`
	// Calls are the single requests received by method (with -node-delay
	// only).
	Calls map[string]int64 `json:"calls,omitempty"`
}

type pushReply struct {
	Subs int   `json:"subs"`
	TS   int64 `json:"ts"`
}

type rpcReq struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// chainAnswer counts the single request msg and, when it is a read of the
// simulated chain, answers it after u.delay with the chain as it is at its
// arrival, and reports true; anything else is left to answer.
func (u *upstreamServer) chainAnswer(c *upConn, msg []byte) bool {
	var req rpcReq
	if json.Unmarshal(msg, &req) != nil || req.ID == nil {
		return false
	}
	u.mu.Lock()
	u.calls[req.Method]++
	u.mu.Unlock()
	if !chainMethods[req.Method] {
		return false
	}
	resp, ok := appendChainAnswer(nil, req.ID, req.Method, req.Params, u.head.Load())
	if !ok {
		resp = fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32602,"message":"invalid params"}}`, req.ID)
	}
	time.AfterFunc(u.delay, func() { c.send(resp) })
	return true
}

// answer returns the response frame for msg, or nil (notifications).
func (u *upstreamServer) answer(c *upConn, msg []byte) []byte {
	t := bytes.TrimLeft(msg, " \t\r\n")
	if len(t) > 0 && t[0] == '[' {
		var reqs []rpcReq
		if json.Unmarshal(t, &reqs) != nil {
			return []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`)
		}
		out := make([]byte, 0, len(msg)+32*len(reqs))
		out = append(out, '[')
		n := 0
		for i := range reqs {
			if reqs[i].ID == nil {
				continue
			}
			if n > 0 {
				out = append(out, ',')
			}
			out = u.appendAnswer(out, c, &reqs[i])
			n++
		}
		if n == 0 {
			return nil
		}
		return append(out, ']')
	}
	var req rpcReq
	if json.Unmarshal(t, &req) != nil {
		return []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`)
	}
	if req.ID == nil {
		return nil
	}
	return u.appendAnswer(make([]byte, 0, len(msg)+32), c, &req)
}

func (u *upstreamServer) appendAnswer(out []byte, c *upConn, req *rpcReq) []byte {
	out = append(out, `{"jsonrpc":"2.0","id":`...)
	out = append(out, req.ID...)
	out = append(out, `,"result":`...)
	switch req.Method {
	case "eth_subscribe":
		id := fmt.Sprintf("0x%032x", u.nextSub.Add(1))
		u.mu.Lock()
		c.subs = append(c.subs, id)
		u.mu.Unlock()
		out = strconv.AppendQuote(out, id)
	case "eth_unsubscribe":
		var ids []string
		json.Unmarshal(req.Params, &ids)
		found := false
		u.mu.Lock()
		for _, id := range ids {
			for i, s := range c.subs {
				if s == id {
					c.subs = append(c.subs[:i], c.subs[i+1:]...)
					found = true
					break
				}
			}
		}
		u.mu.Unlock()
		out = strconv.AppendBool(out, found)
	default:
		if len(req.Params) == 0 {
			out = append(out, "null"...)
		} else {
			out = append(out, req.Params...)
		}
	}
	return append(out, '}')
}

// pushBody is the part of a push after the subscription id: a newHeads-like
// block header of about 2 KB. bench_ts is a fixed-width slot patched with
// the wall clock (UnixNano) just before the frames are handed to the
// writers.
func pushBody(seq int) []byte {
	hash := "0x" + strings.Repeat("ab", 32)
	var b bytes.Buffer
	fmt.Fprintf(&b, `","result":{"bench_seq":%d,"bench_ts":%s,`, seq, strings.Repeat("0", tsWidth))
	for i := 0; i < 24; i++ {
		fmt.Fprintf(&b, `"field%02d":%q,`, i, hash)
	}
	b.WriteString(`"number":"0x1b4"}}}`)
	return b.Bytes()
}

const tsWidth = 19

const pushPrefix = `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"`

func (u *upstreamServer) push(seq int) (int, int64) {
	body := pushBody(seq)
	tsAt := bytes.Index(body, []byte(`"bench_ts":`)) + len(`"bench_ts":`)
	if u.delay > 0 {
		u.head.Store(uint64(seq))
		body, tsAt = appendHeadPush(nil, uint64(seq)), -1
	}
	type target struct {
		c *upConn
		f []byte
	}
	var targets []target
	u.mu.Lock()
	for c := range u.conns {
		for _, id := range c.subs {
			f := make([]byte, 0, len(pushPrefix)+len(id)+len(body))
			f = append(f, pushPrefix...)
			f = append(f, id...)
			f = append(f, body...)
			targets = append(targets, target{c, f})
		}
	}
	u.mu.Unlock()
	ts := time.Now().UnixNano()
	stamp := fmt.Sprintf("%0*d", tsWidth, ts)
	off := len(pushPrefix) + 34 // "0x" + 32 hex digits
	for _, t := range targets {
		if tsAt >= 0 {
			copy(t.f[off+tsAt:], stamp)
		}
		t.c.send(t.f)
	}
	return len(targets), ts
}

// ---- relay (baseline) ----------------------------------------------------

// runRelay is the BASELINE: a dumb 1:1 WebSocket relay. Each client gets its
// own upstream socket; messages are copied both ways without parsing, through
// one reused buffer per direction.
func runRelay(ctx context.Context, upstream string) error {
	return listenAndAnnounce(ctx, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client, err := websocket.Accept(w, r, acceptOpts)
		if err != nil {
			return
		}
		defer client.CloseNow()
		up, _, err := websocket.Dial(r.Context(), upstream, dialOpts)
		if err != nil {
			client.Close(websocket.StatusTryAgainLater, "upstream dial failed")
			return
		}
		defer up.CloseNow()
		client.SetReadLimit(readLimit)
		up.SetReadLimit(readLimit)
		done := make(chan struct{}, 2)
		go func() { relayCopy(up, client); done <- struct{}{} }()
		go func() { relayCopy(client, up); done <- struct{}{} }()
		<-done
	}))
}

func relayCopy(dst, src *websocket.Conn) {
	var buf bytes.Buffer
	for {
		typ, err := readInto(src, &buf)
		if err != nil {
			return
		}
		if err := dst.Write(context.Background(), typ, buf.Bytes()); err != nil {
			return
		}
	}
}

// ---- muxd -------------------------------------------------------------

func runMuxd(ctx context.Context, upstream string) error {
	srv, err := mux.New(mux.Config{
		Upstream:   upstream,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		MaxClients: 1 << 20,
	})
	if err != nil {
		return err
	}
	runDone := make(chan error, 1)
	go func() { runDone <- srv.Run(ctx) }()
	deadline := time.After(30 * time.Second)
	for !upstreamActive(srv) {
		select {
		case <-time.After(5 * time.Millisecond):
		case <-deadline:
			return errors.New("muxd: upstream not connected after 30s")
		case err := <-runDone:
			return err
		}
	}
	return listenAndAnnounce(ctx, srv)
}

// raiseNofile raises RLIMIT_NOFILE: the hard limit to want (when larger and
// allowed, e.g. as root) and the soft limit to the hard one. It returns the
// tcpCongestion is the host's default TCP congestion control, or "" where
// it cannot be read (not Linux).
func tcpCongestion() string {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// soft limit in effect.
func raiseNofile(want uint64) uint64 {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return 0
	}
	if want > lim.Max {
		try := syscall.Rlimit{Cur: want, Max: want}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &try) == nil {
			return want
		}
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	return lim.Cur
}

// upstreamActive reports whether srv has an active upstream, as its status
// shows.
func upstreamActive(srv *mux.Server) bool {
	for _, u := range srv.Status().Upstreams {
		if u.Active {
			return true
		}
	}
	return false
}
