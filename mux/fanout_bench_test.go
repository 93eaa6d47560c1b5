package mux

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/muxd/muxd/reconnect"
	"github.com/muxd/muxd/router"
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
// shared subscription: one scan, then one splice and one queue push per
// subscriber, with every subscriber's writer draining concurrently.
// ns/delivery and allocs/delivery are the figures to read.
func BenchmarkFanout1000(b *testing.B) {
	const n = 1000
	srv, err := New(Config{
		Dial:               func(context.Context) (*websocket.Conn, error) { return nil, errors.New("no upstream in a benchmark") },
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
		OutboundQueueBytes: 1 << 30,
		MaxClients:         n,
	})
	if err != nil {
		b.Fatal(err)
	}
	u := &upstreamConn{Conn: &reconnect.Conn{Gen: 1}, srv: srv}
	srv.mu.Lock()
	srv.up = u
	srv.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	key, _ := router.SubscriptionKey([]byte(`["newHeads"]`))
	for i := 0; i < n; i++ {
		c, err := srv.newClient(ctx, discardTransport{})
		if err != nil {
			b.Fatal(err)
		}
		id := newSubscriptionID()
		srv.mu.Lock()
		srv.subs.Attach(key, []byte(`["newHeads"]`), c.id, id)
		srv.subs.SetReady(id)
		srv.mu.Unlock()
	}
	if _, ok := srv.subs.Subscribed(key, 0, `"0xup"`); !ok {
		b.Fatal("subscription not live")
	}
	var msgs []router.Message
	b.SetBytes(int64(len(fanoutPush)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f, err := router.ScanUpstream(fanoutPush, msgs)
		if err != nil {
			b.Fatal(err)
		}
		msgs = f.Messages
		srv.routePush(u, fanoutPush, &msgs[0])
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/delivery")
	if got := counterValue(srv.metrics.Pushes); got != float64(b.N*n) {
		b.Fatalf("pushes delivered = %v, want %d", got, b.N*n)
	}
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
