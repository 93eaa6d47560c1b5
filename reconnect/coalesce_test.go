package reconnect

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// countingConn records how many Write calls reach the socket.
type countingConn struct {
	net.Conn
	mu     sync.Mutex
	writes int
	gate   chan struct{} // when set, each socket write waits for it to close
	inside chan struct{} // receives once a socket write is waiting at the gate
}

func (c *countingConn) Write(p []byte) (int, error) {
	if c.gate != nil {
		select {
		case c.inside <- struct{}{}:
		default:
		}
		<-c.gate
	}
	c.mu.Lock()
	c.writes++
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// TestCoalescingConnMergesAndKeepsOrder: writes made while the socket is busy
// go out together in one system call, in order.
func TestCoalescingConnMergesAndKeepsOrder(t *testing.T) {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	cc := &countingConn{Conn: a, gate: make(chan struct{}), inside: make(chan struct{}, 1)}
	c := newCoalescingConn(cc)

	var want bytes.Buffer
	write := func(i int) {
		msg := []byte{byte(i), byte(i), '\n'}
		want.Write(msg)
		if n, err := c.Write(msg); err != nil || n != len(msg) {
			t.Fatalf("Write %d: %d, %v", i, n, err)
		}
	}
	write(0)
	<-cc.inside // the first frame's socket write is now held at the gate
	for i := 1; i < 100; i++ {
		write(i)
	}
	got := make(chan []byte)
	go func() {
		buf := make([]byte, want.Len())
		io.ReadFull(b, buf)
		got <- buf
	}()
	close(cc.gate)
	if g := <-got; !bytes.Equal(g, want.Bytes()) {
		t.Fatalf("bytes out of order or lost")
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.writes != 2 {
		t.Errorf("%d socket writes for 1 frame and 99 queued behind it, want 2", cc.writes)
	}
}

// TestCoalescingConnReportsErrors: once the socket fails, Write says so.
func TestCoalescingConnReportsErrors(t *testing.T) {
	a, b := net.Pipe()
	b.Close()
	c := newCoalescingConn(a)
	c.Write([]byte("x")) // accepted; the flusher finds the socket closed
	c.mu.Lock()
	for c.flushing {
		c.drained.Wait()
	}
	c.mu.Unlock()
	if _, err := c.Write([]byte("y")); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("Write after a failed flush: %v, want io.ErrClosedPipe", err)
	}
}
