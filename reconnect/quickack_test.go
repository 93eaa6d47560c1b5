package reconnect

import (
	"bytes"
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
)

// The upstream socket asks for an immediate acknowledgement after each read
// that took a large answer's payload from the socket, and after no other.
func TestCoalescingConnAcksLargeReads(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 3*readAheadSize)
	tests := []struct {
		name   string
		chunks [][]byte
		reads  []int // the size of each Read the caller makes
		acks   int
	}{
		{"small reads through the buffer", [][]byte{[]byte("abcdefgh")}, []int{3, 3, 2}, 0},
		{"a full buffer of small answers", [][]byte{big[:readAheadSize]}, []int{100, 100}, 0},
		{"a large payload, three socket reads", [][]byte{big[:readAheadSize], big[:readAheadSize], big[:readAheadSize]}, []int{len(big), len(big), len(big)}, 3},
		{"buffered bytes first take no ack", [][]byte{[]byte("head"), big}, []int{2, len(big), len(big)}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCoalescingConn(&chunkConn{chunks: tc.chunks, err: io.EOF})
			acks := 0
			c.ackNow = func() error { acks++; return nil }
			for i, size := range tc.reads {
				if n, err := c.Read(make([]byte, size)); err != nil && n == 0 { // io.Reader: bytes may come with the error
					t.Fatalf("read %d: %v", i, err)
				}
			}
			if acks != tc.acks {
				t.Errorf("%d immediate acks asked, want %d", acks, tc.acks)
			}
		})
	}
}

// An option the socket refuses is asked once, not on every read after.
func TestCoalescingConnStopsAskingAfterRefusal(t *testing.T) {
	big := bytes.Repeat([]byte("x"), readAheadSize)
	c := newCoalescingConn(&chunkConn{chunks: [][]byte{big, big, big}, err: io.EOF})
	asked := 0
	c.ackNow = func() error { asked++; return errors.New("refused") }
	for range 3 {
		if n, err := c.Read(make([]byte, len(big))); err != nil && n == 0 {
			t.Fatal(err)
		}
	}
	if asked != 1 {
		t.Errorf("asked %d times, want once", asked)
	}
}

// On Linux a TCP socket takes TCP_QUICKACK; a connection that is not a
// TCP socket gets no acker.
func TestQuickAckerOnRealSockets(t *testing.T) {
	pa, pb := net.Pipe()
	t.Cleanup(func() { pa.Close(); pb.Close() })
	if quickAcker(pa) != nil {
		t.Error("an in-memory pipe got an acker")
	}
	c, peer := tcpPair(t)
	t.Cleanup(func() { c.Close(); peer.Close() })
	ack := quickAcker(c)
	if runtime.GOOS != "linux" {
		if ack != nil {
			t.Errorf("an acker on %s", runtime.GOOS)
		}
		return
	}
	if ack == nil {
		t.Fatal("a TCP socket got no acker")
	}
	if err := ack(); err != nil {
		t.Fatalf("TCP_QUICKACK refused: %v", err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = ack() }); n != 0 {
		t.Errorf("asking allocates %v times, want 0", n)
	}
	c.Close()
	if ack() == nil {
		t.Error("asking on a closed socket succeeded")
	}
}
