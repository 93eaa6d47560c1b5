package mux

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// recordingConn records every Write that reaches the socket, and passes it
// on to the socket it wraps, if any; block, when set, holds the first one
// until it is closed.
type recordingConn struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
	fail   error
	block  chan struct{}
	inside chan struct{} // closed when the first Write has started
}

func (c *recordingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	first := len(c.writes) == 0
	c.writes = append(c.writes, bytes.Clone(p))
	fail, block, inside := c.fail, c.block, c.inside
	c.mu.Unlock()
	if first && block != nil {
		close(inside)
		<-block
	}
	if fail != nil {
		return 0, fail
	}
	if c.Conn != nil {
		return c.Conn.Write(p)
	}
	return len(p), nil
}

func (c *recordingConn) SetWriteDeadline(d time.Time) error {
	if c.Conn != nil {
		return c.Conn.SetWriteDeadline(d)
	}
	return nil
}

func (c *recordingConn) Close() error {
	if c.Conn != nil {
		return c.Conn.Close()
	}
	return nil
}

func (c *recordingConn) got() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s []string
	for _, w := range c.writes {
		s = append(s, string(w))
	}
	return s
}

func TestCorkConn(t *testing.T) {
	boom := errors.New("boom")
	big := strings.Repeat("x", corkLimit/2+1)
	tests := []struct {
		name    string
		fail    error
		run     func(c *corkConn) error
		want    []string // what reached the socket, one entry per system call
		wantErr error
	}{
		{"uncorked writes go straight through", nil, func(c *corkConn) error {
			c.Write([]byte("a"))
			c.Write([]byte("b"))
			return nil
		}, []string{"a", "b"}, nil},
		{"corked writes become one", nil, func(c *corkConn) error {
			c.cork()
			for _, s := range []string{"a", "b", "c"} {
				c.Write([]byte(s))
			}
			return c.uncork()
		}, []string{"abc"}, nil},
		{"uncork with nothing buffered writes nothing", nil, func(c *corkConn) error {
			c.cork()
			return c.uncork()
		}, nil, nil},
		// The buffer and the message that would cross corkLimit go out
		// at once, the message uncopied: one writev on a TCP socket, two
		// writes on this fake.
		{"past the limit the buffer is written at once", nil, func(c *corkConn) error {
			c.cork()
			c.Write([]byte(big))
			c.Write([]byte(big)) // crosses corkLimit
			c.Write([]byte("tail"))
			return c.uncork()
		}, []string{big, big, "tail"}, nil},
		{"close writes out what is buffered", nil, func(c *corkConn) error {
			c.cork()
			c.Write([]byte("answer"))
			c.Write([]byte("close frame"))
			return c.Close()
		}, []string{"answerclose frame"}, nil},
		{"writes after close fail", nil, func(c *corkConn) error {
			c.Close()
			_, err := c.Write([]byte("late"))
			return err
		}, nil, net.ErrClosed},
		{"after uncork, writes go straight again", nil, func(c *corkConn) error {
			c.cork()
			c.Write([]byte("a"))
			err := c.uncork()
			c.Write([]byte("b"))
			return err
		}, []string{"a", "b"}, nil},
		{"a socket error comes back from uncork", boom, func(c *corkConn) error {
			c.cork()
			c.Write([]byte("a"))
			return c.uncork()
		}, []string{"a"}, boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := &recordingConn{fail: tt.fail}
			err := tt.run(&corkConn{Conn: rc})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if got := rc.got(); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("socket writes = %.60q, want %.60q", got, tt.want)
			}
		})
	}
}

// TestCorkConnKeepsNoBigBuffer: after a burst, an idle session holds at
// most maxKeptSessionBuf of cork buffer (10,000 idle clients).
func TestCorkConnKeepsNoBigBuffer(t *testing.T) {
	c := &corkConn{Conn: &recordingConn{}}
	c.cork()
	for range 100 {
		c.Write(make([]byte, 700)) // a burst of log pushes
	}
	if err := c.uncork(); err != nil {
		t.Fatal(err)
	}
	if cap(c.buf) > maxKeptSessionBuf {
		t.Errorf("an idle session keeps %d KiB of cork buffer", cap(c.buf)>>10)
	}
}

