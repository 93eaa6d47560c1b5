package mux

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	dto "github.com/prometheus/client_model/go"

	"github.com/muxd/muxd/internal/testnode"
	"github.com/muxd/muxd/reconnect"
)

// sendTestConn returns an upstreamConn dialled to a test node that sends
// every message it reads on the returned channel, and the node's side of
// the connection (to cut it).
func sendTestConn(t *testing.T) (*upstreamConn, <-chan []byte, <-chan *websocket.Conn) {
	t.Helper()
	open := make(chan struct{})
	close(open)
	return sendTestConnGated(t, open)
}

// sendTestConnGated is sendTestConn with a node that reads nothing until
// gate is closed.
func sendTestConnGated(t *testing.T, gate <-chan struct{}) (*upstreamConn, <-chan []byte, <-chan *websocket.Conn) {
	t.Helper()
	got := make(chan []byte, 1<<14)
	nodeSide := make(chan *websocket.Conn, 1)
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(64 << 20)
		nodeSide <- c
		<-gate
		for {
			_, msg, err := c.Read(context.Background())
			if err != nil {
				return
			}
			got <- msg
		}
	}))
	t.Cleanup(node.Close)
	return dialSendTestConn(t, "ws"+strings.TrimPrefix(node.URL, "http")), got, nodeSide
}

// dialSendTestConn returns an upstreamConn to the node at url, dialled as
// muxd dials (reconnect.WebSocketDialer, under a Supervisor), so that its
// socket is the one the send queue corks and flushes. Nothing reads it.
func dialSendTestConn(tb testing.TB, url string) *upstreamConn {
	tb.Helper()
	srv, err := New(Config{
		Dial:   func(context.Context) (*websocket.Conn, error) { return nil, errors.New("not dialled") },
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	conns := make(chan *reconnect.Conn, 1)
	sup := reconnect.New(reconnect.Config{
		Dial:   reconnect.WebSocketDialer(url, nil, 0),
		Logger: slog.New(slog.DiscardHandler),
	})
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		sup.Run(ctx, func(ctx context.Context, c *reconnect.Conn) error {
			conns <- c
			<-ctx.Done()
			c.CloseNow()
			return ctx.Err()
		})
	}()
	tb.Cleanup(func() { cancel(); <-ran })
	select {
	case c := <-conns:
		return &upstreamConn{Conn: c, srv: srv}
	case <-time.After(10 * time.Second):
		tb.Fatal("the test node was not dialled")
		return nil
	}
}

// sendTestPattern is what message bodies are cut from.
var sendTestPattern = func() []byte {
	b := make([]byte, 4<<20)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}()

// sendTestFrame is message k of sender s: s and k in its first 16 bytes,
// then size-16 bytes that depend on both.
func sendTestFrame(buf []byte, s, k, size int) []byte {
	buf = binary.BigEndian.AppendUint64(buf[:0], uint64(s))
	buf = binary.BigEndian.AppendUint64(buf, uint64(k))
	from := (s*7 + k) % 26
	return append(buf, sendTestPattern[from:from+size-16]...)
}

// TestUpstreamSendConcurrent: many goroutines send at once, one message or
// two per call, small ones and messages of several MiB, each reusing its
// buffer as soon as send returns (a queued message must have been copied).
// The node gets every message once, intact, and each sender's in the order
// it sent them.
func TestUpstreamSendConcurrent(t *testing.T) {
	u, got, _ := sendTestConn(t)
	const senders, perSender = 16, 120
	size := func(s, k int) int {
		if s%4 == 0 && k%40 == 7 {
			return 3<<20 + s // several MiB
		}
		return 40 + (s*13+k*7)%600
	}
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			var a, b []byte
			for k := 0; k < perSender; k++ {
				a = sendTestFrame(a, s, k, size(s, k))
				if k%3 == 2 && k+1 < perSender {
					k++
					b = sendTestFrame(b, s, k, size(s, k))
					u.send(a, b)
					clear(b) // the caller's memory is its own again
				} else {
					u.send(a)
				}
				clear(a)
			}
		})
	}
	wg.Wait()

	next := make([]int, senders) // the next k expected from each sender
	var want []byte
	timeout := time.After(30 * time.Second)
	for n := 0; n < senders*perSender; n++ {
		var msg []byte
		select {
		case msg = <-got:
		case <-timeout:
			t.Fatalf("node got %d of %d messages", n, senders*perSender)
		}
		if len(msg) < 16 {
			t.Fatalf("message %d: %d bytes", n, len(msg))
		}
		s, k := int(binary.BigEndian.Uint64(msg)), int(binary.BigEndian.Uint64(msg[8:]))
		if s >= senders || k != next[s] {
			t.Fatalf("message %d: sender %d message %d, want message %d", n, s, k, next[min(s, senders-1)])
		}
		next[s]++
		if want = sendTestFrame(want, s, k, size(s, k)); !bytes.Equal(msg, want) {
			t.Fatalf("sender %d message %d: %d bytes differ from the %d sent", s, k, len(msg), len(want))
		}
	}
	testnode.Poll(t, "the writer to exit with nothing queued", func() bool {
		u.sq.mu.Lock()
		defer u.sq.mu.Unlock()
		return !u.sq.writing && len(u.sq.ends) == 0
	})
}

