package mux

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/muxd/muxd/router"
)

// TestFramePoolGivesMemoryBack: buffers written out come back to the pool
// for the next large message, and are let go once unused for
// framePoolIdle, with the size estimate.
func TestFramePoolGivesMemoryBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var p framePool
		a, b := make([]byte, 10, 8<<20), make([]byte, 0, 1<<20)
		p.put(a)
		p.put(b)
		p.put(make([]byte, 0, minPooledFrame-1)) // too small to keep
		if got := p.held(); got != 9<<20 {
			t.Fatalf("held %d, want %d", got, 9<<20)
		}
		if got := p.get(); cap(got) != 8<<20 || len(got) != 0 {
			t.Fatalf("get: len %d cap %d, want the largest free buffer, empty", len(got), cap(got))
		}
		p.saw(6 << 20)
		time.Sleep(framePoolIdle / 2)
		p.put(a) // fresh again
		time.Sleep(framePoolIdle/2 + time.Millisecond)
		synctest.Wait()
		if got := p.held(); got != 8<<20 {
			t.Fatalf("after the first buffer's idle time: held %d, want only the one put since (%d)", got, 8<<20)
		}
		time.Sleep(framePoolIdle)
		synctest.Wait()
		if got := p.held(); got != 0 {
			t.Fatalf("after framePoolIdle unused: held %d, want 0", got)
		}
		p.mu.Lock()
		large, timer := p.large, p.timer
		p.mu.Unlock()
		if large != 0 || timer != nil {
			t.Errorf("empty pool keeps large=%d timer=%v", large, timer != nil)
		}
	})
}

// TestFramePoolBound: past its bound the pool lets the oldest buffers go.
func TestFramePoolBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := framePool{limit: 3 << 20}
		first := make([]byte, 0, 1<<20)
		p.put(first)
		p.put(make([]byte, 0, 1<<20))
		p.put(make([]byte, 0, 2<<20)) // the oldest goes
		if got := p.held(); got != 3<<20 {
			t.Fatalf("held %d, want %d", got, 3<<20)
		}
		for range 2 {
			if b := p.get(); cap(b) == cap(first) && &b[:1][0] == &first[:1][0] {
				t.Fatal("the oldest buffer was kept past the bound")
			}
		}
		p.put(make([]byte, 0, 4<<20)) // larger than the bound: not kept
		if got := p.held(); got != 0 {
			t.Errorf("held %d, want 0", got)
		}
	})
}

// TestFramePoolGrowsInOneStep: a buffer that must grow grows to the size
// of the large messages read lately, not by doubling.
func TestFramePoolGrowsInOneStep(t *testing.T) {
	var p framePool
	msg := bytes.Repeat([]byte("0123456789abcdef"), (10<<20)/16)
	r := &countingReader{r: bytes.NewReader(msg)}
	b, _, err := p.readFrame(nil, r, 0)
	if err != nil || !bytes.Equal(b[frameHeadroom:], msg) {
		t.Fatalf("readFrame: %v, %d bytes", err, len(b))
	}
	first := cap(b)
	p.put(b)
	p.get() // the pool is empty again, the estimate stays
	reads := 0
	r = &countingReader{r: bytes.NewReader(msg), onRead: func(int) { reads++ }}
	b, _, err = p.readFrame(make([]byte, 0, minFrameBuf), r, 0)
	if err != nil || !bytes.Equal(b[frameHeadroom:], msg) {
		t.Fatalf("readFrame: %v, %d bytes", err, len(b))
	}
	if cap(b) < len(msg)+frameHeadroom || cap(b) > 2*(len(msg)+frameHeadroom) {
		t.Errorf("second read: cap %d for a %d-byte message (first %d)", cap(b), len(msg), first)
	}
	// From 64 KiB straight to the estimate: the first read fills the
	// small buffer, every later one (1 MiB at most) goes into the one
	// large buffer, with no copy between.
	if want := 1 + (len(msg)-(minFrameBuf-frameHeadroom)+(1<<20)-1)/(1<<20) + 1; reads != want {
		t.Errorf("%d reads, want %d (no step between 64 KiB and the estimate)", reads, want)
	}
	if held := p.held(); held != 0 {
		t.Errorf("pool holds %d: the buffers grown from were kept", held)
	}
}

// countingReader reads at most 1 MiB at a time, as a socket would.
type countingReader struct {
	r      *bytes.Reader
	onRead func(int)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p[:min(len(p), 1<<20)])
	if c.onRead != nil {
		c.onRead(n)
	}
	return n, err
}

func TestSpliceInPlace(t *testing.T) {
	const msg = `{"jsonrpc":"2.0","id":12345,"result":"0xabcdef"}`
	idAt := strings.Index(msg, "12345")
	span := router.Span{Off: idAt, Len: 5}
	tests := []struct {
		name     string
		headroom int
		newID    string
		ok       bool
	}{
		{"shorter", 0, `7`, true},
		{"same length", 0, `99999`, true},
		{"longer, within the headroom", 16, `"a-longer-id"`, true},
		{"longer by exactly the headroom", 3, `12345678`, true},
		{"longer than the headroom", 2, `12345678`, false},
		{"no headroom", 0, `"x-longer"`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buf := append(bytes.Repeat([]byte{'#'}, tt.headroom), msg...)
			want := router.AppendSpliced(nil, []byte(msg), span, []byte(tt.newID))
			got, ok := spliceInPlace(buf, tt.headroom, len(msg), span, []byte(tt.newID))
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if ok && !bytes.Equal(got, want) {
				t.Errorf("got %s, want %s", got, want)
			}
			if ok && &got[len(got)-1] != &buf[len(buf)-1] {
				t.Error("the answer is not the buffer's own bytes")
			}
		})
	}
}

// held is the total capacity of the free buffers.
func (p *framePool) held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bytes
}

// TestReadFrameLimit: a message up to the limit is read whole; past it, the
// first limit+1 bytes are kept and the rest read and thrown away (tooLarge),
// in a buffer no larger than the limit needs; past discardFactor × the
// limit, reading stops with ErrUpstreamMessageTooLarge.
func TestReadFrameLimit(t *testing.T) {
	const limit = 3<<20 + 5
	tests := []struct {
		size     int
		tooLarge bool
		err      error
	}{
		{limit - 1, false, nil},
		{limit, false, nil},
		{limit + 1, true, nil},
		{2 * limit, true, nil},
		{discardFactor*limit + limit + 1, true, nil}, // limit+1 kept, the rest exactly discardFactor × limit
		{discardFactor*limit + limit + 2, true, ErrUpstreamMessageTooLarge},
	}
	for _, tt := range tests {
		var p framePool
		msg := bytes.Repeat([]byte("0123456789abcdef"), tt.size/16+1)[:tt.size]
		b, tooLarge, err := p.readFrame(nil, &countingReader{r: bytes.NewReader(msg)}, limit)
		if tooLarge != tt.tooLarge || !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
			t.Fatalf("%d bytes: tooLarge %v, err %v; want %v, %v", tt.size, tooLarge, err, tt.tooLarge, tt.err)
		}
		kept := min(tt.size, limit+1)
		if !bytes.Equal(b[frameHeadroom:], msg[:kept]) {
			t.Fatalf("%d bytes: kept %d bytes, want the first %d", tt.size, len(b)-frameHeadroom, kept)
		}
		if cap(b) > frameHeadroom+limit+1 {
			t.Errorf("%d bytes: buffer of %d for a limit of %d", tt.size, cap(b), limit)
		}
	}
}
