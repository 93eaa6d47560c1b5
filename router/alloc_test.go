package router

import (
	"testing"
	"time"
)

// The hot paths of DESIGN.md section 7 must not allocate.

func assertNoAllocs(t *testing.T, name string, fn func()) {
	t.Helper()
	if n := testing.AllocsPerRun(1000, fn); n != 0 {
		t.Errorf("%s: %v allocations per run, want 0", name, n)
	}
}

func TestAllocsScan(t *testing.T) {
	msgs := make([]Message, 0, 8)
	resp := []byte(benchResponse)
	push := []byte(newHeadsPush)
	request := []byte(benchRequest)
	batch := []byte(`[` + benchRequest + `,` + benchRequest + `,{"jsonrpc":"2.0","method":"n","params":[]}]`)
	upBatch := []byte(`[` + benchResponse + `,` + benchResponse + `]`)
	var f Frame
	var err error
	assertNoAllocs(t, "ScanUpstream response", func() {
		f, err = ScanUpstream(resp, msgs)
	})
	if err != nil || !f.Messages[0].Result.Present() {
		t.Fatal(err)
	}
	assertNoAllocs(t, "ScanUpstream 2 KB notification", func() {
		f, err = ScanUpstream(push, msgs)
	})
	if err != nil || !f.Messages[0].Subscription.Present() {
		t.Fatal(err)
	}
	assertNoAllocs(t, "ScanUpstream batch", func() {
		f, err = ScanUpstream(upBatch, msgs)
	})
	// A node that sends ambiguous messages without end costs no
	// allocation either (lookalikes with escapes aside).
	for _, amb := range []string{
		`{"jsonrpc":"2.0","id":1,"id":2,"result":"0x1"}`,
		`{"jsonrpc":"2.0","id":1,"ID":2,"result":"0x1"}`,
		`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","Subscription":"0x2","result":1}}`,
	} {
		ambFrame := []byte(amb)
		assertNoAllocs(t, "ScanUpstream "+amb, func() {
			f, err = ScanUpstream(ambFrame, msgs)
		})
		if err != nil || f.Messages[0].Invalid == nil {
			t.Fatalf("%s: %v, not marked", amb, err)
		}
	}
	assertNoAllocs(t, "ScanClient request", func() {
		f, err = ScanClient(request, msgs)
	})
	if err != nil || f.Messages[0].Invalid != nil {
		t.Fatal(err, f.Messages[0].Invalid)
	}
	assertNoAllocs(t, "ScanClient batch", func() {
		f, err = ScanClient(batch, msgs)
	})
	if err != nil || len(f.Messages) != 3 {
		t.Fatal(err)
	}
	m := f.Messages[0]
	assertNoAllocs(t, "MethodIs", func() {
		if !m.MethodIs(batch, "eth_getBalance") {
			panic("MethodIs")
		}
	})
}

// TestAllocsCallKey: CallKey's only allocation for params already in key
// order is the key itself; its working buffer stays on the stack.
func TestAllocsCallKey(t *testing.T) {
	params := []byte(`[{"data":"0x1234","to":"0xabc"},"latest"]`)
	if n := testing.AllocsPerRun(1000, func() { CallKey("eth_call", params) }); n != 1 {
		t.Errorf("CallKey: %v allocations per run, want 1 (the key)", n)
	}
}

func TestAllocsSplice(t *testing.T) {
	frame := []byte(newHeadsPush)
	f, err := ScanUpstream(frame, nil)
	if err != nil {
		t.Fatal(err)
	}
	sub := f.Messages[0].Subscription
	repl := []byte(`"0x00112233445566778899aabbccddeeff"`)
	buf := make([]byte, 0, 4096)
	assertNoAllocs(t, "AppendSpliced", func() {
		buf = AppendSpliced(buf[:0], frame, sub, repl)
	})
	var idBuf [20]byte
	assertNoAllocs(t, "AppendUpstreamID", func() {
		buf = AppendUpstreamID(idBuf[:0], 1<<63)
	})
	assertNoAllocs(t, "AppendErrorResponse", func() {
		buf = AppendErrorResponse(buf[:0], []byte(`"a"`), ErrorUnavailable.Because("connection lost"))
	})
}

