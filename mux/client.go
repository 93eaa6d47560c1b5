package mux

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/muxd/muxd/core"
	"github.com/muxd/muxd/router"
)

// transport is how a client session's bytes reach its peer.
type transport interface {
	// name is the transport label: "ws", "http" or "ipc".
	name() string
	// write sends the messages in order. It is called from one goroutine
	// (the session's writer) at a time.
	write(ctx context.Context, msgs [][]byte) error
	// close ends the connection with a reason: a WebSocket close code and
	// text where the transport has them. It may be called concurrently with
	// write and more than once.
	close(code int, reason string)
}

// Client is one client session. Its outbound messages go through a bounded
// queue drained by a writer goroutine; any goroutine may send to it and
// none ever blocks doing so.
type Client struct {
	id  router.ClientID
	srv *Server
	tr  transport
	out *outbox

	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once

	// autoWrite: a writer goroutine is started on demand to drain the
	// queue (WebSocket, IPC); off for HTTP, whose handler takes its one
	// answer from the queue itself.
	autoWrite bool
	writing   atomic.Bool // a writeLoop is running
	// writeStarted is when the transport write under way began (unix
	// nanoseconds), 0 while none is; writes counts the writes done. Set by
	// the writer, read by the WebSocket keepalive: a client that takes
	// bytes is alive (clientKeepalive).
	writeStarted atomic.Int64
	writes       atomic.Uint64
	// stallWatch: a watchStall check is pending (the queue went past its
	// bound). Set by the goroutine that pushed past it, cleared by the
	// check.
	stallWatch atomic.Bool

	finishMu     sync.Mutex
	finishing    bool
	finishCode   int
	finishReason string
	// sealed is set, under Server.mu, once the session is to close
	// (finished): the frames its reader reads from then on are not handed
	// to the core, so that none is owed an answer the close would cut.
	// Guarded by Server.mu.
	sealed bool

	// scan is the scan buffer of dispatch, owned by the session's reader.
	scan []router.Message
	// eff is the effects buffer of the core events the session's reader
	// makes (core.Effects), owned by that reader.
	eff core.Effects
}

// ID names the session in logs.
func (c *Client) ID() router.ClientID { return c.id }

// send queues m, the client's seq'th message from the core. A client whose
// queue overflows is a slow consumer: it is disconnected (close 1008)
// rather than allowed to make anyone wait or to lose a message silently.
func (c *Client) send(seq uint64, m outMsg) {
	ok, over := c.out.push(seq, m)
	if !ok {
		c.srv.release(&m)
		why := "an answer past outbound_queue_bytes_total"
		if m.push {
			why = "a push past outbound_queue_bytes"
		}
		c.slowConsumer(why)
		return
	}
	if c.autoWrite {
		c.kickWriter()
		if over && c.stallWatch.CompareAndSwap(false, true) {
			c.watchStall()
		}
	}
}

// watchStall checks, SlowConsumerTimeout from now, that a client whose
// queue is past its bound has taken something meanwhile: a write to it
// finished. One that has not is a slow consumer, cut as a node cuts a
// client it cannot write to (geth allows a write 10 s). The check repeats
// while the queue stays past the bound, and stops once it is back within
// it. Called with stallWatch set; at most one check is pending.
func (c *Client) watchStall() {
	written := c.writes.Load()
	time.AfterFunc(c.srv.cfg.SlowConsumerTimeout, func() {
		switch {
		case c.ctx.Err() != nil:
		case !c.out.over():
			c.stallWatch.Store(false)
			// A send that went past the bound just before the Store saw
			// the watch on and left it to this one.
			if c.out.over() && c.stallWatch.CompareAndSwap(false, true) {
				c.watchStall()
			}
		case c.writes.Load() == written:
			c.slowConsumer("nothing taken for slow_consumer_timeout")
		default:
			c.watchStall()
		}
	})
}

// slowConsumer disconnects a client whose queue bound was hit, once.
func (c *Client) slowConsumer(why string) {
	if c.ctx.Err() != nil {
		return
	}
	c.srv.metrics.SlowConsumers.Inc()
	c.srv.log.Warn("client too slow, disconnecting", "client", c.id, "transport", c.tr.name(), "why", why, "queue_limit", c.out.limit)
	c.shut(closePolicyViolation, "slow consumer")
}

// shut ends the session once: the transport is closed with the reason and
// the context cancelled, which stops the reader and the writer.
func (c *Client) shut(code int, reason string) {
	c.once.Do(func() {
		// Cancel first: a send racing with the close then sees the
		// session ending and is not taken for a slow consumer.
		c.cancel()
		c.out.close()
		go c.tr.close(code, reason)
	})
}

// finish closes the session with code and reason once every answer owed to
// it has been written: nothing in flight and nothing queued.
func (c *Client) finish(code int, reason string) {
	c.finishMu.Lock()
	if !c.finishing {
		c.finishing, c.finishCode, c.finishReason = true, code, reason
	}
	c.finishMu.Unlock()
	if c.autoWrite {
		c.kickWriter()
		return
	}
	select {
	case c.out.wake <- struct{}{}:
	default:
	}
}

