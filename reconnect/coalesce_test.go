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
	"testing/synctest"
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
// a time; every frame arrives intact, exactly once, and in each writer's
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
						if err := writeInPieces(&frameMu, c, f, 4<<10); err != nil {
							writeErr <- fmt.Errorf("writer %d frame %d: %w", w, seq, err)
							return
						}
						frames[seq] = nil
					}
					writeErr <- nil
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

// TestCoalescingConnBatchAfterLargeBatch walks, one socket write at a
// time, through the sequence that once corrupted frames: a small batch,
// then a batch larger than coalesceLimit, then small ones again. No batch
// being written may be appended to, so every frame arrives as written,
// once.
func TestCoalescingConnBatchAfterLargeBatch(t *testing.T) {
	client, peer := net.Pipe() // a Write returns only once the peer has read it all
	t.Cleanup(func() { client.Close(); peer.Close() })
	c := newCoalescingConn(client)

	frame := func(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }
	write := func(p []byte) {
		t.Helper()
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	read := func(want []byte) {
		t.Helper()
		got := make([]byte, len(want))
		if _, err := io.ReadFull(peer, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			i := 0
			for got[i] == want[i] {
				i++
			}
			t.Fatalf("peer read %q… at byte %d of a %d-byte frame of %q", got[i:min(i+8, len(got))], i, len(want), want[:1])
		}
	}
	idle := func() { // the flusher has finished and exited
		c.mu.Lock()
		for c.flushing {
			c.drained.Wait()
		}
		c.mu.Unlock()
	}

	small1, large, small2, small3 := frame('a', 1000), frame('L', coalesceLimit+1<<20), frame('b', 900), frame('c', 900)

	write(small1) // batch 1: small
	read(small1)
	idle()

	write(large) // batch 2: over coalesceLimit
	read(large[:1])
	write(small2) // queued while batch 2 is being written
	read(large[1:])

	read(small2[:1]) // batch 3 (small2) is being written
	write(small3)    // queued behind it: must not land in batch 3's array
	read(small2[1:])
	read(small3)
}

// TestCoalescingConnWaitersWake: a Write larger than coalesceLimit goes
// through at once when nothing is queued; a Write that waits behind a full
// queue returns the error when the socket fails or the conn is closed.
func TestCoalescingConnWaitersWake(t *testing.T) {
	tests := []struct {
		name    string
		fail    func(c *coalescingConn, peer net.Conn)
		wantErr error
	}{
		{"Close", func(c *coalescingConn, _ net.Conn) { c.Close() }, net.ErrClosed},
		{"socket error", func(_ *coalescingConn, peer net.Conn) { peer.Close() }, io.ErrClosedPipe},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				client, peer := net.Pipe() // nobody reads peer: the first socket write blocks
				defer peer.Close()
				defer client.Close()
				c := newCoalescingConn(client)

				// 12 MiB into an empty queue: accepted at once.
				if _, err := c.Write(make([]byte, 12<<20)); err != nil {
					t.Fatal(err)
				}
				// Accepted once the flusher has taken the first as its batch.
				if _, err := c.Write(make([]byte, coalesceLimit+1)); err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() {
					_, err := c.Write([]byte("behind a full queue"))
					done <- err
				}()
				synctest.Wait()
				select {
				case err := <-done:
					t.Fatalf("Write behind more than coalesceLimit queued returned %v before the socket took any of it", err)
				default:
				}

				tt.fail(c, peer)
				if err := <-done; !errors.Is(err, tt.wantErr) {
					t.Errorf("waiting Write returned %v, want %v", err, tt.wantErr)
				}
				if _, err := c.Write([]byte("x")); !errors.Is(err, tt.wantErr) {
					t.Errorf("later Write returned %v, want %v", err, tt.wantErr)
				}
			})
		})
	}
}

// TestCoalescingConnKeepsBoundedBuffers: a batch larger than coalesceKeep
// is not kept once written, and an idle conn keeps no buffer larger than
// coalesceIdleKeep.
func TestCoalescingConnKeepsBoundedBuffers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client, peer := net.Pipe()
		defer peer.Close()
		defer client.Close()
		go io.Copy(io.Discard, peer)
		c := newCoalescingConn(client)

		check := func(when string, maxBuf, maxSpare int) {
			t.Helper()
			c.mu.Lock()
			defer c.mu.Unlock()
			if cap(c.buf) > maxBuf || cap(c.spare) > maxSpare {
				t.Errorf("%s: buffers of %d and %d bytes kept, want at most %d and %d", when, cap(c.buf), cap(c.spare), maxBuf, maxSpare)
			}
		}
		for _, n := range []int{100, 12 << 20, 100, coalesceLimit + 1, 100, 3 << 20} {
			if _, err := c.Write(make([]byte, n)); err != nil {
				t.Fatal(err)
			}
			synctest.Wait() // written; the flusher lingers
			check(fmt.Sprintf("after a %d-byte batch", n), coalesceKeep, coalesceKeep)
		}
		time.Sleep(flusherLinger) // in the bubble: the flusher exits
		synctest.Wait()
		check("idle", coalesceIdleKeep, coalesceIdleKeep)
	})
}

// TestCoalescingConnFlusherLingers: a signal left over from a Write taken
// with an earlier batch does not end the flusher; it stays for
// flusherLinger after the queue empties, so a busy connection does not
// start a goroutine (and a timer) per batch.
func TestCoalescingConnFlusherLingers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client, peer := net.Pipe()
		defer peer.Close()
		defer client.Close()
		go io.Copy(io.Discard, peer)
		cc := &countingConn{Conn: client, gate: make(chan struct{}), inside: make(chan struct{}, 1)}
		c := newCoalescingConn(cc)
		flushing := func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.flushing
		}

		if _, err := c.Write([]byte("a")); err != nil {
			t.Fatal(err)
		}
		<-cc.inside // the flusher is writing "a"
		// Queued behind it, with a signal the flusher will not need: it
		// takes "b" with its next batch.
		if _, err := c.Write([]byte("b")); err != nil {
			t.Fatal(err)
		}
		close(cc.gate)
		synctest.Wait() // both written; the queue is empty
		if !flushing() {
			t.Fatal("the flusher exited as soon as the queue emptied: a stale signal ended its linger")
		}
		time.Sleep(flusherLinger - time.Nanosecond)
		synctest.Wait()
		if !flushing() {
			t.Fatal("the flusher exited before flusherLinger")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if flushing() {
			t.Fatal("the flusher still runs flusherLinger after the queue emptied")
		}
		if cc.writes != 2 {
			t.Errorf("%d socket writes, want 2", cc.writes)
		}
	})
}
