package router

import (
	"cmp"
	"slices"
)

// UpstreamBatch is what the node sees of one client batch: the elements
// muxd forwards, in the client's order, sent as JSON arrays so that the node
// runs them in order, as it does for a client connected to it directly.
// Elements muxd answers itself (invalid, denied, over a limit) and the
// subscription layer's eth_subscribe/eth_unsubscribe are not in it.
//
// An array holds at most the max given to NextArrays elements; a longer batch
// goes as consecutive arrays, the next one once every call of the previous
// one is settled (answered, timed out or given up), so that order still holds
// on a node that limits its batches.
//
// An UpstreamBatch is not safe for concurrent use; the caller's lock guards
// it with the pending table.
type UpstreamBatch struct {
	// arena, when not nil, holds "[" and the elements' frames, each after
	// a separator, laid out as they were added (see Room): while every
	// element is there, unsettled, and goes in one array, arena plus "]"
	// is that array and nothing is copied. ids holds the clients' ids.
	arena, ids []byte
	// mem is the whole allocation arena and ids lie in (Arena).
	mem     []byte
	inArena bool     // every element added so far lies in arena
	elems   []upElem // in client order
	calls   []int32  // positions of the calls in elems, whose ids ascend
	next    int      // the first element not yet sent
	owed    int      // calls of the array in flight not yet settled
	from    int      // the array in flight is elems[from:next]
	// slot is 1 + the slot of the group of the pending table that holds
	// the calls' Pendings (see Requests), 0 for none.
	slot int32
}

// upElem is one forwarded element: a call (id != 0) or a notification.
type upElem struct {
	id      uint64 // upstream id; 0 for a notification
	frame   []byte // as sent upstream
	settled bool
	// pending says p is the call's entry in the pending table that holds
	// the batch's group (Requests).
	pending bool
	p       Pending
}

// newUpstreamBatch returns a batch that lays its elements out in one buffer
// (from alloc; nil: make) as they are added through Room, sized for a
// client frame of frameLen bytes holding n messages whose ids take idLen
// bytes in all, so that the array it sends is that buffer.
func newUpstreamBatch(alloc func(n int) []byte, frameLen, n, idLen int) *UpstreamBatch {
	u := &UpstreamBatch{elems: make([]upElem, 0, n), calls: make([]int32, 0, n)}
	u.layOut(alloc, frameLen, n, idLen)
	return u
}

// layOut gives u an arena for n elements of a frameLen-byte frame, from
// alloc (nil: make).
func (u *UpstreamBatch) layOut(alloc func(n int) []byte, frameLen, n, idLen int) {
	// Each element's upstream frame is its client bytes with the id
	// replaced by at most 20 digits; one separator each, and the brackets.
	// The clients' ids (KeepID) follow in the same allocation.
	size := frameLen + 21*n + 2
	var buf []byte
	if alloc != nil {
		buf = alloc(size + idLen)
	}
	if cap(buf) < size+idLen {
		buf = make([]byte, 0, size+idLen)
	}
	buf = buf[:1]
	buf[0] = '['
	u.mem = buf[:cap(buf)]
	u.arena, u.ids, u.inArena = buf[:1:size], buf[size:size:size+idLen], true
}

// Arena returns the allocation the batch was laid out in, when msg (an
// answer built in AnswerRoom) lies there: the caller may reuse it once msg
// is no longer needed. Otherwise nil.
func (u *UpstreamBatch) Arena(msg []byte) []byte {
	if len(msg) == 0 || len(u.mem) == 0 || &msg[0] != &u.mem[0] {
		return nil
	}
	return u.mem
}

// UpstreamBatches is a free list of UpstreamBatch bookkeeping (the struct
// and its element and call lists, not the arena, which may have become a
// client's answer): a busy client batch workload would otherwise allocate
// and collect it for every batch. Not safe for concurrent use; its owner's
// lock guards it with the pending table.
type UpstreamBatches struct {
	free []*UpstreamBatch
	// Alloc, when set, returns a buffer of capacity at least n (length
	// and contents do not matter) for a batch's arena: the shell reuses
	// the arenas that answers were laid out in (UpstreamBatch.Arena).
	Alloc func(n int) []byte
}

const (
	maxFreeBatches   = 256 // batches the free list keeps
	maxFreeBatchSize = 64  // elements a kept batch has room for
)

// New returns a new batch (newUpstreamBatch with l.Alloc), reusing one put
// back when one is free.
func (l *UpstreamBatches) New(frameLen, n, idLen int) *UpstreamBatch {
	k := len(l.free)
	if k == 0 || n > maxFreeBatchSize {
		return newUpstreamBatch(l.Alloc, frameLen, n, idLen)
	}
	u := l.free[k-1]
	l.free[k-1] = nil
	l.free = l.free[:k-1]
	u.layOut(l.Alloc, frameLen, n, idLen)
	return u
}

