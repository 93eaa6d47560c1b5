package core

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/muxd/muxd/router"
)

// allocRuns is how many events each allocation test measures.
const allocRuns = 500

// allocHarness is a connected core that counts nothing (an Observer of
// the shell's would count into preallocated series), with limits wide
// enough for allocRuns requests in flight, the bound on calls at the node
// among them: the common path, where calls take and free slots but none
// queues.
func allocHarness(t *testing.T, clients int) *harness {
	h := newHarness(t, func(c *Config) {
		c.Observer = nil
		c.MaxClients = clients
		c.MaxInFlight = 2 * allocRuns
		c.MaxHeldBytes = 1 << 30
		c.MaxUpstreamInFlight = 2 * allocRuns
	})
	for range clients {
		h.join(false)
	}
	h.connect()
	return h
}

// scanned is an upstream frame and its scan, made before the measure as
// the shell makes it outside the core's lock.
type scanned struct {
	frame []byte
	f     router.Frame
}

func scanUpstream(t *testing.T, frame string) scanned {
	t.Helper()
	b := []byte(frame)
	f, err := router.ScanUpstream(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	return scanned{b, f}
}

// TestAllocsAnswerToOneRequest checks that routing the answer to a single
// request, with Effects reused from one event to the next, allocates
// nothing: the delivery borrows the frame and the client's id.
func TestAllocsAnswerToOneRequest(t *testing.T) {
	h := allocHarness(t, 1)
	answers := make([]scanned, allocRuns+1) // AllocsPerRun warms up once
	for i := range answers {
		h.clientFrame(1, req(strconv.Itoa(i), "eth_getBalance"))
		answers[i] = scanUpstream(t, res(strconv.Itoa(i+1), `"0x`+strconv.Itoa(1000+i)+`"`))
	}
	var e Effects
	i := 0
	n := testing.AllocsPerRun(allocRuns, func() {
		a := &answers[i]
		i++
		h.c.UpstreamFrame(&e, h.gen, a.frame, a.f, nil, h.now)
		if len(e.Deliveries) != 1 {
			t.Fatalf("answer %d: %d deliveries, want 1", i, len(e.Deliveries))
		}
	})
	if n != 0 {
		t.Errorf("UpstreamFrame answering one request: %v allocations per event, want 0", n)
	}
	if i != allocRuns+1 || h.c.Stats().Pending != 0 {
		t.Fatalf("%d answers routed, %d still pending", i, h.c.Stats().Pending)
	}
}

// TestAllocsPushFanout checks that a push to N ready members allocates
// nothing once Effects has grown to N deliveries: one shared message,
// each member's id alongside.
func TestAllocsPushFanout(t *testing.T) {
	const members = 200
	h := allocHarness(t, members)
	for id := 1; id <= members; id++ {
		h.clientFrame(router.ClientID(id), sub("1", heads))
	}
	h.upstreamFrame(0, res("1", `"0xaa"`), false)
	p := scanUpstream(t, push(`"0xaa"`, hdr(16, "a", "9")))
	var e Effects
	n := testing.AllocsPerRun(allocRuns, func() {
		h.c.UpstreamFrame(&e, h.gen, p.frame, p.f, nil, h.now)
		if len(e.Deliveries) != members {
			t.Fatalf("%d deliveries, want %d", len(e.Deliveries), members)
		}
	})
	if n != 0 {
		t.Errorf("UpstreamFrame fanning a push out to %d members: %v allocations per event, want 0", members, n)
	}
}

// TestAllocsAnswerToBatch checks that routing the node's array answer to a
// whole client batch allocates nothing: the group of its calls is found
// by id, and the client's array is spliced into the memory the request
// array was laid out in.
func TestAllocsAnswerToBatch(t *testing.T) {
	// The node may answer an array in any order; the client gets request
	// order either way, with no allocation.
	for _, reversed := range []bool{false, true} {
		t.Run(map[bool]string{false: "node_in_order", true: "node_reversed"}[reversed], func(t *testing.T) {
			allocsAnswerToBatch(t, reversed)
		})
	}
}

func allocsAnswerToBatch(t *testing.T, reversed bool) {
	const n = 10
	h := newHarness(t, func(c *Config) {
		c.Observer = nil
		c.MaxInFlight = n * (allocRuns + 1)
		c.MaxUpstreamInFlight = n * (allocRuns + 1)
		c.MaxHeldBytes = 1 << 30
		c.MaxBatch, c.UpstreamMaxBatch = n, n
	})
	h.join(false)
	h.connect()
	answers := make([]scanned, allocRuns+1) // AllocsPerRun warms up once
	wants := make([]string, allocRuns+1)
	uid := 0
	for i := range answers {
		req, want := "[", "["
		var elems []string
		for k := range n {
			if k > 0 {
				req, want = req+",", want+","
			}
			uid++
			req += `{"jsonrpc":"2.0","id":"c` + strconv.Itoa(uid) + `","method":"eth_call","params":[{"to":"0x6b175474e89094c44da98b954eedeac495271d0f"},"latest"]}`
			result := `"0x` + strconv.Itoa(1000+uid) + `"`
			elems = append(elems, res(strconv.Itoa(uid), result))
			want += res(`"c`+strconv.Itoa(uid)+`"`, result)
		}
		if reversed {
			slices.Reverse(elems)
		}
		h.clientFrame(1, req+"]")
		answers[i] = scanUpstream(t, "["+strings.Join(elems, ",")+"]")
		wants[i] = want + "]"
	}
	var e Effects
	i := 0
	got := testing.AllocsPerRun(allocRuns, func() {
		a := &answers[i]
		i++
		h.c.UpstreamFrame(&e, h.gen, a.frame, a.f, nil, h.now)
		if len(e.Deliveries) != 1 {
			t.Fatalf("answer %d: %d deliveries, want 1", i, len(e.Deliveries))
		}
		if string(e.Deliveries[0].Msg) != wants[i-1] {
			t.Fatalf("answer %d:\n got %s\nwant %s", i, e.Deliveries[0].Msg, wants[i-1])
		}
	})
	if got != 0 {
		t.Errorf("UpstreamFrame answering a batch of %d: %v allocations per event, want 0", n, got)
	}
	if i != allocRuns+1 || h.c.Stats().Pending != 0 {
		t.Fatalf("%d answers routed, %d still pending", i, h.c.Stats().Pending)
	}
}

// TestBatchArenasReused: with Config.Arenas, each client batch is laid out
// in a buffer Arenas returned, and an answer that completes the batch comes
// back in that buffer (Delivery.Arena) for the shell to reuse. Buffers are
// handed back dirty (overwritten, as after a write) and reused: every
// upstream array and every answer stays byte for byte what it must be. An
// answer too long for its arena is built elsewhere and carries no Arena.
func TestBatchArenasReused(t *testing.T) {
	var (
		free   [][]byte
		handed = map[*byte]bool{}
		made   int
	)
	h := newHarness(t, func(c *Config) {
		c.MaxBatch, c.UpstreamMaxBatch, c.MaxInFlight = 10, 10, 10
		c.Arenas = func(n int) []byte {
			if k := len(free); k > 0 && cap(free[k-1]) >= n {
				b := free[k-1]
				free = free[:k-1]
				return b
			}
			made++
			b := make([]byte, 0, max(n, 4096))
			handed[&b[:1][0]] = true
			return b
		}
	})
	h.join(false)
	h.connect()
	for i := range 40 {
		n := 2 + i%4
		var req, want []string
		for k := range n {
			id := `"r` + strconv.Itoa(i) + `-` + strconv.Itoa(k) + `"`
			req = append(req, `{"jsonrpc":"2.0","id":`+id+`,"method":"eth_call","params":[{"to":"0x6b175474e89094c44da98b954eedeac495271d0f","data":"0x`+strconv.Itoa(i*k)+`"},"latest"]}`)
			want = append(want, id)
		}
		out := h.clientFrame(1, "["+strings.Join(req, ",")+"]")
		if len(out) != 1 || !strings.HasPrefix(out[0], "up> [") {
			t.Fatalf("batch %d: %v, want one upstream array", i, out)
		}
		var sent []struct {
			ID     json.RawMessage `json:"id"`
			Params json.RawMessage `json:"params"`
		}
		if err := json.Unmarshal([]byte(out[0][len("up> "):]), &sent); err != nil || len(sent) != n {
			t.Fatalf("batch %d: upstream array %s: %v", i, out[0], err)
		}
		result := func(k int) string { return `"0x` + strconv.Itoa(1000*i+k) + `"` }
		long := i == 39 // an answer longer than the arena
		var ans, exp []string
		for k := range n {
			r := result(k)
			if long {
				r = `"0x` + strings.Repeat("ab", 4096) + `"`
			}
			ans = append(ans, res(string(sent[k].ID), r))
			exp = append(exp, res(want[k], r))
		}
		got := h.upstreamFrame(0, "["+strings.Join(ans, ",")+"]", false)
		if len(got) != 1 || got[0] != "c1< ["+strings.Join(exp, ",")+"]" {
			t.Fatalf("batch %d: delivered %v, want c1< [%s]", i, got, strings.Join(exp, ","))
		}
		d := h.e.Deliveries[0]
		if long {
			if d.Arena != nil {
				t.Fatalf("batch %d: an answer longer than its arena came with Arena", i)
			}
			continue
		}
		if d.Arena == nil || !handed[&d.Arena[:1][0]] || &d.Msg[0] != &d.Arena[:1][0] {
			t.Fatalf("batch %d: the answer does not lie in an arena Arenas returned", i)
		}
		a := d.Arena[:cap(d.Arena)]
		for j := range a {
			a[j] = 'x' // written and reused: whatever it held is gone
		}
		free = append(free, a[:0])
	}
	if made != 1 {
		t.Errorf("%d arenas made for 40 batches one after another, want 1", made)
	}
}

// hdr is a newHeads header of block n whose hash and parent hash are 64
// times the hex digits h and p.
func hdr(n int, h, p string) string {
	return fmt.Sprintf(`{"number":"0x%x","hash":"0x%s","parentHash":"0x%s"}`, n, strings.Repeat(h, 64), strings.Repeat(p, 64))
}
