package reconnect

import (
	"context"
	"sync/atomic"
	"time"
)

// liveness records when one upstream connection last showed that the node
// is alive, as keepalive judges it. It keeps two kinds of proof.
//
// Progress, proof that the node's side of the connection moves at all:
//
//   - any byte read from the node's socket (an answer, a push, a pong, or
//     part of one: a large answer arriving slowly counts all along);
//   - a socket write of ours that had to wait for the socket (took at least
//     blockedWrite) and then completed: the socket buffer was full and the
//     node's side made room by acknowledging what we had sent, so the node
//     is taking our bytes, however slowly. A write the socket took at once
//     does not count: the kernel takes a few MiB on its own even when the
//     node is gone. (A node whose process hangs with a live kernel is
//     caught once its receive buffer is full and our writes stop.)
//
// Hearing, proof that the node reads and acts on what we send: an answer to
// one of our requests (serve reports it, [Conn.Answered]), or a pong where
// keepalive cannot send a request of its own (see prober): a node's
// WebSocket layer may answer pings while its request handling hangs.
// Bytes read alone are not: a node whose reading has stopped (its request
// handling hung, or the path towards it frozen) may go on pushing
// subscription notifications. Nor are our writes taken: a proxy or the
// kernel on the way takes them whether the node reads or not, and on a
// busy host a write waits for the CPU as long as for a full socket.
//
// A successful ping's pong is a byte read, so proof of life; it is hearing
// too only where no probe could be sent.
//
// msgStarts and msgEnds count the messages serve began and finished
// reading (see [Conn.Reading]): a pong comes after whatever message the node
// was writing when it read our ping, so keepalive judges a node deaf only
// once a message that began after the ping has ended.
//
// Concurrency: progressed, tookWrite and hears are called by whichever
// goroutines read and write the socket (serve's reader, the connection's
// writer, a ping), the other methods by the keepalive goroutine; watch by
// the dialer before the socket is used. Everything is atomic.
type liveness struct {
	start time.Time // monotonic origin of the signals' times
	// life is progress; heard is hearing; took is our writes that waited
	// for the socket and then completed (the node's side made room).
	life, heard, took signal
	// msgStarts and msgEnds are the messages serve began and finished.
	msgStarts, msgEnds atomic.Uint64
	conn               atomic.Pointer[coalescingConn] // the socket, once the dialer made it
}

// signal is one kind of proof: when it was last recorded (since the
// liveness's start) and how many times.
type signal struct {
	last  atomic.Int64
	count atomic.Uint64
}

func (s *signal) record(at int64) {
	s.last.Store(at)
	s.count.Add(1)
}

func newLiveness() *liveness { return &liveness{start: time.Now()} }

// now is the time since l's start, as signals record it.
func (l *liveness) now() int64 { return int64(time.Since(l.start)) }

// since is how long ago s was last recorded (or the liveness made, if
// never).
func (l *liveness) since(s *signal) time.Duration {
	return time.Duration(l.now() - s.last.Load())
}

// progressed records proof of life now.
func (l *liveness) progressed() { l.life.record(l.now()) }

// tookWrite records that a write of ours waited for the socket and then
// completed: proof of life, and that our backlog moves.
func (l *liveness) tookWrite() {
	at := l.now()
	l.life.record(at)
	l.took.record(at)
}

// hears records proof that the node reads and acts on what we send (see
// liveness); it is proof of life too.
func (l *liveness) hears() {
	at := l.now()
	l.life.record(at)
	l.heard.record(at)
}

// quietFor, unheardFor and untakenFor are how long ago proof of life,
// hearing and a write taken were last recorded.
func (l *liveness) quietFor() time.Duration   { return l.since(&l.life) }
func (l *liveness) unheardFor() time.Duration { return l.since(&l.heard) }
func (l *liveness) untakenFor() time.Duration { return l.since(&l.took) }

// progress and hearing are counters that change whenever proof of life,
// or hearing, is recorded.
func (l *liveness) progress() uint64 { return l.life.count.Load() }
func (l *liveness) hearing() uint64  { return l.heard.count.Load() }

// backlogged reports whether our own writes are queued: a ping written now
// would wait behind them.
func (l *liveness) backlogged() bool {
	c := l.conn.Load()
	return c != nil && c.backlogged()
}

// watch makes l the liveness of socket c: c reports its reads and writes to
// l. Called by the dialer before c is used.
func (l *liveness) watch(c *coalescingConn) {
	c.live = l
	l.conn.Store(c)
}

type livenessKey struct{}

// withLiveness returns ctx carrying l: a [WebSocketDialer] dial under it
// makes l watch the socket it opens. The Supervisor passes one to each dial.
func withLiveness(ctx context.Context, l *liveness) context.Context {
	return context.WithValue(ctx, livenessKey{}, l)
}

// livenessFrom returns the liveness ctx carries, or nil.
func livenessFrom(ctx context.Context) *liveness {
	l, _ := ctx.Value(livenessKey{}).(*liveness)
	return l
}
