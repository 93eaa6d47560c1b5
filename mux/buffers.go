package mux

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// Buffers are kept for the next message up to a size; one that grew past
// it for a large message is let go, so that one big message does not pin
// memory for the life of a session. A session's bound is small (requests
// are small, and there may be 10,000 clients); the one upstream reader keeps
// room for a typical block, and passes larger buffers through framePool.
const (
	maxKeptSessionBuf  = 16 << 10 // a client's read and write buffers
	maxKeptUpstreamBuf = 4 << 20
)

// readMessage reads r to its end into dst (reused from the previous message)
// and returns it, reading at most max bytes when max >= 0: a message longer
// than max comes back as its first max+1 bytes, for the caller to answer
// "too large". The readers of muxd reuse the result for the next message, so
// whoever is handed it must not keep a reference to it (dispatch and route
// copy what they keep).
func readMessage(dst []byte, r io.Reader, max int64) ([]byte, error) {
	dst = dst[:0]
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		room := dst[len(dst):cap(dst)]
		if max >= 0 && int64(len(dst)+len(room)) > max+1 {
			room = room[:max+1-int64(len(dst))]
		}
		n, err := r.Read(room)
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, fmt.Errorf("read message: %w", err)
		}
		if max >= 0 && int64(len(dst)) > max {
			return dst, nil
		}
	}
}

// letGoReadBuffer returns a session's read buffer for the next message,
// or nil when it grew past what a session keeps. A buffer of a large
// message let go is counted to the reclaimer, so that the RSS of clients
// sending (or leaving unfinished) messages of many MiB goes back to the
// system at once rather than over minutes.
func (s *Server) letGoReadBuffer(frame []byte) []byte {
	if cap(frame) >= reclaimReadBuffer {
		s.reclaim.released(cap(frame))
	}
	return reuse(frame, maxKeptSessionBuf)
}

// reclaimReadBuffer is the smallest read buffer whose release is worth
// counting to the reclaimer (as a request of that size is, core.Released).
const reclaimReadBuffer = 1 << 20

// reuse returns s emptied for reuse, or nil when its capacity is past
// maxCap.
func reuse[T any](s []T, maxCap int) []T {
	if cap(s) > maxCap {
		return nil
	}
	return s[:0]
}

// Upstream frame buffers. The upstream reader reads each message into one
// contiguous buffer, after frameHeadroom spare bytes; a large answer for a
// single request is then handed to its client as it lies in that buffer,
// its id spliced in place (the head before the id moves into the headroom
// when the client's id is the longer), and the buffer comes back to the
// pool once the client's writer has written it. The bytes of an answer are
// thus copied once by the kernel into the buffer and once out of it into
// the client's socket, and none in between.
const (
	// frameHeadroom is the room kept before each upstream message for a
	// client id longer than the upstream id it replaces.
	frameHeadroom = 256
	// minFrameBuf is the first buffer the reader allocates.
	minFrameBuf = 64 << 10
	// minPooledFrame: smaller buffers are not worth keeping in the pool
	// (the reader keeps its own up to maxKeptUpstreamBuf).
	minPooledFrame = 64 << 10
	// maxPooledBytes bounds the bytes of free buffers the pool holds.
	maxPooledBytes = 512 << 20
	// framePoolIdle is how long a free buffer stays in the pool unused:
	// after a burst of large answers the memory is let go this long after
	// the last one was written.
	framePoolIdle = 5 * time.Second
)

// framePool holds the upstream reader's spare frame buffers: those that
// came back from clients after their answer was written, and the reader's
// own when it grew past maxKeptUpstreamBuf. A buffer unused for
// framePoolIdle is let go, so that large answers do not pin memory once
// they stop. The zero value is ready to use; any goroutine may call it.
type framePool struct {
	limit int // bound on the bytes of free buffers; 0 means maxPooledBytes
	mu    sync.Mutex
	free  []pooledFrame // in the order put
	bytes int           // total capacity of free
	// large estimates the size of the large messages read lately: a
	// buffer that must grow grows to it at once, instead of by doubling.
	large int
	timer *time.Timer // armed while free is not empty
	// onRelease, when set, is told how many bytes trim let go of (the
	// server's reclaimer). Set before use; called without mu.
	onRelease func(int)
}

type pooledFrame struct {
	buf   []byte
	since time.Time
}

// get returns an empty buffer for the next message: the largest free one,
// or a new one.
func (p *framePool) get() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) == 0 {
		return make([]byte, 0, minFrameBuf)
	}
	best := 0
	for i, f := range p.free {
		if cap(f.buf) > cap(p.free[best].buf) {
			best = i
		}
	}
	b := p.free[best].buf
	p.free = slices.Delete(p.free, best, best+1)
	p.bytes -= cap(b)
	return b[:0]
}

