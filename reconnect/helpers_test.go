package reconnect

import (
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// testTimeout bounds every wait in the tests so a bug fails instead of hanging.
const testTimeout = 10 * time.Second

// newServer starts a loopback WebSocket server whose handler runs h for every accepted
// connection (the connection is CloseNow'd when h returns) and returns its ws:// URL.
// Handlers should return once t.Context() is done.
func newServer(t *testing.T, opts *websocket.AcceptOptions, h func(c *websocket.Conn, r *http.Request)) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, opts)
		if err != nil {
			return
		}
		defer c.CloseNow()
		h(c, r)
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

// closingServer accepts and immediately closes every connection.
func closingServer(t *testing.T) string {
	return newServer(t, nil, func(c *websocket.Conn, _ *http.Request) {
		c.Close(websocket.StatusGoingAway, "bye")
	})
}

// readUntilError is a serve function body: it reads until the connection fails.
func readUntilError(ctx context.Context, c *Conn) error {
	for {
		if _, _, err := c.Read(ctx); err != nil {
			return err
		}
	}
}

// runSupervisor starts s.Run in the background and returns a function that cancels it
// and returns Run's result.
func runSupervisor(t *testing.T, s *Supervisor, serve func(context.Context, *Conn) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, serve) }()
	var once sync.Once
	var result error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case result = <-done:
			case <-time.After(testTimeout):
				t.Fatal("Run did not return after cancel")
			}
		})
		return result
	}
	t.Cleanup(func() { stop() })
	return stop
}

func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testTimeout):
		t.Fatal("timed out waiting for event")
		panic("unreachable")
	}
}

// fakeBackOff returns a fixed delay and records the calls made to it.
type fakeBackOff struct {
	mu     sync.Mutex
	d      time.Duration
	events []string
}

func (b *fakeBackOff) NextBackOff() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events = append(b.events, "next")
	return b.d
}

func (b *fakeBackOff) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events = append(b.events, "reset")
}

func (b *fakeBackOff) Events() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.events...)
}

// logRecorder is a slog.Handler that forwards every record to a channel.
type logRecorder struct{ ch chan slog.Record }

func newLogRecorder() *logRecorder { return &logRecorder{ch: make(chan slog.Record, 1024)} }

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecorder) WithGroup(string) slog.Handler            { return h }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.ch <- r.Clone():
	default:
	}
	return nil
}

// next returns the next record with message msg, skipping others.
func (h *logRecorder) next(t *testing.T, msg string) slog.Record {
	t.Helper()
	for {
		if r := recv(t, h.ch); r.Message == msg {
			return r
		}
	}
}

func attr(r slog.Record, key string) slog.Value {
	var v slog.Value
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}

// pipeNode is a WebSocket node served over in-memory pipes, so that a test
// can run node and client inside a synctest bubble.
type pipeNode struct {
	l         *pipeListener
	srv       *http.Server
	handlers  sync.WaitGroup
	closeDone func() // newDeafNode's: stops its senders; nil otherwise
	// writeDelay, when set, makes every write on the dialling side take
	// that long (a busy host), the socket having room all along.
	writeDelay time.Duration
}

// slowWriteConn is a net.Conn whose writes each take delay first.
type slowWriteConn struct {
	net.Conn
	delay time.Duration
}

func (c slowWriteConn) Write(p []byte) (int, error) {
	time.Sleep(c.delay)
	return c.Conn.Write(p)
}

// newPipeNode serves h for every connection dialled through the node's
// dial. h must return once its connection fails; call stop before the
// bubble's function returns.
func newPipeNode(h func(c *websocket.Conn, r *http.Request)) *pipeNode {
	n := &pipeNode{l: &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}}
	n.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.handlers.Add(1)
		defer n.handlers.Done()
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		h(c, r)
	})}
	go n.srv.Serve(n.l)
	return n
}

// newBlackHoleNode accepts the WebSocket handshake and then reads and
// discards everything, answering nothing, not even pings: a node whose
// socket takes every byte while nothing behind it is alive.
func newBlackHoleNode() *pipeNode {
	return newDeafNode(func(_ io.Writer, done <-chan struct{}) { <-done })
}

// newDeafNode is a node that accepts the WebSocket handshake, then reads
// and discards everything muxd sends (frames, pings: it never answers one)
// while send writes to the socket what it likes (raw frames, see
// serverFrame) until the connection fails or done is closed.
func newDeafNode(send func(w io.Writer, done <-chan struct{})) *pipeNode {
	return newRawNode(send, true)
}

// newStuckNode is newDeafNode reading nothing after the handshake: our
// writes wait for the socket for good (its request path hung).
func newStuckNode(send func(w io.Writer, done <-chan struct{})) *pipeNode {
	return newRawNode(send, false)
}

// newRawNode is newDeafNode (drain: it reads and discards what we send)
// or newStuckNode.
func newRawNode(send func(w io.Writer, done <-chan struct{}), drain bool) *pipeNode {
	n := &pipeNode{l: &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}}
	done := make(chan struct{})
	n.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.handlers.Add(1)
		defer n.handlers.Done()
		sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
			base64.StdEncoding.EncodeToString(sum[:]) + "\r\n\r\n")
		if rw.Flush() != nil {
			return
		}
		var sending sync.WaitGroup
		defer sending.Wait()
		defer conn.Close() // ends send's writes
		sending.Go(func() { send(conn, done) })
		if drain {
			io.Copy(io.Discard, rw)
		} else {
			<-done
		}
	})}
	n.closeDone = func() { close(done) }
	go n.srv.Serve(n.l)
	return n
}

// serverFrame returns the header of an unmasked server frame: a final text
// frame carrying n bytes.
func serverFrame(n int) []byte {
	h := []byte{0x81}
	switch {
	case n < 126:
		h = append(h, byte(n))
	case n < 1<<16:
		h = append(h, 126, byte(n>>8), byte(n))
	default:
		h = append(h, 127)
		h = binary.BigEndian.AppendUint64(h, uint64(n))
	}
	return h
}

// dial is a dialNet for webSocketDialer: it connects to the node whatever
// the address.
func (n *pipeNode) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case n.l.conns <- server:
		if n.writeDelay > 0 {
			return slowWriteConn{client, n.writeDelay}, nil
		}
		return client, nil
	case <-n.l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// stop closes the node and waits for its handlers to return.
func (n *pipeNode) stop() {
	if n.closeDone != nil {
		n.closeDone()
	}
	n.srv.Close()
	n.handlers.Wait()
}

// pipeListener is a net.Listener whose connections come from pipeNode's dialNet.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
