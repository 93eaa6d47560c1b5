package mux

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/muxd/muxd/internal/testnode"
)

// largeResult is a JSON string result that makes the upstream frame
// {"jsonrpc":"2.0","id":<upID>,"result":"..."} exactly frameLen bytes. Its
// contents vary so that a shifted or dropped byte shows.
func largeResult(upID []byte, frameLen int) string {
	n := frameLen - len(`{"jsonrpc":"2.0","id":`) - len(upID) - len(`,"result":""}`)
	var b strings.Builder
	b.Grow(n + 2)
	b.WriteByte('"')
	for i := 0; b.Len() < n+1; i++ {
		b.WriteString(strconv.FormatUint(uint64(i)*2654435761%(1<<32), 16))
	}
	s := b.String()[:n+1]
	return s + `"`
}

// largeHandler answers eth_large [n] with an n-byte frame (counted with the
// upstream id) and records the result sent, by client request id order.
type largeHandler struct{ results chan string }

// newLargeHarness returns a harness, with cfg applied (if not nil), whose
// node answers eth_large through a largeHandler that records up to results
// answers unread.
func newLargeHarness(t *testing.T, results int, cfg func(*Config)) (*harness, *largeHandler) {
	lh := &largeHandler{results: make(chan string, results)}
	h := newHarness(t, harnessOpts{cfg: cfg})
	h.fake.SetHandler(lh.handle)
	return h, lh
}

func (l *largeHandler) handle(fc *fakeConn, r fakeReq) {
	if r.Method != "eth_large" {
		fc.Answer(r)
		return
	}
	var p []int
	_ = json.Unmarshal(r.Params, &p)
	res := largeResult(r.ID, p[0])
	l.results <- res
	fc.Send(resultFrame(r.ID, res))
}

// TestLargeAnswersSpliced: answers of every size around muxd's buffer
// bounds arrive byte for byte as the node sent them, with the client's id:
// 16 KiB (copied below, lent above), 64 KiB (the reader's first buffer),
// 4 MiB (the reader's own buffer), and the upstream read limit; with ids
// shorter and longer than the upstream's, one too long for the headroom,
// and as a batch element (copied).
func TestLargeAnswersSpliced(t *testing.T) {
	t.Parallel()
	const readLimit = 5<<20 + 123
	h, lh := newLargeHarness(t, 1, func(c *Config) { c.UpstreamReadLimit = readLimit })
	c := h.dial(t)
	longID := `"` + strings.Repeat("i", 2*frameHeadroom) + `"`
	ids := []string{`7`, `"client-id-longer-than-any-upstream-id-0123456789"`, longID}
	var sizes []int
	for _, b := range []int{inlineSpliceMax, minFrameBuf, maxKeptUpstreamBuf} {
		sizes = append(sizes, b-1, b, b+1)
	}
	sizes = append(sizes, readLimit-1, readLimit)
	for _, size := range sizes {
		for _, id := range ids {
			for _, batch := range []bool{false, true} {
				name := fmt.Sprintf("%d bytes, id %.12s, batch %v", size, id, batch)
				req := `{"jsonrpc":"2.0","id":` + id + `,"method":"eth_large","params":[` + strconv.Itoa(size) + `]}`
				if batch {
					req = `[` + req + `]`
				}
				c.send(req)
				got := c.recv()
				res := <-lh.results
				want := `{"jsonrpc":"2.0","id":` + id + `,"result":` + res + `}`
				if batch {
					want = `[` + want + `]`
				}
				if !bytes.Equal(got, []byte(want)) {
					i := 0
					for i < min(len(got), len(want)) && got[i] == want[i] {
						i++
					}
					t.Fatalf("%s: %d bytes, want %d; first difference at %d: got %.40q want %.40q", name, len(got), len(want), i, got[i:], want[i:])
				}
			}
		}
	}
	if h.srv.frames.held() == 0 {
		t.Error("no frame buffer came back to the pool: nothing was lent")
	}
	if n := h.fake.NumConns(); n != 1 {
		t.Errorf("upstream connections %d, want 1", n)
	}
}

