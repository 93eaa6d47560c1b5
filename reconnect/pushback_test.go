//go:build unix

package reconnect

import (
	"bytes"
	"io"
	"net"
	"testing"
)

// TestPushbackWriter: a write into a socket with room is not taken for one
// the node's side made room for, however long it took (on a busy host it
// may wait for the CPU); a write that found the socket full and completed
// once the peer read is. Not a TCP socket: no writer (writes are timed).
func TestPushbackWriter(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if pushbackWriter(a) != nil {
		t.Fatal("a writer for net.Pipe")
	}

	client, server := tcpPair(t) // 32 KiB buffers
	defer client.Close()
	defer server.Close()
	write := pushbackWriter(client)
	if write == nil {
		t.Fatal("no writer for a TCP socket")
	}
	pushed, err := write([]byte("small"))
	if err != nil || pushed {
		t.Fatalf("a small write into an empty socket: pushed back %v, err %v", pushed, err)
	}
	small := make([]byte, 5)
	if _, err := io.ReadFull(server, small); err != nil || string(small) != "small" {
		t.Fatalf("read %q, %v", small, err)
	}

	// Far more than both sockets' buffers: the write waits for the peer.
	big := bytes.Repeat([]byte("x"), 8<<20)
	done := make(chan error, 1)
	var bigPushed bool
	go func() {
		var err error
		bigPushed, err = write(big)
		done <- err
	}()
	got, err := io.ReadAll(io.LimitReader(server, int64(len(big))))
	if err != nil || len(got) != len(big) {
		t.Fatalf("peer read %d bytes, %v", len(got), err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bigPushed {
		t.Fatal("a write that waited for the peer: not taken for one the socket pushed back on")
	}

	server.Close()
	client.Close()
	if _, err := write([]byte("after close")); err == nil {
		t.Fatal("a write on a closed socket succeeded")
	}
}