// TestUpstreamSendLoneIsInline: a send while no one writes is written by
// its caller before send returns: no writer goroutine, no hand-over for a
// lone request.
func TestUpstreamSendLoneIsInline(t *testing.T) {
	u, got, _ := sendTestConn(t)
	for i := range 3 {
		frame := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"eth_chainId"}`, i)
		u.send(frame)
		u.sq.mu.Lock()
		writing, queued := u.sq.writing, len(u.sq.ends)
		u.sq.mu.Unlock()
		if writing || queued != 0 {
			t.Fatalf("send %d returned with writing %v, %d queued; want it written", i, writing, queued)
		}
		if msg := <-got; !bytes.Equal(msg, frame) {
			t.Fatalf("node got %q, want %q", msg, frame)
		}
	}
}

// TestUpstreamSendQueueBounded: while the node reads nothing, the writer
// waits on the socket, and muxd holds at most sendQueueLimit plus one send
// of what sends have returned for and the writer has not yet written (the
// queue and the batch being written together) before the next send waits;
// once the node reads, every frame arrives intact, in each sender's order.
func TestUpstreamSendQueueBounded(t *testing.T) {
	gate := make(chan struct{})
	u, got, _ := sendTestConnGated(t, gate)
	// Far past the socket's buffers and the limit: the first sender to
	// write waits on the socket, the others fill the queue.
	const senders, perSender, size = 4, 10, 1 << 20
	written := func() int64 { // bytes the writer has written: every frame is size
		var m dto.Metric
		if err := u.srv.metrics.UpstreamFramesOut.Write(&m); err != nil {
			t.Error(err)
		}
		return int64(m.GetCounter().GetValue()) * size
	}
	var (
		accepted atomic.Int64 // bytes of the sends that have returned
		mu       sync.Mutex
		peak     int64 // the most accepted and not yet written, seen after a send
		wg       sync.WaitGroup
	)
	for s := range senders {
		wg.Go(func() {
			var f []byte
			for k := range perSender {
				f = sendTestFrame(f, s, k, size)
				u.send(f)
				// Both figures only err low here: another send may
				// return before it adds, a write may finish before
				// it is read.
				held := accepted.Add(size) - written()
				mu.Lock()
				peak = max(peak, held)
				mu.Unlock()
			}
		})
	}
	testnode.Poll(t, "the queue to reach its limit", func() bool {
		u.sq.mu.Lock()
		defer u.sq.mu.Unlock()
		return len(u.sq.buf)+u.sq.writingQueued > sendQueueLimit
	})
	close(gate)
	next := make([]int, senders)
	var want []byte
	for range senders * perSender {
		msg := <-got
		s, k := int(binary.BigEndian.Uint64(msg)), int(binary.BigEndian.Uint64(msg[8:]))
		if s >= senders || k != next[s] {
			t.Fatalf("got sender %d message %d out of order", s, k)
		}
		next[s]++
		if want = sendTestFrame(want, s, k, size); !bytes.Equal(msg, want) {
			t.Fatalf("sender %d message %d: %d bytes differ from the %d sent", s, k, len(msg), len(want))
		}
	}
	wg.Wait()
	if peak > sendQueueLimit+size {
		t.Fatalf("muxd held %d bytes sends had returned for and not yet written, past the limit %d plus one send (%d)", peak, sendQueueLimit, size)
	}
}

// TestUpstreamSendAfterFailure: once a write fails, the connection is
// closed, what was queued is dropped, and later sends return at once
// without writing.
func TestUpstreamSendAfterFailure(t *testing.T) {
	u, got, nodeSide := sendTestConn(t)
	u.send([]byte(`{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`))
	if msg := <-got; string(msg) != `{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}` {
		t.Fatalf("node got %q", msg)
	}
	u.CloseNow() // as the reader does when it fails; writes now fail
	(<-nodeSide).CloseNow()
	u.send([]byte(`{"jsonrpc":"2.0","id":2,"method":"eth_chainId"}`), []byte(`{"jsonrpc":"2.0","id":3,"method":"eth_chainId"}`))
	u.send([]byte(`{"jsonrpc":"2.0","id":4,"method":"eth_chainId"}`))
	testnode.Poll(t, "the writer to fail and exit", func() bool {
		u.sq.mu.Lock()
		defer u.sq.mu.Unlock()
		return u.sq.broken && !u.sq.writing
	})
	u.send([]byte(`{"jsonrpc":"2.0","id":5,"method":"eth_chainId"}`))
	u.sq.mu.Lock()
	writing, queued := u.sq.writing, len(u.sq.ends)
	u.sq.mu.Unlock()
	if writing || queued != 0 {
		t.Fatalf("a send after the failure: writing %v, %d queued; want neither", writing, queued)
	}
	select {
	case msg := <-got:
		t.Fatalf("node got %q after the connection failed", msg)
	default:
	}
}

// fillSendQueue starts two senders of large frames (senders 10 and 11, n
// of size bytes each) to u, whose node reads nothing, and returns once the
// queue is past its limit, one of them writing (waiting on the socket) and
// the other waiting for room; done is closed when both have sent all.
func fillSendQueue(t *testing.T, u *upstreamConn, n, size int) (done <-chan struct{}) {
	t.Helper()
	finished := make(chan struct{})
	var wg sync.WaitGroup
	for s := 10; s < 12; s++ {
		wg.Go(func() {
			var f []byte
			for k := range n {
				f = sendTestFrame(f, s, k, size)
				u.send(f)
			}
		})
	}
	go func() { wg.Wait(); close(finished) }()
	testnode.Poll(t, "the queue to pass its limit with a large sender waiting", func() bool {
		u.sq.mu.Lock()
		defer u.sq.mu.Unlock()
		return u.sq.writing && len(u.sq.buf)+u.sq.writingQueued > sendQueueLimit
	})
	select {
	case <-finished:
		t.Fatal("the large senders did not wait for room")
	default:
	}
	return finished
}

// returnsWithin fails the test unless f returns within a generous bound: f
// must not wait for the node, which reads nothing.
func returnsWithin(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s waited for a node that reads nothing", what)
	}
}

// TestUpstreamSendSmallDoesNotWaitForLarge: while large requests fill the
// queue (the node slow to read them), a small send is queued at once: it
// waits only for small sends ahead of it. A large one still waits. Every
// frame then arrives, each sender's in order.
func TestUpstreamSendSmallDoesNotWaitForLarge(t *testing.T) {
	gate := make(chan struct{})
	u, got, _ := sendTestConnGated(t, gate)
	const n, size = 12, 3 << 20 // far past the socket's buffers
	largeDone := fillSendQueue(t, u, n, size)

	var small []byte
	for k := range 3 {
		small = sendTestFrame(small, 1, k, 100)
		returnsWithin(t, "a small send", func() { u.send(small) })
	}
	largeSent := make(chan struct{})
	go func() {
		u.send(sendTestFrame(nil, 2, 0, smallSend+1))
		close(largeSent)
	}()
	// The large send waits: the queue stays past its limit while the node
	// reads nothing. (Checked when the gate opens: it has not returned.)
	testnode.Poll(t, "the small sends to be queued", func() bool {
		u.sq.mu.Lock()
		defer u.sq.mu.Unlock()
		return u.sq.smallQueued+u.sq.smallWriting >= 3*100
	})
	select {
	case <-largeSent:
		t.Fatal("a send just past smallSend did not wait for room")
	default:
	}
	close(gate)
	<-largeDone
	<-largeSent
	next := map[int]int{}
	for range 2*n + 3 + 1 {
		msg := <-got
		s, k := int(binary.BigEndian.Uint64(msg)), int(binary.BigEndian.Uint64(msg[8:]))
		if k != next[s] {
			t.Fatalf("sender %d: message %d, want %d", s, k, next[s])
		}
		next[s]++
	}
}

// TestUpstreamSendNoWait: sendNoWait, how the upstream reader and muxd's
// other goroutines send, returns at once while the queue is full and the
// node reads nothing (the reader waiting there would stop every answer and
// push), and does not write itself when no one is writing. Its frames go
// in order once the node reads.
func TestUpstreamSendNoWait(t *testing.T) {
	t.Run("queue_full", func(t *testing.T) {
		gate := make(chan struct{})
		u, got, _ := sendTestConnGated(t, gate)
		const n, size = 12, 3 << 20
		largeDone := fillSendQueue(t, u, n, size)
		var f []byte
		for k := range 3 {
			f = sendTestFrame(f, 1, k, 1<<20) // not small: sendNoWait waits for nothing
			returnsWithin(t, "sendNoWait", func() { u.sendNoWait(f) })
		}
		close(gate)
		<-largeDone
		next := map[int]int{}
		for range 2*n + 3 {
			msg := <-got
			s, k := int(binary.BigEndian.Uint64(msg)), int(binary.BigEndian.Uint64(msg[8:]))
			if k != next[s] {
				t.Fatalf("sender %d: message %d, want %d", s, k, next[s])
			}
			next[s]++
		}
	})
	t.Run("no_inline_write", func(t *testing.T) {
		// 40 MiB at once, more than the socket's buffers take while the
		// node reads nothing: written inline, it would wait.
		gate := make(chan struct{})
		u, got, _ := sendTestConnGated(t, gate)
		big := bytes.Repeat(sendTestPattern, 10) // 40 MiB
		returnsWithin(t, "sendNoWait of 40 MiB with no one writing", func() { u.sendNoWait(big) })
		close(gate)
		if msg := <-got; !bytes.Equal(msg, big) {
			t.Fatalf("got %d bytes, want the 40 MiB sent", len(msg))
		}
	})
}

// discardNode returns the URL of a WebSocket node that reads and drops
// every message.
func discardNode(tb testing.TB) string {
	tb.Helper()
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(64 << 20)
		buf := make([]byte, 64<<10) // reused: the benchmarks count the sender's allocations
		for {
			_, r, err := c.Reader(context.Background())
			if err != nil {
				return
			}
			if _, err := io.CopyBuffer(io.Discard, r, buf); err != nil {
				return
			}
		}
	}))
	tb.Cleanup(node.Close)
	return "ws" + strings.TrimPrefix(node.URL, "http")
}

// BenchmarkUpstreamSendLone: one sender, one request at a time, as bench
// (a)'s lone client: each send finds no one writing, so its caller writes
// the frame and flushes the socket itself.
func BenchmarkUpstreamSendLone(b *testing.B) {
	u := dialSendTestConn(b, discardNode(b))
	req := []byte(`{"jsonrpc":"2.0","id":1234,"method":"eth_blockNumber","params":[]}`)
	b.SetBytes(int64(len(req)))
	b.ReportAllocs()
	for b.Loop() {
		u.send(req)
	}
}

// BenchmarkUpstreamSendBurst: many senders at once, as bench (c)'s
// clients: most sends find someone writing and queue, and the writer
// writes what queued meanwhile with one flush.
func BenchmarkUpstreamSendBurst(b *testing.B) {
	u := dialSendTestConn(b, discardNode(b))
	req := []byte(`[{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[{"to":"0x00000000000000000000000000000000deadbeef","data":"0x70a08231"},"latest"]}]`)
	b.SetBytes(int64(len(req)))
	b.SetParallelism(50) // 100 senders on 2 cores
	b.ReportAllocs()
	before, counted := writeSyscalls()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			u.send(req)
		}
	})
	if after, ok := writeSyscalls(); counted && ok {
		b.ReportMetric(float64(after-before)/float64(b.N), "writes/op")
	}
}

// writeSyscalls is the number of write system calls the process has made
// (Linux's /proc/self/io), and whether it could be read.
func writeSyscalls() (uint64, bool) {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// TestUpstreamSendLoneAllocs: a lone request, written and flushed by its
// sender, allocates nothing (the node here reads into a reused buffer).
func TestUpstreamSendLoneAllocs(t *testing.T) {
	u := dialSendTestConn(t, discardNode(t))
	req := []byte(`{"jsonrpc":"2.0","id":1234,"method":"eth_blockNumber","params":[]}`)
	u.send(req) // the socket's buffers, once
	if n := testing.AllocsPerRun(200, func() { u.send(req) }); n != 0 {
		t.Errorf("a lone send: %v allocations, want 0", n)
	}
}