// TestLargeAnswerHTTP: a large answer to an HTTP request is lent like one to
// a WebSocket client, arrives byte for byte, and its buffer comes back to
// the pool once written.
func TestLargeAnswerHTTP(t *testing.T) {
	t.Parallel()
	h, lh := newLargeHarness(t, 1, nil)
	front := httptest.NewServer(h.srv)
	t.Cleanup(front.Close)
	resp, err := http.Post(front.URL, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":"h","method":"eth_large","params":[1048576]}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"jsonrpc":"2.0","id":"h","result":` + <-lh.results + `}`; string(got) != want {
		t.Fatalf("%d bytes, want %d", len(got), len(want))
	}
	if h.srv.frames.held() == 0 {
		t.Error("the answer's frame buffer did not come back to the pool")
	}
}

// TestLargeAnswerPastReadLimit: an answer one byte past the upstream read
// limit costs only its own request: it gets -32005 (response too large),
// a bystander's request in flight meanwhile gets its answer, the
// connection goes on (one, never redialled), and an answer at the limit
// passes on it. An array answer past the limit gives every call of that
// client batch the error; one whose id is not in its first bytes leaves its
// request to the deadline.
func TestLargeAnswerPastReadLimit(t *testing.T) {
	t.Parallel()
	const readLimit = 1<<20 + 7
	h, lh := newLargeHarness(t, 4, func(c *Config) {
		c.UpstreamReadLimit = readLimit
		c.RequestTimeout = 2 * time.Second
	})
	large := func(id string, n int) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"eth_large","params":[` + strconv.Itoa(n) + `]}`
	}
	holder := testnode.NewHolder("eth_blockNumber")
	h.fake.SetHandler(func(fc *fakeConn, r fakeReq) {
		if r.Method == "eth_blockNumber" {
			holder.Handle(fc, r)
			return
		}
		lh.handle(fc, r)
	})
	c := h.dial(t)
	by := h.dial(t)
	by.send(`{"jsonrpc":"2.0","id":"by","method":"eth_blockNumber","params":[]}`)
	held := holder.TakeN(t, 1)
	got := parseResp(t, c.call(large(`1`, readLimit+1)))
	<-lh.results
	wantError(t, got, `1`, -32005, "limit exceeded")
	if got.reason() != "response too large" {
		t.Errorf("past the limit: %s, want reason response too large", got.Raw)
	}
	held[0].Conn.Answer(held[0].Req) // on the same connection, after the message thrown away
	if r := parseResp(t, by.recv()); r.Error != nil {
		t.Errorf("bystander: %s, want its answer", r.Raw)
	}
	got = parseResp(t, c.call(large(`2`, readLimit)))
	if res := <-lh.results; string(got.Result) != res {
		t.Errorf("answer at the limit: %d bytes of result, want %d", len(got.Result), len(res))
	}

	// The node answers a client batch's array with one array past the
	// limit: both calls get the error, in one array.
	h.fake.SetArrayHandler(func(fc *fakeConn, reqs []fakeReq) {
		var answers [][]byte
		for _, r := range reqs {
			answers = append(answers, resultFrame(r.ID, largeResult(r.ID, readLimit/2+100)))
		}
		fc.Send(arrayFrame(answers))
	})
	arr := c.call(`[` + large(`"a"`, 10) + `,` + large(`"b"`, 10) + `]`)
	var elems []json.RawMessage
	if err := json.Unmarshal(arr, &elems); err != nil || len(elems) != 2 {
		t.Fatalf("batch answer %.200s: %v", arr, err)
	}
	for i, id := range []string{`"a"`, `"b"`} {
		r := parseResp(t, elems[i])
		wantError(t, r, id, -32005, "limit exceeded")
	}

	// A node that answers an array's calls one by one: a lone answer past
	// the limit fails its own call only; the other gets its answer.
	h.fake.SetArrayHandler(func(fc *fakeConn, reqs []fakeReq) {
		fc.Send(resultFrame(reqs[0].ID, largeResult(reqs[0].ID, readLimit+100)))
		fc.Send(resultFrame(reqs[1].ID, `"small"`))
	})
	arr = c.call(`[` + large(`"c"`, 10) + `,` + large(`"d"`, 10) + `]`)
	elems = nil
	if err := json.Unmarshal(arr, &elems); err != nil || len(elems) != 2 {
		t.Fatalf("batch answer %.200s: %v", arr, err)
	}
	for _, e := range elems {
		switch r := parseResp(t, e); string(r.ID) {
		case `"c"`:
			wantError(t, r, `"c"`, -32005, "limit exceeded")
		case `"d"`:
			if string(r.Result) != `"small"` {
				t.Errorf("the other call of the array: %s, want its own answer", r.Raw)
			}
		default:
			t.Errorf("unexpected element %s", r.Raw)
		}
	}

	// An answer whose id comes after its (too large) result cannot be
	// attributed: its request gets -32002 at its deadline, the connection
	// still goes on.
	h.fake.SetArrayHandler(nil)
	h.fake.SetHandler(func(fc *fakeConn, r fakeReq) {
		if r.Method != "eth_large" {
			fc.Answer(r)
			return
		}
		fc.Send([]byte(`{"jsonrpc":"2.0","result":` + largeResult(r.ID, readLimit+10) + `,"id":` + string(r.ID) + `}`))
	})
	wantError(t, parseResp(t, c.call(large(`3`, 0))), `3`, -32002, "request timed out")
	if r := parseResp(t, c.call(`{"jsonrpc":"2.0","id":4,"method":"eth_chainId","params":[]}`)); r.Error != nil {
		t.Errorf("after an unattributed message: %s", r.Raw)
	}
	if n := h.fake.NumConns(); n != 1 {
		t.Errorf("upstream connections %d, want 1", n)
	}
	if got := counterValue(h.srv.metrics.LimitHits.WithLabelValues("upstream_read")); got != 4 {
		t.Errorf("limit hits upstream_read %v, want 4", got)
	}
}

// TestSlowClientLargeAnswer: a client that does not read its 32 MB answer
// holds up nobody (others get theirs meanwhile). The first answer into its
// empty queue is not held against it, a second one fits within its 40 MiB
// bound, and it is cut once a third has taken its queue past the bound
// and it has taken nothing for slow_consumer_timeout.
func TestSlowClientLargeAnswer(t *testing.T) {
	t.Parallel()
	const answer = 32e6
	h, _ := newLargeHarness(t, 64, func(c *Config) {
		c.OutboundQueueBytes = 40 << 20
		c.SlowConsumerTimeout = 500 * time.Millisecond
		// Not a test of deadlines: on a loaded machine a 32 MB answer
		// may take longer than the harness's 10 s, and the second call
		// would then time out instead of being queued.
		c.RequestTimeout = 2 * time.Minute
	})
	m := h.srv.Metrics()
	slow := h.dialSlow(t)
	good := h.dial(t)
	call := func(id int) string {
		return `{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"eth_large","params":[` + strconv.Itoa(answer) + `]}`
	}
	// Each write has its own deadline: the good client's three 32 MB
	// calls between them may take longer than one on a loaded machine.
	slowSend := (&wsClient{t: t, conn: slow}).send
	slowSend(call(1))
	// Its answer is queued (the first is always accepted) and its writer
	// is stuck on the full socket: others are served meanwhile.
	eventually(t, "the slow client's answer to be queued", func() bool { return maxPending(h.srv) >= answer })
	for id := range 3 {
		got := good.call(call(100 + id))
		if len(got) < answer {
			t.Fatalf("good client: %d bytes", len(got))
		}
		good.barrier()
	}
	if v := counterValue(m.SlowConsumers); v != 0 {
		t.Fatalf("slow consumers = %v before the second answer", v)
	}
	slowSend(call(2))
	eventually(t, "the second answer to be queued", func() bool { return maxPending(h.srv) >= 2*answer })
	good.barrier()
	if v := counterValue(m.SlowConsumers); v != 0 {
		t.Fatalf("slow consumers = %v with the second answer within the bound", v)
	}
	slowSend(call(3))
	eventually(t, "the slow consumer to be cut", func() bool { return counterValue(m.SlowConsumers) == 1 })
	eventually(t, "the slow session to end", func() bool { return len(h.clientIDs()) == 1 })
	good.barrier()
	if got := good.call(call(200)); len(got) < answer {
		t.Fatalf("good client after the cut: %d bytes", len(got))
	}
}

// maxPending is the most bytes any client of s has queued, parked or being
// written.
func maxPending(s *Server) int {
	n := 0
	s.peersMu.RLock()
	defer s.peersMu.RUnlock()
	for _, c := range s.peers {
		n = max(n, c.out.pending())
	}
	return n
}
