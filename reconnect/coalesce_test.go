package reconnect

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
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

// TestCoalescingConnCorkHoldsUntilFlush: writes made while corked reach the
// socket only at Flush, together in one system call and in order; once
// flushed, a write goes to the socket at once.
func TestCoalescingConnCorkHoldsUntilFlush(t *testing.T) {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	cc := &countingConn{Conn: a}
	c := newCoalescingConn(cc)
	writes := func() int {
		cc.mu.Lock()
		defer cc.mu.Unlock()
		return cc.writes
	}

	var want bytes.Buffer
	write := func(i int) {
		msg := []byte{byte(i), byte(i), '\n'}
		want.Write(msg)
		if n, err := c.Write(msg); err != nil || n != len(msg) {
			t.Fatalf("Write %d: %d, %v", i, n, err)
		}
	}
	c.Cork()
	for i := range 100 {
		write(i)
	}
	if n := writes(); n != 0 {
		t.Fatalf("%d socket writes while corked, want 0", n)
	}
	if !c.backlogged() {
		t.Error("backlogged() = false while corked with bytes held")
	}
	got := make(chan []byte)
	go func() {
		buf := make([]byte, want.Len()+3)
		io.ReadFull(b, buf)
		got <- buf
	}()
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := writes(); n != 1 {
		t.Errorf("%d socket writes for 100 frames written while corked, want 1", n)
	}
	if c.backlogged() {
		t.Error("backlogged() = true after Flush")
	}
	write(100) // uncorked: straight to the socket
	if g := <-got; !bytes.Equal(g, want.Bytes()) {
		t.Fatalf("bytes out of order or lost")
	}
	if n := writes(); n != 2 {
		t.Errorf("%d socket writes, want 2 (the flush, then the frame written uncorked)", n)
	}
}

// TestCoalescingConnReportsErrors: once the socket fails, Write and Flush
// say so, corked or not, and so they do after Close.
func TestCoalescingConnReportsErrors(t *testing.T) {
	a, b := net.Pipe()
	b.Close()
	c := newCoalescingConn(a)
	c.Cork()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatalf("Write while corked: %v, want it held", err)
	}
	if err := c.Flush(); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("Flush to a closed peer: %v, want io.ErrClosedPipe", err)
	}
	if _, err := c.Write([]byte("y")); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("Write after a failed flush: %v, want io.ErrClosedPipe", err)
	}

	d, e := net.Pipe()
	defer e.Close()
	c = newCoalescingConn(d)
	c.Cork()
	c.Write([]byte("z"))
	c.Close()
	if _, err := c.Write([]byte("z")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Write after Close: %v, want net.ErrClosed", err)
	}
	if err := c.Flush(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Flush after Close: %v, want net.ErrClosed", err)
	}
}

// The frames of TestCoalescingConnLargeFramesIntact: a header (payload
// length, writer, sequence number, SHA-256 of the payload) and a payload
// of bytes drawn from a generator seeded by writer and sequence number.
const frameHeaderLen = 4 + 4 + 8 + sha256.Size

func testFrame(writer, seq uint32, size int) []byte {
	f := make([]byte, frameHeaderLen+size)
	binary.BigEndian.PutUint32(f[0:], uint32(size))
	binary.BigEndian.PutUint32(f[4:], writer)
	binary.BigEndian.PutUint64(f[8:], uint64(seq))
	var seed [32]byte
	binary.BigEndian.PutUint32(seed[0:], writer)
	binary.BigEndian.PutUint32(seed[4:], seq)
	rand.NewChaCha8(seed).Read(f[frameHeaderLen:])
	sum := sha256.Sum256(f[frameHeaderLen:])
	copy(f[16:], sum[:])
	return f
}