// Put gives u back for reuse. The caller must hold the only reference to
// u: no pending table slot, waiting request or Pending still points at it
// (a group taken whole, TakeGroup). Its arena is not reused here, so slices
// of it handed out (frames sent, an answer laid out there) stay valid; the
// shell reuses an arena only once the answer laid out in it is written
// (Arena, Alloc).
func (l *UpstreamBatches) Put(u *UpstreamBatch) {
	if u == nil || len(l.free) >= maxFreeBatches || cap(u.elems) > maxFreeBatchSize {
		return
	}
	clear(u.elems) // the frames, ids and Pendings they hold
	*u = UpstreamBatch{elems: u.elems[:0], calls: u.calls[:0]}
	l.free = append(l.free, u)
}

// Room returns an empty slice in the arena, where the next element's
// frame goes (after room for its separator), to append the frame to;
// passing the result to AddCall or AddNotification keeps it there. Without
// an arena, or when the frame does not fit, the append allocates and the
// element is simply kept elsewhere.
func (u *UpstreamBatch) Room() []byte {
	if pos := u.nextPos(); u.inArena && pos < cap(u.arena) {
		return u.arena[pos:pos]
	}
	return nil
}

// nextPos is where the next element's frame starts in the arena.
func (u *UpstreamBatch) nextPos() int {
	if len(u.elems) == 0 {
		return len(u.arena)
	}
	return len(u.arena) + 1 // after the separator
}

// KeepID returns a copy of a client's id that lives as long as the batch.
func (u *UpstreamBatch) KeepID(id []byte) []byte {
	if len(u.ids)+len(id) > cap(u.ids) {
		return append([]byte(nil), id...)
	}
	n := len(u.ids)
	u.ids = append(u.ids, id...)
	return u.ids[n:len(u.ids):len(u.ids)]
}

// place extends the arena over frame when frame was built where Room
// pointed; otherwise the arena no longer holds the whole batch.
func (u *UpstreamBatch) place(frame []byte) {
	pos := u.nextPos()
	if !u.inArena || len(frame) == 0 || pos+len(frame) > cap(u.arena) || &frame[0] != &u.arena[:pos+1][pos] {
		u.inArena = false
		return
	}
	if pos > len(u.arena) {
		u.arena = u.arena[:pos]
		u.arena[pos-1] = ','
	}
	u.arena = u.arena[:pos+len(frame)]
}

// AddCall appends a call with upstream id id, whose upstream frame is frame.
// Ids must increase from one call to the next.
func (u *UpstreamBatch) AddCall(id uint64, frame []byte) {
	u.place(frame)
	u.calls = append(u.calls, int32(len(u.elems)))
	u.elems = append(u.elems, upElem{id: id, frame: frame})
}

// AddNotification appends a notification, which travels in the array in its
// place and is answered by nothing.
func (u *UpstreamBatch) AddNotification(frame []byte) {
	u.place(frame)
	u.elems = append(u.elems, upElem{frame: frame})
}

// Len is the number of elements.
func (u *UpstreamBatch) Len() int { return len(u.elems) }

// NextArrays appends to dst the next frames to send upstream and returns
// it: up to max elements (max <= 0: all) not yet sent, less the calls settled
// meanwhile (timed out while waiting for an upstream), as one JSON array, or
// as the element alone when it is the only one. An array is also cut short
// before it would pass maxBytes (the node's message limit; <= 0: none),
// though it always takes one element. An array that holds no call
// (notifications only) is answered by nothing, so the next one follows it at
// once. It appends nothing when nothing is left to send.
func (u *UpstreamBatch) NextArrays(dst [][]byte, max, maxBytes int) [][]byte {
	if u.next == 0 && u.inArena && len(u.elems) > 1 && (max <= 0 || len(u.elems) <= max) && (maxBytes <= 0 || len(u.arena)+1 <= maxBytes) && len(u.arena) < cap(u.arena) && u.noneSettled() {
		// The whole batch in one array, as laid out: no copy.
		u.from, u.next, u.owed = 0, len(u.elems), len(u.calls)
		return append(dst, append(u.arena, ']'))
	}
	for u.owed == 0 && u.next < len(u.elems) {
		// The array's elements: up to max of them, settled ones included,
		// and, past the first one not settled, none that would take it
		// past maxBytes.
		end, n, size := u.next, 0, 1
		for ; end < len(u.elems) && (max <= 0 || end-u.next < max); end++ {
			e := &u.elems[end]
			if e.settled {
				continue
			}
			if maxBytes > 0 && n > 0 && size+len(e.frame)+1 > maxBytes {
				break
			}
			n++
			size += len(e.frame) + 1
			if e.id != 0 {
				u.owed++
			}
		}
		u.from = u.next
		u.next = end
		switch n {
		case 0:
			continue
		case 1:
			for i := u.from; i < end; i++ {
				if e := &u.elems[i]; !e.settled {
					dst = append(dst, e.frame)
				}
			}
			continue
		}
		out := make([]byte, 1, size+1)
		out[0] = '['
		for i := u.from; i < end; i++ {
			if e := &u.elems[i]; !e.settled {
				if len(out) > 1 {
					out = append(out, ',')
				}
				out = append(out, e.frame...)
			}
		}
		dst = append(dst, append(out, ']'))
	}
	return dst
}