// put gives back a buffer nobody uses any more.
func (p *framePool) put(b []byte) {
	if cap(b) < minPooledFrame {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	limit := p.limit
	if limit == 0 {
		limit = maxPooledBytes
	}
	for p.bytes+cap(b) > limit && len(p.free) > 0 {
		// the oldest goes first
		p.bytes -= cap(p.free[0].buf)
		p.free[0] = pooledFrame{}
		p.free = p.free[1:]
	}
	if p.bytes+cap(b) > limit {
		return
	}
	p.free = append(p.free, pooledFrame{b[:0], time.Now()})
	p.bytes += cap(b)
	if p.timer == nil {
		p.timer = time.AfterFunc(framePoolIdle, p.trim)
	}
}

// grow returns b with room for at least need more bytes, its contents kept.
// It grows to the size of the large messages read lately, or doubles past
// it; the old buffer is let go (pooling every step of a doubling would
// hold as much again).
func (p *framePool) grow(b []byte, need, most int) []byte {
	p.mu.Lock()
	want := max(p.large+frameHeadroom, 2*cap(b), len(b)+need)
	p.mu.Unlock()
	if most > 0 {
		want = max(min(want, most), len(b)+need)
	}
	nb := make([]byte, len(b), want)
	copy(nb, b)
	return nb
}

// saw records the size of a message read (headroom included), for grow:
// the estimate follows a larger message at once, and decays by an eighth
// with each smaller one of the sizes that pass through the pool.
func (p *framePool) saw(n int) {
	if n < minPooledFrame {
		return
	}
	p.mu.Lock()
	p.large = max(n, p.large-p.large/8)
	p.mu.Unlock()
}

// trim lets go of the buffers unused for framePoolIdle, and forgets the
// size of large messages once none is left.
func (p *framePool) trim() {
	released := 0
	defer func() {
		if p.onRelease != nil {
			p.onRelease(released) // after the deferred unlock below
		}
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	keep := p.free[:0]
	for _, f := range p.free {
		if now.Sub(f.since) < framePoolIdle {
			keep = append(keep, f)
		} else {
			p.bytes -= cap(f.buf)
			released += cap(f.buf)
		}
	}
	clear(p.free[len(keep):])
	p.free = keep
	if len(p.free) == 0 {
		p.free = nil
		p.large = 0
		p.timer = nil
		return
	}
	p.timer.Reset(framePoolIdle - now.Sub(p.free[0].since))
}

// readFrame reads r to its end into b after frameHeadroom bytes, growing b
// through the pool, and returns b holding the headroom and the message.
//
// A message longer than limit (> 0) is too large: b keeps its first
// limit+1 bytes (enough to find whom it answers), the rest is read and
// thrown away so that the connection goes on, and tooLarge is set. One
// longer than discardFactor × limit is not read to its end: that is an
// error (a node streaming without end).
func (p *framePool) readFrame(b []byte, r io.Reader, limit int64) (_ []byte, tooLarge bool, err error) {
	if cap(b) < frameHeadroom+512 {
		b = p.get() // at least minFrameBuf
	}
	b = b[:frameHeadroom]
	most := 0 // the largest buffer the message may take
	if limit > 0 {
		most = frameHeadroom + int(limit) + 1
	}
	for {
		if most > 0 && len(b) == most {
			return b, true, p.discard(r, discardFactor*limit)
		}
		if len(b) == cap(b) {
			b = p.grow(b, 1, most)
		}
		room := b[len(b):cap(b)]
		if most > 0 && len(b)+len(room) > most {
			room = room[:most-len(b)]
		}
		n, err := r.Read(room)
		b = b[:len(b)+n]
		if err == io.EOF {
			p.saw(len(b))
			return b, false, nil
		}
		if err != nil {
			return b, false, fmt.Errorf("read message: %w", err)
		}
	}
}

// ErrUpstreamMessageTooLarge is what ends an upstream connection whose
// message runs past discardFactor × the read limit.
var ErrUpstreamMessageTooLarge = errors.New("upstream message too large")

// discardFactor bounds how much of a too-large message is read to keep the
// connection: this many times the read limit.
const discardFactor = 4

// discard reads r to its end, at most most bytes, through a pooled buffer.
func (p *framePool) discard(r io.Reader, most int64) error {
	buf := p.get()
	defer p.put(buf)
	buf = buf[:cap(buf)]
	for read := int64(0); ; {
		n, err := r.Read(buf)
		read += int64(n)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read message past the read limit: %w", err)
		}
		if read > most {
			return fmt.Errorf("message past %d bytes, %d × the read limit: %w", most, discardFactor, ErrUpstreamMessageTooLarge)
		}
	}
}
