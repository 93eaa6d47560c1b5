package mux

import (
	"bytes"
	"context"

	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
)

// bigCall is a request whose params carry size bytes of hex, so that its
// echo proves it arrived whole.
func bigCall(id, size int) string {
	fill := strings.Repeat(fmt.Sprintf("%x", id%16), size)
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"eth_call","params":["%s"]}`, id, fill)
}

// wantBigEcho checks that r echoes bigCall(id, size), without printing
// megabytes when it does not.
func wantBigEcho(t *testing.T, r resp, id, size int) {
	t.Helper()
	want := bigCall(id, size)
	want = want[strings.Index(want, `"params":`)+len(`"params":`) : len(want)-1]
	e, ok := r.echo()
	if !ok || string(r.ID) != fmt.Sprint(id) || e.Method != "eth_call" || string(e.Params) != want {
		t.Errorf("id %d: want the echo of its %d-byte request, got %.200s", id, size, r.Raw)
	}
}

func (h *harness) heldBytes() (inflight, held int) {
	s := h.stats()
	return s.InFlight, s.HeldBytes
}

// TestHeldBytesBound: the bytes of a client's requests that muxd holds
// (waiting for an upstream here, in flight upstream alike) are bounded by
// MaxHeldBytes; past it a request gets -32005 and loses nothing else, and
// every held request is served once the upstream is up.
func TestHeldBytesBound(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	t.Run("bound", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		h, g := gatedHarness(t, false, func(c *Config) {
			c.Registerer = reg
			c.MaxHeldBytes = 10 * mib
			c.RequestTimeout = time.Minute // frames of MiB are slow under -race
			c.UpstreamWait = time.Minute
		})
		g.waitFails(t, 1)
		c := h.dial(t)
		// Three 3 MiB requests and a small one fit in 10 MiB; the
		// fourth 3 MiB one does not, and neither does a fifth.
		for id := 1; id <= 3; id++ {
			c.send(bigCall(id, 3*mib))
		}
		c.send(`{"jsonrpc":"2.0","id":9,"method":"eth_chainId","params":[9]}`)
		eventually(t, "requests waiting", func() bool { return h.waitingLen() == 4 })
		for _, id := range []int{4, 5} {
			c.send(bigCall(id, 3*mib))
			r := parseResp(t, c.recv())
			wantError(t, r, fmt.Sprint(id), -32005, "limit exceeded")
			if r.reason() != "too many request bytes in flight" {
				t.Errorf("id %d: reason %q", id, r.reason())
			}
		}
		if inflight, held := h.heldBytes(); inflight != 4 || held < 9*mib || held > 10*mib {
			t.Errorf("held %d requests, %d bytes; want 4 and 9-10 MiB", inflight, held)
		}
		if w, held := gauge(t, reg, "muxd_requests_waiting"), gauge(t, reg, "muxd_request_bytes_held"); w != 4 || held < 9*mib || held > 10*mib {
			t.Errorf("gauges: %v waiting, %v bytes held; want 4 and 9-10 MiB", w, held)
		}
		g.set(true)
		got := answersByID(t, c, 4)
		for id := 1; id <= 3; id++ {
			wantBigEcho(t, got[fmt.Sprint(id)], id, 3*mib)
		}
		wantEcho(t, got[`9`], `9`, "eth_chainId", `[9]`)
		if inflight, held := h.heldBytes(); inflight != 0 || held != 0 {
			t.Errorf("after the answers: %d requests, %d bytes held; want 0", inflight, held)
		}
		if w, held := gauge(t, reg, "muxd_requests_waiting"), gauge(t, reg, "muxd_request_bytes_held"); w != 0 || held != 0 {
			t.Errorf("gauges after the answers: %v waiting, %v bytes held; want 0", w, held)
		}
		// The room is back.
		c.send(bigCall(6, 3*mib))
		wantBigEcho(t, parseResp(t, c.recv()), 6, 3*mib)
	})

	// A client that holds nothing may send one request of any size the
	// message limit allows, even past MaxHeldBytes.
	t.Run("one always fits", func(t *testing.T) {
		t.Parallel()
		h, _ := gatedHarness(t, true, func(c *Config) { c.MaxHeldBytes = mib })
		h.fake.SetHandler(func(fc *fakeConn, r fakeReq) {
			if r.Method != "eth_hold" {
				fc.Answer(r)
			}
		})
		c := h.dial(t)
		c.send(bigCall(1, 3*mib))
		r := parseResp(t, c.recv())
		if r.Error != nil {
			t.Fatalf("a lone 3 MiB request past a 1 MiB bound: %s", compact(r.Raw))
		}
		// Held in flight (the node does not answer eth_hold), it counts.
		c.send(strings.Replace(bigCall(2, mib), "eth_call", "eth_hold", 1))
		eventually(t, "request in flight", func() bool { n, _ := h.heldBytes(); return n == 1 })
		c.send(`{"jsonrpc":"2.0","id":3,"method":"eth_chainId","params":[3]}`)
		wantError(t, parseResp(t, c.recv()), `3`, -32005, "limit exceeded")
	})
}

// TestHeldBytesReleased: a client that fills its bound while the node is
// down and then leaves gives the memory back: the heap returns to near
// where it was. Not parallel, so that other tests' heaps stay out of the
// measurement.
func TestHeldBytesReleased(t *testing.T) {
	const mib = 1 << 20
	h, g := gatedHarness(t, false, func(c *Config) {
		c.MaxHeldBytes = 16 * mib
		c.RequestTimeout = time.Minute
		c.UpstreamWait = time.Minute
	})
	g.waitFails(t, 1)
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	c := h.dial(t)
	// muxd answers [] itself: once it has, the session is set up.
	wantError(t, parseResp(t, c.call(`[]`)), `null`, -32600, "empty batch")
	// Earlier tests' goroutines may still be letting go of memory as they
	// end: the baseline is taken once the heap has stopped falling.
	base := heap()
	eventually(t, "the heap to stop falling", func() bool {
		now := heap()
		steady := now+mib > base
		base = min(base, now)
		return steady
	})
	// 20 requests of 3 MiB: 60 MiB sent, at most 16 MiB of it held.
	for id := 1; id <= 20; id++ {
		c.send(bigCall(id, 3*mib))
	}
	// Refusals come at once, in order; the held requests wait.
	refused := 0
	for refused+h.waitingLen() < 20 {
		r := parseResp(t, c.recv())
		if r.Error == nil || r.Error.Code != -32005 {
			t.Fatalf("want a -32005 refusal, got %s", compact(r.Raw))
		}
		refused++
	}
	_, held := h.heldBytes()
	grown := int64(heap()) - int64(base)
	t.Logf("held %d requests (%d MiB), refused %d, heap %+d MiB", h.waitingLen(), held/mib, refused, grown/mib)
	if held > 16*mib || held < 15*mib {
		t.Errorf("held %d bytes, want 15-16 MiB", held)
	}
	// The held frames are in the heap (the measurement sees them), and
	// little besides: no copy of the refused 45 MiB stayed.
	if grown < 10*mib || grown > 16*mib+12*mib {
		t.Errorf("heap grew %d MiB holding %d MiB", grown/mib, held/mib)
	}
	c.conn.CloseNow()
	eventually(t, "client gone", func() bool { return len(h.clientIDs()) == 0 })
	if n := h.waitingLen(); n != 0 {
		t.Errorf("waiting = %d after the client left", n)
	}
	// The client held 15 MiB: under the reclaim threshold, so no
	// reclaim; TestReclaimer covers that path.
	// The session's goroutines let go of their buffers as they end,
	// just after the client is removed: wait for the heap to come down.
	var after uint64
	eventually(t, "heap back near its baseline", func() bool {
		after = heap()
		return after <= base+8*mib
	})
}

// TestReclaimer: releases add up to a reclaim past the threshold, at most
// one per reclaimMinGap, run on a timer (fake time: synctest).
func TestReclaimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		r := &reclaimer{runs: func() { n.Add(1) }}
		runs := func() int { return int(n.Load()) }
		r.released(reclaimThreshold / 2)
		time.Sleep(time.Minute)
		synctest.Wait()
		if runs() != 0 {
			t.Fatalf("%d reclaims under the threshold", runs())
		}
		r.released(reclaimThreshold / 2)
		time.Sleep(reclaimDelay)
		synctest.Wait()
		if runs() != 1 {
			t.Fatalf("%d reclaims after reaching the threshold, want 1", runs())
		}
		// Another release at once waits for the gap.
		r.released(reclaimThreshold)
		r.released(reclaimThreshold) // folded into the same run
		time.Sleep(reclaimMinGap - time.Millisecond)
		synctest.Wait()
		if runs() != 1 {
			t.Fatalf("%d reclaims within reclaimMinGap, want 1", runs())
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if runs() != 2 {
			t.Fatalf("%d reclaims after the gap, want 2", runs())
		}
	})
}

// gauge reads the unlabelled gauge name from reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// TestUnfinishedMessageReclaimed: a session that ends in the middle of a
// large message (its fragments read, its end never sent) lets its read
// buffer go to the reclaimer, as does one whose large message is done:
// memory no bound counts (a message being received) still goes back to
// the system at once.
func TestUnfinishedMessageReclaimed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	pending := func() int {
		h.srv.reclaim.mu.Lock()
		defer h.srv.reclaim.mu.Unlock()
		return h.srv.reclaim.pending
	}
	c, err := dialRaw(h.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	w, err := c.Writer(ctx, websocket.MessageText)
	if err != nil {
		t.Fatal(err)
	}
	const part = 4 << 20
	if _, err := w.Write(bytes.Repeat([]byte(" "), part)); err != nil {
		t.Fatal(err)
	}
	// A close frame after the fragments, in the same stream: the session
	// reads them all, then ends with the message unfinished.
	before := pending()
	go c.Close(websocket.StatusNormalClosure, "")
	eventually(t, "the unfinished message's buffer to be counted", func() bool { return pending() >= before+part })
}
