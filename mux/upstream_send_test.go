package mux

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
	ws, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(node.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	srv, err := New(Config{
		Dial:   func(context.Context) (*websocket.Conn, error) { return nil, errors.New("not dialled") },
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return &upstreamConn{Conn: &reconnect.Conn{Conn: ws, Gen: 1}, srv: srv}, got, nodeSide
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
