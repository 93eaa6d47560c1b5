package core

import (
	"strconv"
	"testing"
	"time"

	"github.com/muxd/muxd/router"
)

// BenchmarkBatchRoundTrip is the core's part of bench (c): clients each
// keep window batches of size eth_calls in flight; every iteration admits
// one client batch and routes the node's array answer to the oldest batch
// in flight, both scanned as the shell scans them, and gives the arena the
// answer came back in for the next batch, as the shell's writer does. It
// reports ns per element.
func BenchmarkBatchRoundTrip(b *testing.B) {
	const clients, window, size = 100, 8, 10
	var arenas [][]byte // given back once "written"
	c, err := New(Config{
		RequestTimeout: time.Minute, UpstreamWait: time.Minute, UpstreamMaxBatch: 1000,
		MaxBatch: 1000, MaxInFlight: 1000, MaxHeldBytes: 1 << 30, MaxSubscriptions: 10,
		MaxClients: clients, MaxWaiting: 1000, HeldPushBytes: 1 << 20,
		DenyMethods: DefaultDenyMethods, RetryMethods: DefaultRetryMethods,
		CoalesceMethods: DefaultCoalesceMethods, CacheBytes: 64 << 20,
		NewSubscriptionID: func() string { return `"0x1"` },
		Arenas: func(n int) []byte {
			// As the shell's pool: the arenas answers came back in.
			if k := len(arenas); k > 0 && cap(arenas[k-1]) >= n {
				a := arenas[k-1]
				arenas = arenas[:k-1]
				return a
			}
			return make([]byte, 0, n)
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	for range clients {
		if _, err := c.Join(false); err != nil {
			b.Fatal(err)
		}
	}
	var e Effects
	now := time.Unix(1_700_000_000, 0)
	c.UpstreamConnected(&e, 1, now)

	// The client frames, one per client, their ids reused.
	frames := make([][]byte, clients)
	for k := range frames {
		f := []byte{'['}
		for i := range size {
			if i > 0 {
				f = append(f, ',')
			}
			f = append(f, `{"jsonrpc":"2.0","id":`...)
			f = strconv.AppendInt(f, int64(k*size+i), 10)
			f = append(f, `,"method":"eth_call","params":[{"to":"0x6b175474e89094c44da98b954eedeac495271d0f","data":"0x70a08231000000000000000000000000f39fd6e51aad88f6f4ce6ab8827279cfffb92266"},"latest"]}`...)
		}
		frames[k] = append(f, ']')
	}
	var (
		cmsgs, umsgs []router.Message
		ring         = make([][]byte, clients*window) // the node's answers owed, oldest first
		head, n      int
	)
	// answer builds the node's array answer to the array sent upstream
	// for batch j (from 0): its upstream ids are the j-th block of size.
	answer := func(dst []byte, j int) []byte {
		dst = append(dst[:0], '[')
		for i := range size {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"jsonrpc":"2.0","id":`...)
			dst = strconv.AppendInt(dst, int64(j*size+i+1), 10)
			dst = append(dst, `,"result":"0x00000000000000000000000000000000000000000000000000000000000003e8"}`...)
		}
		return append(dst, ']')
	}
	route := func() {
		a := ring[head]
		f, err := router.ScanUpstream(a, umsgs)
		umsgs = f.Messages
		c.UpstreamFrame(&e, 1, a, f, err, now)
		if len(e.Deliveries) != 1 {
			b.Fatalf("%d deliveries, want 1", len(e.Deliveries))
		}
		if a := e.Deliveries[0].Arena; a != nil {
			arenas = append(arenas, a[:0])
		}
		head = (head + 1) % len(ring)
		n--
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if n == len(ring) {
			route()
		}
		frame := frames[i%clients]
		f, err := router.ScanClient(frame, cmsgs)
		cmsgs = f.Messages
		c.ClientFrame(&e, router.ClientID(i%clients+1), frame, f, err, now)
		if len(e.Upstream) != 1 {
			b.Fatalf("%d upstream frames, want 1", len(e.Upstream))
		}
		tail := (head + n) % len(ring)
		ring[tail] = answer(ring[tail], i)
		n++
	}
	b.StopTimer()
	for n > 0 {
		route()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/elem")
}
