package mux

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/muxd/muxd/core"
	"github.com/muxd/muxd/reconnect"
)

// discardTransport drops what it is given: the benchmark measures routing,
// not sockets.
type discardTransport struct{}

func (discardTransport) name() string                          { return "ws" }
func (discardTransport) write(context.Context, [][]byte) error { return nil }
func (discardTransport) close(int, string)                     {}

// fanoutPush is a newHeads-sized (~2 KB) push for upstream subscription
// "0xup".
var fanoutPush = func() []byte {
	hash := "0x" + strings.Repeat("ab", 32)
	var b strings.Builder
	b.WriteString(`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xup","result":{`)
	for i := 0; i < 24; i++ {
		fmt.Fprintf(&b, `"field%02d":%q,`, i, hash)
	}
	b.WriteString(`"number":"0x1b4"}}}`)
	return []byte(b.String())
}()

// BenchmarkFanout1000 routes one 2 KB push to 1000 subscribers of one
// shared subscription: one scan, one copy of the push, then one queue push
// per subscriber, with every subscriber's writer splicing its id in and
// draining concurrently.
// ns/delivery and allocs/delivery are the figures to read.
// fanoutServer returns a server whose n clients (writing to nowhere) hold
// one live newHeads subscription on connection u, which nothing reads.
func fanoutServer(b *testing.B, n int) (*Server, *upstreamConn) {
	b.Helper()
	srv, err := New(Config{
		Dial:               func(context.Context) (*websocket.Conn, error) { return nil, errors.New("no upstream in a benchmark") },
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
		OutboundQueueBytes: 1 << 30,
		MaxClients:         n,
		BackfillBlocks:     -1, // no gap rules: the push goes straight to the members
	})
	if err != nil {
		b.Fatal(err)
	}
	u := &upstreamConn{Conn: &reconnect.Conn{Gen: 1}, srv: srv, node: srv.set.nodes[0], eff: new(core.Effects)}
	srv.mu.Lock()
	u.fc, err = srv.ups.Connected(&u.fe, srv.set.sel, 0, time.Now()) // made active at once: the only upstream
	srv.mu.Unlock()
	if err != nil || u.fe.Switch == nil {
		b.Fatalf("connection not made active: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	// Every client subscribes (the core's first request, upstream id 1,
	// is the one eth_subscribe), and the node's answer makes the key live.
	for i := 0; i < n; i++ {
		c, err := srv.newClient(ctx, discardTransport{})
		if err != nil {
			b.Fatal(err)
		}
		srv.dispatch(c, []byte(`{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}`))
	}
	srv.route(u, withHeadroom([]byte(`{"jsonrpc":"2.0","id":1,"result":"0xup"}`)))
	if up := srv.core.Stats().UpstreamSubs; up != 1 {
		b.Fatalf("%d live upstream subscriptions, want 1", up)
	}
	return srv, u
}

// BenchmarkReaderBehindFanout is how long a 2 KB push to 10,000
// subscribers keeps the upstream reader from its next frame (often an
// answer a client is waiting for): ns/op is the reader's time per push.
// "inline": the reader queues every delivery itself; "handoff": what muxd
// does, the reader hands them to the fan-out goroutine (fanout.go) once the
// core has routed the push. Each push is applied whole before the next
// (not timed), so the figure is one push's, not a backlog's.
func BenchmarkReaderBehindFanout(b *testing.B) {
	const n = 10000
	for _, mode := range []string{"inline", "handoff"} {
		b.Run(mode, func(b *testing.B) {
			srv, u := fanoutServer(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				buf := withHeadroom(fanoutPush) // a handed-off buffer is the job's
				stop := func() {}
				if mode == "handoff" {
					stop = srv.startFanout()
				}
				b.StartTimer()
				srv.route(u, buf)
				b.StopTimer()
				stop() // waits until the push is queued for every client
				b.StartTimer()
			}
		})
	}
}

func BenchmarkFanout1000(b *testing.B) {
	const n = 1000
	srv, u := fanoutServer(b, n)
	pushed := counterValue(srv.metrics.Pushes)
	buf := withHeadroom(fanoutPush)
	b.SetBytes(int64(len(fanoutPush)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		srv.route(u, buf)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/delivery")
	if got := counterValue(srv.metrics.Pushes) - pushed; got != float64(b.N*n) {
		b.Fatalf("pushes delivered = %v, want %d", got, b.N*n)
	}
}

// withHeadroom lays frame out as the upstream reader reads one.
func withHeadroom(frame []byte) []byte {
	return append(make([]byte, frameHeadroom, frameHeadroom+len(frame)), frame...)
}

// BenchmarkFanoutCopyFloor is the baseline for BenchmarkFanout1000: only
// the 1000 copies of the push that any fan-out must make (each subscriber
// gets its own bytes), with no scanning, locking or queueing.
func BenchmarkFanoutCopyFloor(b *testing.B) {
	const n = 1000
	var sink []byte
	b.SetBytes(int64(len(fanoutPush)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		for j := 0; j < n; j++ {
			sink = append(make([]byte, 0, len(fanoutPush)), fanoutPush...)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/delivery")
	_ = sink
}