// frameSizes is one writer's sequence of n frames: small ones with, if
// largeEvery > 0, a large one (5–12 MiB) every largeEvery, so that batches
// both far over and well under coalesceLimit alternate.
func frameSizes(r *rand.Rand, n, largeEvery int) []int {
	sizes := make([]int, n)
	for i := range sizes {
		if largeEvery > 0 && i%largeEvery == 1 {
			sizes[i] = 5<<20 + r.IntN(7<<20)
		} else {
			sizes[i] = 1 + r.IntN(4<<10)
		}
	}
	return sizes
}

// TestCoalescingConnLargeFramesIntact: several writers send frames of 5–12
// MiB mixed with small ones, concurrently, to a peer that reads a little at
// a time, each corking the conn now and then and flushing it while others
// write; every frame arrives intact, exactly once, and in each writer's
// order.
func TestCoalescingConnLargeFramesIntact(t *testing.T) {
	const (
		writers   = 4 // 2 mixing large frames with small ones, 2 sending small ones only
		readChunk = 16 << 10
	)
	tests := []struct {
		name string
		pair func(t *testing.T) (client, server net.Conn)
	}{
		{"pipe", func(*testing.T) (net.Conn, net.Conn) { return net.Pipe() }},
		{"tcp", tcpPair},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, server := tt.pair(t)
			t.Cleanup(func() { client.Close(); server.Close() })
			c := newCoalescingConn(client)

			r := rand.New(rand.NewPCG(1, 2))
			var sizes [writers][]int
			total := 0
			for w := range sizes {
				if w < 2 {
					sizes[w] = frameSizes(r, 12, 4) // 3 large frames
				} else {
					sizes[w] = frameSizes(r, 500, 0)
				}
				for _, n := range sizes[w] {
					total += frameHeaderLen + n
				}
			}

			// The peer reads readChunk bytes at a time and checks frames as
			// they complete.
			readErr := make(chan error, 1)
			go func() {
				readErr <- readFrames(bufio.NewReaderSize(slowReader{server, readChunk}, readChunk), sizes[:], total)
			}()

			// Each writer makes its frames first, then all start at once
			// and write back to back. Like coder/websocket, a writer
			// holds a lock for the whole frame and hands it over in
			// pieces of at most its bufio.Writer's 4 KiB.
			start := make(chan struct{})
			var frameMu sync.Mutex
			var ready sync.WaitGroup
			writeErr := make(chan error, writers)
			for w := range writers {
				ready.Add(1)
				go func() {
					frames := make([][]byte, len(sizes[w]))
					for seq, n := range sizes[w] {
						frames[seq] = testFrame(uint32(w), uint32(seq), n)
					}
					ready.Done()
					<-start
					for seq, f := range frames {
						if seq%3 == w%3 {
							c.Cork()
						}
						if err := writeInPieces(&frameMu, c, f, 4<<10); err != nil {
							writeErr <- fmt.Errorf("writer %d frame %d: %w", w, seq, err)
							return
						}
						frames[seq] = nil
						if seq%5 == w%5 {
							if err := c.Flush(); err != nil {
								writeErr <- fmt.Errorf("writer %d flush after frame %d: %w", w, seq, err)
								return
							}
						}
					}
					writeErr <- c.Flush()
				}()
			}
			ready.Wait()
			close(start)
			// The peer's verdict first: if it fails it stops reading, and
			// closing the sockets then releases the writers.
			select {
			case err := <-readErr:
				if err != nil {
					client.Close()
					server.Close()
					t.Fatal(err)
				}
			case <-time.After(time.Minute):
				t.Fatal("peer did not receive every frame")
			}
			for range writers {
				if err := <-writeErr; err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// writeInPieces writes f to w in pieces of at most n bytes, holding mu.
func writeInPieces(mu *sync.Mutex, w io.Writer, f []byte, n int) error {
	mu.Lock()
	defer mu.Unlock()
	for len(f) > 0 {
		piece := f[:min(n, len(f))]
		if _, err := w.Write(piece); err != nil {
			return err
		}
		clear(piece) // the caller may reuse p once Write returns
		f = f[len(piece):]
	}
	return nil
}

// readFrames reads frames until total bytes have arrived and checks that
// they are intact, each exactly once, each writer's in order.
func readFrames(r io.Reader, sizes [][]int, total int) error {
	next := make([]int, len(sizes))
	var hdr [frameHeaderLen]byte
	for got := 0; got < total; {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return fmt.Errorf("after %d of %d bytes: %w", got, total, err)
		}
		size := int(binary.BigEndian.Uint32(hdr[0:]))
		w := int(binary.BigEndian.Uint32(hdr[4:]))
		seq := int(binary.BigEndian.Uint64(hdr[8:]))
		if w >= len(sizes) || seq != next[w] || size != sizes[w][seq] {
			return fmt.Errorf("after %d of %d bytes: frame header says writer %d frame %d of %d bytes; want that writer's frame %d (lost, repeated or corrupted frame)",
				got, total, w, seq, size, next[w%len(next)])
		}
		payload := make([]byte, size)
		if _, err := io.ReadFull(r, payload); err != nil {
			return fmt.Errorf("writer %d frame %d: %w", w, seq, err)
		}
		if sum := sha256.Sum256(payload); !bytes.Equal(sum[:], hdr[16:]) {
			return fmt.Errorf("writer %d frame %d (%d bytes): payload corrupted", w, seq, size)
		}
		next[w]++
		got += frameHeaderLen + size
	}
	for w, n := range next {
		if n != len(sizes[w]) {
			return fmt.Errorf("writer %d: %d of %d frames arrived", w, n, len(sizes[w]))
		}
	}
	return nil
}

// slowReader reads at most n bytes per call.
type slowReader struct {
	r io.Reader
	n int
}

func (s slowReader) Read(p []byte) (int, error) { return s.r.Read(p[:min(len(p), s.n)]) }

// tcpPair returns both ends of a loopback TCP connection with small socket
// buffers, so that the kernel absorbs little and the reader's pace shows.
func tcpPair(t *testing.T) (client, server net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		client.Close()
		t.FailNow()
	}
	client.(*net.TCPConn).SetWriteBuffer(32 << 10)
	server.(*net.TCPConn).SetReadBuffer(32 << 10)
	return client, server
}

// TestCoalescingConnHoldsAtMostAChunk: while corked, the conn writes out
// what it holds once it reaches flushChunk, in pieces of that size, and
// writes a Write of flushChunk or more from the caller's memory, so that its
// buffers stay below two chunks whatever is written through it.
func TestCoalescingConnHoldsAtMostAChunk(t *testing.T) {
	client, peer := net.Pipe()
	defer peer.Close()
	defer client.Close()
	go io.Copy(io.Discard, peer)
	cc := &countingConn{Conn: client}
	c := newCoalescingConn(cc)

	check := func(when string) {
		t.Helper()
		c.mu.Lock()
		defer c.mu.Unlock()
		if cap(c.buf) >= 2*flushChunk || cap(c.spare) >= 2*flushChunk {
			t.Errorf("%s: buffers of %d and %d bytes, want each under %d", when, cap(c.buf), cap(c.spare), 2*flushChunk)
		}
	}
	c.Cork()
	piece := make([]byte, 4<<10)
	for range (8 << 20) / len(piece) { // one 8 MiB frame, as coder/websocket writes it
		if _, err := c.Write(piece); err != nil {
			t.Fatal(err)
		}
	}
	check("after 8 MiB in 4 KiB pieces")
	cc.mu.Lock()
	if want := (8 << 20) / flushChunk; cc.writes != want {
		t.Errorf("%d socket writes for 8 MiB corked, want %d (one per chunk)", cc.writes, want)
	}
	cc.mu.Unlock()
	for _, n := range []int{100, 12 << 20, 100, flushChunk, 3 << 20} {
		if _, err := c.Write(make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("after a %d-byte Write", n))
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	check("flushed")
}