func (u *UpstreamBatch) noneSettled() bool {
	for i := range u.elems {
		if u.elems[i].settled {
			return false
		}
	}
	return true
}

// index returns the position of call id, or -1.
func (u *UpstreamBatch) index(id uint64) int {
	if len(u.calls) == 0 {
		return -1
	}
	// The ids of a batch's calls are most often consecutive.
	if k := id - u.elems[u.calls[0]].id; k < uint64(len(u.calls)) && u.elems[u.calls[k]].id == id {
		return int(u.calls[k])
	}
	k, ok := slices.BinarySearchFunc(u.calls, id, func(pos int32, id uint64) int {
		return cmp.Compare(u.elems[pos].id, id)
	})
	if !ok {
		return -1
	}
	return int(u.calls[k])
}

// Settle records that call id needs no more from the node (its answer came,
// or it timed out). It reports whether the array in flight is now settled
// whole with elements still to send: the caller then sends NextArrays.
func (u *UpstreamBatch) Settle(id uint64) (sendNext bool) {
	i := u.index(id)
	if i < 0 || u.elems[i].settled {
		return false
	}
	u.elems[i].settled = true
	u.elems[i].frame = nil
	if i < u.from || i >= u.next {
		return false // not sent yet: NextArrays will leave it out
	}
	u.owed--
	return u.owed == 0 && u.next < len(u.elems)
}

// AnswerRoom returns the memory the batch's elements were laid out in
// (see Room), empty, for the client's answer to the whole batch when it
// has room for n bytes; nil when it has not, or when some element is still
// to be sent or answered. Once every call is settled and read for the last
// time (each Pending's Frame lies there), nothing reads that memory any
// more: the frames sent upstream were copied when written. A longer
// answer than n may still be appended: the slice's capacity ends before
// the clients' ids (KeepID), so append moves it elsewhere.
func (u *UpstreamBatch) AnswerRoom(n int) []byte {
	if u.next != len(u.elems) || u.owed != 0 || n > cap(u.arena) {
		return nil
	}
	for i := range u.elems {
		if u.elems[i].id != 0 && !u.elems[i].settled {
			return nil
		}
	}
	return u.arena[:0]
}

// SentOwing reports whether every element of u has been sent and some call
// not yet settled is one for which owing reports true.
func (u *UpstreamBatch) SentOwing(owing func(p *Pending) bool) bool {
	if u.next != len(u.elems) {
		return false
	}
	for i := range u.elems {
		if e := &u.elems[i]; e.id != 0 && !e.settled && owing(&e.p) {
			return true
		}
	}
	return false
}

// Started reports whether anything of the batch has been sent.
func (u *UpstreamBatch) Started() bool { return u.next > 0 }

// Sent reports whether call id has gone upstream in an array (or alone).
func (u *UpstreamBatch) Sent(id uint64) bool {
	i := u.index(id)
	return i >= 0 && i < u.next
}

// InFlight appends to dst the upstream ids of the unsettled calls of the
// array in flight, in order.
func (u *UpstreamBatch) InFlight(dst []uint64) []uint64 {
	for i := u.from; i < u.next; i++ {
		if e := &u.elems[i]; e.id != 0 && !e.settled {
			dst = append(dst, e.id)
		}
	}
	return dst
}

// FirstInFlight is the upstream id of the first call of the array in
// flight (settled or not), and how many calls the array held; 0, 0 if none.
// A node that refuses a whole array (geth's "batch too large") answers with
// one error under that id.
func (u *UpstreamBatch) FirstInFlight() (id uint64, calls int) {
	for i := u.from; i < u.next; i++ {
		if e := &u.elems[i]; e.id != 0 {
			if id == 0 {
				id = e.id
			}
			calls++
		}
	}
	return id, calls
}