func TestAllocsRoute(t *testing.T) {
	r := NewRequests()
	// Other requests in flight, so that the map is sized and in use.
	for i := 0; i < 100; i++ {
		r.Add(r.Next(), Pending{Client: ClientID(i%4 + 1), ID: []byte("1"), Deadline: t0.Add(time.Hour)})
	}
	frame := []byte(benchResponse) // id 42
	p := Pending{Client: 7, ID: []byte(`"client-id"`), Method: "eth_getBalance", Deadline: t0.Add(time.Minute)}
	msgs := make([]Message, 0, 4)
	out := make([]byte, 0, 256)
	assertNoAllocs(t, "Add+Take+splice", func() {
		r.Add(42, p)
		f, err := ScanUpstream(frame, msgs)
		if err != nil {
			panic(err)
		}
		m := &f.Messages[0]
		uid, ok := ParseUpstreamID(m.ID.In(frame))
		if !ok {
			panic("id")
		}
		got, ok := r.Take(uid)
		if !ok {
			panic("not pending")
		}
		out = AppendSpliced(out[:0], frame, m.ID, got.ID)
	})
	if string(out) != `{"jsonrpc":"2.0","id":"client-id","result":"0x8a3c6e1f0b2d4c5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d"}` {
		t.Fatalf("routed %s", out)
	}
	if r.deadline.len() > 4*r.Len()+1024+16 {
		t.Fatalf("heap grew to %d", r.deadline.len())
	}
}

// TestAllocsRouteArray: a node's 10-element array answer to a batch is
// scanned once and each element routed (table lookup, settling its place
// in the upstream array, id splice) without an allocation.
func TestAllocsRouteArray(t *testing.T) {
	const n = 10
	r := NewRequests()
	for i := 0; i < 100; i++ {
		r.Add(r.Next(), Pending{Client: ClientID(i%4 + 1), ID: []byte("1"), Deadline: t0.Add(time.Hour)})
	}
	var answer []byte
	answer = append(answer, '[')
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = r.Next()
		if i > 0 {
			answer = append(answer, ',')
		}
		answer = append(answer, `{"jsonrpc":"2.0","id":`...)
		answer = AppendUpstreamID(answer, ids[i])
		answer = append(answer, `,"result":"0x8a3c6e1f0b2d4c5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d"}`...)
	}
	answer = append(answer, ']')
	msgs := make([]Message, 0, n)
	out := make([]byte, 0, 256)
	pend := make([]Pending, n)
	for i := range pend {
		pend[i] = Pending{Client: 7, ID: []byte(`"client-id"`), Method: "eth_call", Deadline: t0.Add(time.Minute)}
	}
	up := new(UpstreamBatch)
	for i, id := range ids {
		up.AddCall(id, []byte("x"))
		pend[i].Up = up
	}
	assertNoAllocs(t, "route a 10-element array", func() {
		for i, id := range ids {
			r.Add(id, pend[i])
		}
		up.rearm() // as sent whole and unanswered
		f, err := ScanUpstream(answer, msgs)
		if err != nil || len(f.Messages) != n {
			panic(err)
		}
		for k := range f.Messages {
			m := &f.Messages[k]
			elem, idSpan := Element(answer, m)
			uid, ok := ParseUpstreamID(idSpan.In(elem))
			if !ok {
				panic("id")
			}
			got, ok := r.Take(uid)
			if !ok {
				panic("not pending")
			}
			got.Up.Settle(uid)
			out = AppendSpliced(out[:0], elem, idSpan, got.ID)
		}
	})
	if string(out) != `{"jsonrpc":"2.0","id":"client-id","result":"0x8a3c6e1f0b2d4c5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d"}` {
		t.Fatalf("routed %s", out)
	}
}