// finished reports whether a finish was asked for and is now due. Once it
// is, the session is sealed: the reader, which goes on reading until the
// close ends it, hands the core nothing more (dispatch), so every request
// the core took has its answer written before the close.
func (c *Client) finished() (bool, int, string) {
	c.finishMu.Lock()
	f, code, reason := c.finishing, c.finishCode, c.finishReason
	c.finishMu.Unlock()
	if !f {
		return false, 0, ""
	}
	// In this order: the core counts a request answered in the same
	// event that numbers its answer, so once nothing is in flight every
	// answer owed has a number, and the queue knows whether it has been
	// queued and written.
	s := c.srv
	s.mu.Lock()
	inflight, seq := s.core.Owed(c.id)
	s.mu.Unlock()
	if inflight > 0 || !c.out.caughtUp(seq) {
		return false, 0, ""
	}
	// The reader may have handed the core a frame since: seal only if
	// the core has numbered nothing more for this client, else that
	// frame's answer is still to be written.
	s.mu.Lock()
	defer s.mu.Unlock()
	if inflight, now := s.core.Owed(c.id); inflight > 0 || now != seq {
		return false, 0, ""
	}
	c.sealed = true
	return true, code, reason
}

// writerLinger is how long an idle writer waits for more before it exits.
const writerLinger = 2 * time.Millisecond

// kickWriter makes sure a writer goroutine is draining the queue. Sessions
// have no writer while their queue is empty: an idle client costs no
// goroutine beyond its reader.
func (c *Client) kickWriter() {
	if c.writing.CompareAndSwap(false, true) {
		go c.writeLoop()
	}
}

// writeLoop drains the queue and exits when it is empty. Everything queued
// at the moment it looks is written in one call, so transports that can
// coalesce do.
func (c *Client) writeLoop() {
	var batch []outMsg
	// Writers come and go with their client's traffic: the buffers they
	// splice pushes into are shared through a pool, so that a fan-out to
	// many idle clients does not make each new writer grow its own.
	w := messageWriters.Get().(*messageWriter)
	defer messageWriters.Put(w)
	// The linger timer goes with the pooled writer state: a busy client's
	// writer may start once per answer, and a timer is worth reusing.
	if w.linger == nil {
		w.linger = time.NewTimer(writerLinger)
	} else {
		w.linger.Reset(writerLinger)
	}
	linger := w.linger
	defer linger.Stop() // before Put (deferred earlier, run later)
	for {
		batch = c.out.take(batch)
		if len(batch) == 0 {
			if done, code, reason := c.finished(); done {
				c.shut(code, reason)
				return
			}
			// Stay a moment for the next answer: a busy client keeps
			// one goroutine instead of starting one per message.
			linger.Reset(writerLinger)
			select {
			case <-c.out.wake:
				continue
			case <-linger.C:
			case <-c.ctx.Done():
				return
			}
			c.writing.Store(false)
			// A push, or a finish, that came after take saw a writer
			// running and left the work to it: take it back, unless
			// another writer has.
			if due, _, _ := c.finished(); !due && !c.out.hasQueued() {
				return
			}
			if !c.writing.CompareAndSwap(false, true) {
				return
			}
			continue
		}
		msgs, n, pushes := w.messages(batch)
		c.writeStarted.Store(time.Now().UnixNano())
		err := c.tr.write(c.ctx, msgs)
		c.writeStarted.Store(0)
		if err != nil {
			c.shut(closeGoingAway, "write failed")
			return
		}
		c.writes.Add(1)
		c.out.done(n, pushes)
		w.written(batch, c.srv)
		clear(batch)
	}
}

// maxKeptWriterBuf bounds the splice buffer a pooled messageWriter keeps:
// the pool holds about one per writer running at once, not one per client.
const maxKeptWriterBuf = 256 << 10

// messageWriters are the writers' spare messageWriters.
var messageWriters = sync.Pool{New: func() any { return new(messageWriter) }}

// messageWriter turns the messages a writer takes from its queue into the
// bytes its transport writes: shared pushes are spliced here, with each
// client's own subscription id, into one buffer reused from one write to
// the next. It is owned by one writer goroutine at a time.
type messageWriter struct {
	arena  []byte
	spans  []int // end of each spliced message in arena
	msgs   [][]byte
	linger *time.Timer // the writer's idle timer, stopped while pooled
}

// messages returns the messages of batch as the client gets them, valid
// until the next call, their total size, and the size of the pushes among
// them.
func (w *messageWriter) messages(batch []outMsg) (msgs [][]byte, n, pushes int) {
	spliced := 0
	for i := range batch {
		if m := &batch[i]; m.id != nil {
			spliced += m.size()
		}
	}
	if cap(w.arena) < spliced {
		w.arena = make([]byte, 0, spliced)
	}
	w.arena, w.spans = w.arena[:0], w.spans[:0]
	for i := range batch {
		if m := &batch[i]; m.id != nil {
			w.arena = m.appendTo(w.arena)
			w.spans = append(w.spans, len(w.arena))
		}
	}
	w.msgs = w.msgs[:0]
	start, k := 0, 0
	for i := range batch {
		m := &batch[i]
		if m.id == nil {
			w.msgs = append(w.msgs, m.msg)
		} else {
			w.msgs = append(w.msgs, w.arena[start:w.spans[k]])
			start = w.spans[k]
			k++
		}
		size := m.size()
		n += size
		if m.push {
			pushes += size
		}
	}
	return w.msgs, n, pushes
}

// written lets go of what batch held once it is written: lent frame
// buffers and batch arenas go back to s's pools, and a buffer grown for a
// large write is dropped.
func (w *messageWriter) written(batch []outMsg, s *Server) {
	for i := range batch {
		s.release(&batch[i])
	}
	clear(w.msgs)
	w.arena = reuse(w.arena, maxKeptWriterBuf)
	w.msgs = reuse(w.msgs, maxKeptQueue)
}

// WebSocket close codes muxd uses.
const (
	closeNormal          = 1000
	closeGoingAway       = 1001
	closeProtocolError   = 1002
	closePolicyViolation = 1008
	closeTooBig          = 1009
	closeTryAgainLater   = 1013
)
