package mux

import (
	"math/bits"
	"sync"
)

// Arenas: the buffers client batches are laid out in on their way upstream
// (core.Config.Arenas, router.UpstreamBatch). A batch answered whole comes
// back to its client as one array spliced into that same buffer
// (core.Delivery.Arena); once the client's writer has written it, the
// buffer comes back here for the next batch, instead of each batch
// allocating its own and the collector freeing it.
const (
	minArenaShift = 10 // the smallest class: 1 KiB
	arenaClasses  = 7  // 1 KiB to 64 KiB; larger arenas are not kept
	// arenaClassBytes bounds the free bytes kept per class: at most
	// 7 × 2 MiB in all, whatever the burst before.
	arenaClassBytes = 2 << 20
)

// arenaPool keeps free arenas by size class (powers of two). Get is called
// under the server's lock (by the core), put by clients' writers; its own
// mutex guards the free lists. The zero value is ready for use.
type arenaPool struct {
	mu   sync.Mutex
	free [arenaClasses][][]byte
}

// arenaClass returns the class of an arena of at least n bytes, or -1 when
// n is past the largest.
func arenaClass(n int) int {
	if n <= 1<<minArenaShift {
		return 0
	}
	c := bits.Len(uint(n-1)) - minArenaShift
	if c >= arenaClasses {
		return -1
	}
	return c
}

// get returns an empty buffer of capacity at least n: a free one of n's
// class, or a new one of the class's size.
func (p *arenaPool) get(n int) []byte {
	c := arenaClass(n)
	if c < 0 {
		return make([]byte, 0, n)
	}
	p.mu.Lock()
	if l := p.free[c]; len(l) > 0 {
		b := l[len(l)-1]
		l[len(l)-1] = nil
		p.free[c] = l[:len(l)-1]
		p.mu.Unlock()
		return b[:0]
	}
	p.mu.Unlock()
	return make([]byte, 0, 1<<(minArenaShift+c))
}

// put keeps b for a later get, when its capacity is exactly a class's size
// (one get made) and the class holds less than arenaClassBytes free.
func (p *arenaPool) put(b []byte) {
	c := arenaClass(cap(b))
	if c < 0 || cap(b) != 1<<(minArenaShift+c) {
		return
	}
	p.mu.Lock()
	if (len(p.free[c])+1)*cap(b) <= arenaClassBytes {
		p.free[c] = append(p.free[c], b[:0])
	}
	p.mu.Unlock()
}