// TestCorkConnCloseBounded: Close of a connection whose peer does not read
// gives up on the buffered bytes after corkCloseWait instead of waiting for
// the peer for ever.
func TestCorkConnCloseBounded(t *testing.T) {
	a, b := net.Pipe() // writes block until b reads; b never does
	t.Cleanup(func() { b.Close() })
	c := &corkConn{Conn: a}
	c.cork()
	c.Write([]byte("never read"))
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case <-closed:
	case <-time.After(testTimeout):
		t.Fatal("Close waited for a peer that does not read")
	}
}

// TestCorkConnOrder: a write that comes while uncork is writing the buffer
// (a pong from the reader goroutine) goes out after it, never inside it.
func TestCorkConnOrder(t *testing.T) {
	rc := &recordingConn{block: make(chan struct{}), inside: make(chan struct{})}
	c := &corkConn{Conn: rc}
	c.cork()
	c.Write([]byte("first"))
	uncorked := make(chan error, 1)
	go func() { uncorked <- c.uncork() }()
	<-rc.inside // uncork is in the socket write, holding the lock
	wrote := make(chan struct{})
	go func() {
		c.Write([]byte("pong"))
		close(wrote)
	}()
	close(rc.block)
	if err := <-uncorked; err != nil {
		t.Fatal(err)
	}
	<-wrote
	if got := rc.got(); fmt.Sprint(got) != fmt.Sprint([]string{"first", "pong"}) {
		t.Errorf("socket writes = %q, want [first pong]", got)
	}
}

// TestWSTransportCloseWhileCorked: the client closes while answers sit in
// the cork buffer. coder/websocket writes its answering close frame behind
// them and closes the socket at once; both the answer and the close frame
// must still reach the client (found in review: Close dropped the buffer).
func TestWSTransportCloseWhileCorked(t *testing.T) {
	uncorked := make(chan error, 1)
	clientClosing := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &corkingWriter{ResponseWriter: w}
		conn, err := websocket.Accept(cw, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		cw.conn.cork() // the writer is mid-batch
		if err := conn.Write(context.Background(), websocket.MessageText, []byte(`{"id":1}`)); err != nil {
			t.Error(err)
		}
		<-clientClosing
		conn.Reader(context.Background()) // the session reader meets the close
		uncorked <- cw.conn.uncork()
	}))
	t.Cleanup(srv.Close)
	ctx := context.Background()
	client, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.CloseNow() })
	closeErr := make(chan error, 1)
	go func() { closeErr <- client.Close(websocket.StatusNormalClosure, "bye") }()
	close(clientClosing)
	if err := await(t, closeErr, "the client's close handshake"); err != nil {
		t.Errorf("client close handshake: %v (the server's close frame was lost)", err)
	}
	if err := await(t, uncorked, "the server's uncork"); err != nil {
		t.Errorf("uncork after the close: %v", err)
	}
}

// TestWSTransportCorks: through a real coder/websocket server connection,
// several queued messages reach the socket in one write and the peer reads
// each as its own message, in order; a single message is not copied into
// the cork buffer.
func TestWSTransportCorks(t *testing.T) {
	ready := make(chan *wsTransport, 1)
	var rc *recordingConn
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &corkingWriter{ResponseWriter: w}
		conn, err := websocket.Accept(cw, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		if cw.conn == nil {
			t.Error("Accept did not hijack through the corking writer")
			return
		}
		rc = &recordingConn{Conn: cw.conn.Conn}
		cw.conn.Conn = rc
		ready <- &wsTransport{conn: conn, cork: cw.conn}
		<-done
		conn.CloseNow()
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(done) })
	ctx := context.Background()
	client, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.CloseNow() })
	tr := await(t, ready, "the server's transport")

	msgs := [][]byte{[]byte(`{"id":1}`), []byte(`{"id":2}`), []byte(`{"id":3}`)}
	if err := tr.write(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if err := tr.write(ctx, [][]byte{[]byte(`{"id":4}`)}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 4; i++ {
		_, got, err := client.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf(`{"id":%d}`, i); string(got) != want {
			t.Fatalf("message %d = %s, want %s", i, got, want)
		}
	}
	if n := len(rc.got()); n != 2 {
		t.Errorf("%d socket writes for a batch of 3 and a single message, want 2", n)
	}
}

// await receives from ch, failing the test if nothing comes within
// testTimeout (a server handler that failed sends nothing).
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
