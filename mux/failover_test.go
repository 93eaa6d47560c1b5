package mux

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/muxd/muxd/failover"
	"github.com/muxd/muxd/internal/testnode"
)

// These tests are issue #14's fake-node "must show": muxd in front of fake
// nodes that share one simulated chain (testnode.Chain), each scenario
// with three clients: one holding a newHeads subscription, one holding a
// logs subscription, one making requests. Each shows which node is active,
// what each client gets, and that the subscribers see every head and
// every log of the chain exactly once, in order, across the switch.

// startHead is every node's head when muxd starts; the subscribers are
// owed every block above it.
const startHead = 10

// logsFilter is the logs subscriber's filter: the chain's logs from
// LogAddresses[0] (two of each block's three).
var logsFilter = `{"address":"` + testnode.LogAddresses[0] + `"}`

// failNet is a running muxd whose upstreams are fake nodes sharing one
// chain, most preferred first.
type failNet struct {
	t     *testing.T
	chain *testnode.Chain
	nodes []*testnode.ChainNode
	cfg   func(*Config)
	srv   *Server
	url   string
}

// newFailNet starts n fake nodes at startHead and lets prepare adjust
// them; start then starts muxd in front of them, with cfg applied.
func newFailNet(t *testing.T, n int, cfg func(*Config), prepare func(f *failNet)) *failNet {
	t.Helper()
	f := &failNet{t: t, chain: testnode.NewChain(3), cfg: cfg}
	for range n {
		f.nodes = append(f.nodes, f.chain.NewNode(t, startHead))
	}
	if prepare != nil {
		prepare(f)
	}
	return f
}

// start starts muxd.
func (f *failNet) start() {
	t := f.t
	t.Helper()
	var ups []Upstream
	for _, node := range f.nodes {
		ups = append(ups, Upstream{URL: node.URL})
	}
	c := Config{
		Upstreams:        ups,
		RequestTimeout:   10 * time.Second,
		PingInterval:     -1,
		ReconnectInitial: 10 * time.Millisecond,
		ReconnectMax:     100 * time.Millisecond,
		FailbackAfter:    -1,
		Logger:           testLogger(t),
	}
	if f.cfg != nil {
		f.cfg(&c)
	}
	srv, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	front := runServer(t, srv, http.HandlerFunc(srv.ServeWebSocket), nil)
	f.url = "ws" + strings.TrimPrefix(front.URL, "http")
}

// advance moves the chain on: each of the given nodes, in order, gets the
// next block of its own and pushes it.
func (f *failNet) advance(nodes ...int) {
	for _, i := range nodes {
		f.nodes[i].Advance()
	}
}

// waitHealth waits until node i's connection k (1-based) has answered
// muxd's health requests: its chain id, and its newHeads subscription live.
func (f *failNet) waitHealth(i, k int) *testnode.Conn {
	f.t.Helper()
	c := f.nodes[i].Conn(f.t, k)
	f.nodes[i].WaitAnswered(f.t, "eth_chainId", k)
	c.WaitLiveSubs(f.t, 1)
	return c
}

// waitClientSubs waits until node i's latest connection carries muxd's
// health subscription and the two clients' subscriptions.
func (f *failNet) waitClientSubs(i int) {
	f.t.Helper()
	n := f.nodes[i]
	n.Wait(f.t, fmt.Sprintf("the clients' subscriptions live on node %d", i), func() bool {
		if n.NumConns() == 0 {
			return false
		}
		c := n.Conn(f.t, n.NumConns())
		return !c.Closed() && len(c.LiveSubs()) == 3
	})
}

// waitSelected waits until muxd's selector has node i's head at block h
// (from muxd's health subscription on it).
func (f *failNet) waitSelected(i int, h uint64) {
	f.t.Helper()
	eventually(f.t, fmt.Sprintf("node %d's head %d seen", i, h), func() bool {
		f.srv.mu.Lock()
		defer f.srv.mu.Unlock()
		return f.srv.set.sel.Status(i, time.Now()).Head >= h
	})
}

// kill makes node i refuse handshakes and drops its connections: a node
// that died.
func (f *failNet) kill(i int) {
	f.nodes[i].Refuse(true)
	f.drop(i)
}

// drop drops node i's connections; it accepts the next.
func (f *failNet) drop(i int) {
	n := f.nodes[i]
	for k := 1; k <= n.NumConns(); k++ {
		n.Conn(f.t, k).Drop()
	}
}

// holdOn makes node i hold the clients' requests of methods until the
// test takes them from the returned Holder; it serves the rest from the
// chain.
func (f *failNet) holdOn(i int, methods ...string) *testnode.Holder {
	n := f.nodes[i]
	h := testnode.NewHolder(methods...)
	n.SetHandler(func(fc *testnode.Conn, r testnode.Req) {
		// Only the clients' requests: muxd's own ask for blocks with
		// full transactions false.
		if slices.Contains(methods, r.Method) && !strings.HasSuffix(string(r.Params), "false]") {
			h.Handle(fc, r)
			return
		}
		n.Handle(fc, r)
	})
	return h
}

// failoverCount is muxd_upstream_failovers_total{reason}.
func (f *failNet) failoverCount(r failover.Reason) float64 {
	return counterValue(f.srv.metrics.Failovers.WithLabelValues(r.String()))
}

// stream is a client connection to muxd whose frames a goroutine reads
// and keeps, in order, so that the test can wait for any of them.
type stream struct {
	t       *testing.T
	c       *websocket.Conn
	mu      sync.Mutex
	frames  []resp
	changed chan struct{} // closed and replaced on every frame
	err     error         // why reading stopped
	done    chan struct{}
}

func (f *failNet) dial(t *testing.T) *stream {
	t.Helper()
	c, err := dialRaw(f.url, nil)
	if err != nil {
		t.Fatalf("dial muxd: %v", err)
	}
	s := &stream{t: t, c: c, changed: make(chan struct{}), done: make(chan struct{})}
	go s.read()
	t.Cleanup(func() {
		c.CloseNow()
		<-s.done
	})
	return s
}

func (s *stream) read() {
	defer close(s.done)
	for {
		_, b, err := s.c.Read(context.Background())
		var r resp
		if err == nil {
			r, err = decodeResp(b)
		}
		s.mu.Lock()
		if err != nil {
			s.err = err
		} else {
			s.frames = append(s.frames, r)
		}
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func (s *stream) send(msg string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := s.c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		s.t.Fatalf("client write: %v", err)
	}
}

// await waits until cond holds of the frames read so far; on a timeout or
// the connection's end it fails the test, logging what describe says of
// the frames.
func (s *stream) await(what string, cond func([]resp) bool, describe func([]resp) string) {
	s.t.Helper()
	ok := false
	defer func() {
		if !ok && describe != nil {
			s.mu.Lock()
			s.t.Logf("while waiting for %s the client got: %s", what, describe(s.frames))
			s.mu.Unlock()
		}
	}()
	testnode.Await(s.t, what, func() (bool, <-chan struct{}) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if cond(s.frames) {
			ok = true
			return true, nil
		}
		if s.err != nil {
			s.t.Fatalf("client connection ended while waiting for %s: %v", what, s.err)
		}
		return false, s.changed
	})
}

// answer waits for the answer with id (JSON) and returns it.
func (s *stream) answer(id string) resp {
	s.t.Helper()
	var got resp
	s.await("the answer "+id, func(fs []resp) bool {
		for _, r := range fs {
			if r.Method == "" && string(r.ID) == id {
				got = r
				return true
			}
		}
		return false
	}, nil)
	return got
}

// answered reports whether the answer with id has come.
func (s *stream) answered(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.frames {
		if r.Method == "" && string(r.ID) == id {
			return true
		}
	}
	return false
}

func (s *stream) call(id, method, params string) resp {
	s.t.Helper()
	s.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"` + method + `","params":` + params + `}`)
	return s.answer(id)
}

// subscribe subscribes with params and returns the subscription id.
func (s *stream) subscribe(params string) string {
	s.t.Helper()
	r := s.call(`"sub"`, "eth_subscribe", params)
	if r.Error != nil || !subIDPattern.MatchString(string(r.Result)) {
		s.t.Fatalf("subscribe %s: got %s", params, r.Raw)
	}
	return string(r.Result)
}

// barrier makes a request and waits for its answer: whatever muxd had
// queued for the client before it has then been read.
func (s *stream) barrier() {
	s.t.Helper()
	if r := s.call(`"barrier"`, "web3_clientVersion", `[]`); r.Error != nil {
		s.t.Fatalf("barrier: %s", r.Raw)
	}
}

// pushed returns the results (compacted) of the pushes for subscription
// sub in fs, and how many frames were neither those nor answers.
func pushed(fs []resp, sub string) (results []string, other int) {
	for _, r := range fs {
		if r.Method != "eth_subscription" {
			if r.ID == nil {
				other++
			}
			continue
		}
		var p struct {
			Subscription json.RawMessage `json:"subscription"`
			Result       json.RawMessage `json:"result"`
		}
		if json.Unmarshal(r.Params, &p) != nil || string(p.Subscription) != sub {
			other++
			continue
		}
		results = append(results, compact(p.Result))
	}
	return results, other
}

// headSummary lists the blocks of newHeads results, "number/hash[:8]",
// for failure messages.
func headSummary(results []string) string {
	var s []string
	for _, r := range results {
		var h struct{ Number, Hash string }
		_ = json.Unmarshal([]byte(r), &h)
		s = append(s, fmt.Sprintf("%s/%.10s", h.Number, h.Hash))
	}
	return strings.Join(s, " ")
}

// logSummary lists logs results as "block:index".
func logSummary(results []string) string {
	var s []string
	for _, r := range results {
		var l struct{ BlockNumber, LogIndex string }
		_ = json.Unmarshal([]byte(r), &l)
		s = append(s, l.BlockNumber+":"+l.LogIndex)
	}
	return strings.Join(s, " ")
}

// wantHeads returns the chain's newHeads objects for blocks from..to.
func wantHeads(c *testnode.Chain, from, to uint64) []string {
	var s []string
	for n := from; n <= to; n++ {
		s = append(s, compact(c.Block(n).HeaderJSON()))
	}
	return s
}

// wantLogs returns the chain's logs that logsFilter selects in blocks
// from..to, in chain order.
func wantLogs(c *testnode.Chain, from, to uint64) []string {
	f, _ := testnode.ParseLogFilter(json.RawMessage(logsFilter))
	var s []string
	for n := from; n <= to; n++ {
		for _, l := range c.Block(n).Logs {
			if f.Matches(l) {
				s = append(s, compact(l.JSON()))
			}
		}
	}
	return s
}

// checkSeq fails the test unless got is exactly want, describing both.
func checkSeq(t *testing.T, what string, got, want []string, summary func([]string) string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: got %d\n  %s\nwant %d (each once, in chain order)\n  %s", what, len(got), summary(got), len(want), summary(want))
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Errorf("%s: first difference at %d:\n  got  %s\n  want %s", what, i, got[i], want[i])
				break
			}
		}
	}
}

// activePath records the active upstream each time it changes, from now
// until the test ends: the indexes in order, without repeats, and without
// -1 (no upstream active, between a loss and the switch it causes).
type activePath struct {
	mu   sync.Mutex
	path []int
}

func watchActive(t *testing.T, srv *Server) *activePath {
	p := &activePath{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			_, ch := srv.Connected() // before Active: no change is missed
			if a := srv.Active(); a >= 0 {
				p.mu.Lock()
				if len(p.path) == 0 || p.path[len(p.path)-1] != a {
					p.path = append(p.path, a)
				}
				p.mu.Unlock()
			}
			select {
			case <-ch:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return p
}

func (p *activePath) get() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.path)
}

// seriesTotal is the sum of every series of v.
func seriesTotal(v *prometheus.CounterVec) float64 {
	ch := make(chan prometheus.Metric)
	go func() { v.Collect(ch); close(ch) }()
	total := 0.0
	for m := range ch {
		total += counterValue(m)
	}
	return total
}

// staysActive fails the test if upstream i stops being active within d.
func staysActive(t *testing.T, srv *Server, i int, d time.Duration) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		_, ch := srv.Connected()
		if a := srv.Active(); a != i {
			t.Fatalf("upstream %d active, want %d", a, i)
		}
		select {
		case <-ch:
		case <-deadline.C:
			return
		}
	}
}

// onlyHealth fails the test unless every message node i received on
// connection c was one of muxd's health requests: no client traffic.
func onlyHealth(t *testing.T, i int, c *testnode.Conn) {
	t.Helper()
	for _, r := range c.Reqs() {
		if id := string(r.ID); id != healthChainID && id != healthSubscribe {
			t.Errorf("node %d connection %d got %s: client traffic on a node that is not active", i, c.N, r.Raw)
		}
	}
}

// clients are the scenario's three clients.
type clients struct {
	heads, logs, req *stream
	// waitHead waits until the newHeads subscriber has got block h
	// (and the logs subscriber its logs).
	waitHead func(h uint64)
}

// readBlock11 is the requests client's read that a scenario holds in
// flight at a switch: block 11 with full transactions (muxd's own block
// requests ask without, so a node can hold this one alone).
const readBlock11 = `{"jsonrpc":"2.0","id":"read","method":"eth_getBlockByNumber","params":["0xb",true]}`

// sendTx is its transaction: it may not be sent twice.
const sendTx = `{"jsonrpc":"2.0","id":"tx","method":"eth_sendRawTransaction","params":["0x02f86b"]}`

// txHashOf is the hash node i answers sendTx with.
func txHashOf(i int) string { return fmt.Sprintf(`"0x%064x"`, 0xa0+i) }

// answerTx answers a held sendTx as node i.
func answerTx(t *testing.T, h testnode.Held, i int) {
	t.Helper()
	if h.Req.Method != "eth_sendRawTransaction" {
		t.Fatalf("held %s, want the transaction", h.Req.Raw)
	}
	h.Conn.MustWrite(t, testnode.ResultFrame(h.Req.ID, txHashOf(i)))
}

// wantBlock11 checks that the read got block 11.
func wantBlock11(t *testing.T, f *failNet, r resp) {
	t.Helper()
	if r.Error != nil || compact(r.Result) != compact(f.chain.Block(11).JSON()) {
		t.Errorf("read of block 11: got %s", r.Raw)
	}
}

// TestFailoverScenarios: issue #14's fake-node scenarios. Each starts
// with every node at block 10, the subscribers subscribed there and the
// chain at 12, runs its scenario, then advances the nodes that still
// follow the chain three blocks and checks: the active upstream and the
// path it took, the failovers counted by reason, the chain id mismatches
// counted by upstream, the newHeads subscriber got blocks 11 to the
// active node's head exactly once each, in order (so chained by parent
// hash), as geth pushes them, the logs subscriber every log of the filter
// in those blocks exactly once, in order, neither got anything else, and
// the last head is one the request path can serve.
func TestFailoverScenarios(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		nodes   int
		cfg     func(*Config)
		prepare func(f *failNet)
		first   int   // active once muxd has started: the others are down until it is
		down    []int // nodes left down at the start (run brings them up)
		// run is the scenario; it returns the nodes that follow the
		// chain from then on (the others are left where they are).
		run        func(t *testing.T, f *failNet, c clients) (live []int)
		path       []int // the active upstream, each time it changed
		failovers  map[failover.Reason]float64
		mismatches []float64 // muxd_upstream_chain_mismatch_total by upstream
	}{
		{
			// Node 0 dies with a read and a transaction in flight, node
			// 1 a block ahead of it: the read is sent again to node 1,
			// the transaction gets -32002 (it may have been sent), and
			// node 1 is active.
			name: "dead active",
			run: func(t *testing.T, f *failNet, c clients) []int {
				held := f.holdOn(0, "eth_getBlockByNumber", "eth_sendRawTransaction")
				c.req.send(readBlock11)
				c.req.send(sendTx)
				held.TakeN(t, 2)
				f.advance(1)
				f.kill(0)
				waitActive(t, f.srv, 1)
				wantBlock11(t, f, c.req.answer(`"read"`))
				if !slices.ContainsFunc(f.nodes[1].Received(), func(r testnode.Req) bool {
					return r.Method == "eth_getBlockByNumber" && string(r.Params) == `["0xb",true]`
				}) {
					t.Error("the read was not sent again to node 1")
				}
				tx := c.req.answer(`"tx"`)
				wantError(t, tx, `"tx"`, -32002, "upstream unavailable")
				if tx.reason() != "connection lost" {
					t.Errorf("transaction in flight: got %s, want reason connection lost", tx.Raw)
				}
				if r := c.req.call(`"bn"`, "eth_blockNumber", `[]`); string(r.Result) != `"0xd"` {
					t.Errorf("eth_blockNumber after the failover = %s, want node 1's head 0xd", r.Raw)
				}
				return []int{1}
			},
			path:      []int{0, 1},
			failovers: map[failover.Reason]float64{failover.ReasonLost: 1},
		},
		{
			// Node 1 dies; then node 0's connection drops and it takes
			// the next one: node 0 is active again after the outage,
			// which is no change of the active upstream, so no failover
			// is counted (nor, with one upstream, on any reconnect).
			name: "active back after an outage, standby dead",
			run: func(t *testing.T, f *failNet, c clients) []int {
				f.kill(1)
				eventually(t, "node 1 seen lost", func() bool {
					f.srv.mu.Lock()
					defer f.srv.mu.Unlock()
					return f.srv.set.sel.Status(1, time.Now()).Why == failover.WhyDisconnected
				})
				f.drop(0)
				f.nodes[0].Conn(t, 2)
				waitActive(t, f.srv, 0)
				return []int{0}
			},
			path: []int{0},
		},
		{
			// Three nodes: node 1 stops at block 12 while the others go
			// on, three blocks ahead (lagging). Node 0 dies: node 2 is
			// active, not node 1, which is preferred but behind, and
			// which never carries client traffic.
			name:  "dead active, preferred standby lagging",
			nodes: 3,
			run: func(t *testing.T, f *failNet, c clients) []int {
				for range 3 {
					f.advance(0, 2)
					c.waitHead(f.nodes[0].Head())
				}
				f.waitSelected(2, f.nodes[2].Head())
				// Lagging once it has lasted lagGrace.
				eventually(t, "node 1 lagging", func() bool {
					f.srv.mu.Lock()
					defer f.srv.mu.Unlock()
					return f.srv.set.sel.Status(1, time.Now()).Why == failover.WhyLagging
				})
				f.kill(0)
				waitActive(t, f.srv, 2)
				onlyHealth(t, 1, f.nodes[1].Conn(t, 1))
				return []int{2}
			},
			path:      []int{0, 2},
			failovers: map[failover.Reason]float64{failover.ReasonLost: 1},
		},
		{
			// Three nodes, two switches in a row. Node 0 stops with a
			// transaction in flight: node 1 is active (lagging) and node
			// 0 drains. Node 1 never answers the logs backfill it is
			// asked and stops too: node 2 is active (lagging). The
			// second switch gives up the connection still draining (the
			// transaction gets -32002) and the backfill left on node 1;
			// node 2 fills the subscribers' gaps.
			name:  "lagging twice, a drain and a backfill in flight",
			nodes: 3,
			run: func(t *testing.T, f *failNet, c clients) []int {
				tx := f.holdOn(0, "eth_sendRawTransaction")
				c.req.send(sendTx)
				tx.TakeN(t, 1)
				getLogs := f.holdOn(1, "eth_getLogs")
				f.advance(1, 2, 1, 2, 1) // node 1 alone at the best head
				waitActive(t, f.srv, 1)
				f.advance(2)
				getLogs.TakeN(t, 1)
				if c.req.answered(`"tx"`) || f.nodes[0].Conn(t, 1).Closed() {
					t.Fatal("node 0 did not keep the transaction to drain")
				}
				f.advance(2, 2, 2)
				waitActive(t, f.srv, 2)
				r := c.req.answer(`"tx"`)
				wantError(t, r, `"tx"`, -32002, "upstream unavailable")
				if r.reason() != "connection lost" {
					t.Errorf("transaction left to drain: got %s, want reason connection lost", r.Raw)
				}
				return []int{2}
			},
			path:      []int{0, 1, 2},
			failovers: map[failover.Reason]float64{failover.ReasonLagging: 2},
		},
		{
			// Node 0 stops while node 1 goes three blocks ahead (more
			// than max_head_lag 2): node 1 is active. The read in flight
			// on node 0 is sent again to node 1; the transaction stays
			// with node 0, which answers it, and only then is node 0's
			// connection closed and dialled again.
			name: "lagging active",
			run: func(t *testing.T, f *failNet, c clients) []int {
				held := f.holdOn(0, "eth_getBlockByNumber", "eth_sendRawTransaction")
				c.req.send(readBlock11)
				c.req.send(sendTx)
				hs := held.TakeN(t, 2)
				f.advance(1, 1, 1) // node 0 three behind at the third
				waitActive(t, f.srv, 1)
				wantBlock11(t, f, c.req.answer(`"read"`))
				old := f.nodes[0].Conn(t, 1)
				if c.req.answered(`"tx"`) || old.Closed() {
					t.Fatalf("the transaction was answered (%v) or node 0's connection closed (%v) before node 0 answered it", c.req.answered(`"tx"`), old.Closed())
				}
				for _, h := range hs {
					if h.Req.Method == "eth_sendRawTransaction" {
						answerTx(t, h, 0)
					}
				}
				if r := c.req.answer(`"tx"`); string(r.Result) != txHashOf(0) {
					t.Errorf("transaction: got %s, want node 0's answer %s", r.Raw, txHashOf(0))
				}
				testnode.Await(t, "node 0's drained connection closed", func() (bool, <-chan struct{}) {
					return old.Closed(), old.Done()
				})
				f.waitHealth(0, 2) // dialled again, a standby
				onlyHealth(t, 0, f.nodes[0].Conn(t, 2))
				return []int{1}
			},
			path:      []int{0, 1},
			failovers: map[failover.Reason]float64{failover.ReasonLagging: 1},
		},
		{
			// Node 0 stops pushing heads; node 1 goes on, never more
			// than max_head_lag ahead (set high): after head_timeout node
			// 1 is active, reason stalled. The transaction in flight on
			// node 0 is answered by node 0.
			name: "stalled active",
			cfg: func(c *Config) {
				c.HeadTimeout = 2 * time.Second
				c.MaxHeadLag = 1000
			},
			run: func(t *testing.T, f *failNet, c clients) []int {
				held := f.holdOn(0, "eth_sendRawTransaction")
				c.req.send(sendTx)
				hs := held.TakeN(t, 1)
				start := time.Now()
				// Node 1 keeps producing blocks (so it is not stalled
				// itself) until it is active.
				for f.srv.Active() != 1 {
					f.advance(1)
					_, ch := f.srv.Connected()
					select {
					case <-ch:
					case <-time.After(200 * time.Millisecond):
					}
					if time.Since(start) > testTimeout {
						t.Fatalf("node 1 not active %v after node 0 stalled", testTimeout)
					}
				}
				if d := time.Since(start); d < 2*time.Second {
					t.Errorf("switched %v after node 0's last head, before head_timeout", d)
				}
				answerTx(t, hs[0], 0)
				if r := c.req.answer(`"tx"`); string(r.Result) != txHashOf(0) {
					t.Errorf("transaction: got %s, want node 0's answer %s", r.Raw, txHashOf(0))
				}
				return []int{1}
			},
			path:      []int{0, 1},
			failovers: map[failover.Reason]float64{failover.ReasonStalled: 1},
		},
		{
			// Node 0 stops reading (its handler hangs on the client's
			// read, so nothing more is read on that connection and no
			// ping is answered) but goes on pushing heads, level with
			// node 1: heads alone never make it unhealthy. keepalive
			// finds it deaf and drops the connection: node 1 is active,
			// reason lost, and the read is sent again to node 1.
			name: "deaf active",
			cfg: func(c *Config) {
				c.PingInterval = 300 * time.Millisecond
				c.PingTimeout = 300 * time.Millisecond
			},
			run: func(t *testing.T, f *failNet, c clients) []int {
				n := f.nodes[0]
				hung := make(chan struct{})
				var once sync.Once
				n.SetHandler(func(fc *testnode.Conn, r testnode.Req) {
					if r.Method == "eth_getBlockByNumber" && !strings.HasSuffix(string(r.Params), "false]") {
						once.Do(func() { close(hung) })
						<-n.Done() // until the test ends
						return
					}
					n.Handle(fc, r)
				})
				c.req.send(readBlock11)
				select {
				case <-hung:
				case <-time.After(testTimeout):
					t.Fatal("node 0 never got the read")
				}
				levelUntilActive(t, f, 1, "node 0 stopped reading")
				wantBlock11(t, f, c.req.answer(`"read"`))
				return []int{1}
			},
			path:      []int{0, 1},
			failovers: map[failover.Reason]float64{failover.ReasonLost: 1},
		},
		{
			// Node 0's request handling hangs while its connection's
			// reader goes on, as geth's does (its WebSocket layer answers
			// pings there), and it goes on pushing heads, level with node
			// 1. Pongs are no proof of hearing: keepalive's own request
			// goes unanswered, and once node 0 has answered nothing for
			// request_timeout + ping_interval it is found deaf and
			// dropped: node 1 is active, reason lost, and answers the
			// next read.
			name: "answers pings, no request",
			cfg: func(c *Config) {
				c.PingInterval = 300 * time.Millisecond
				c.PingTimeout = 300 * time.Millisecond
				c.RequestTimeout = time.Second
			},
			run: func(t *testing.T, f *failNet, c clients) []int {
				n := f.nodes[0]
				n.SetHandler(func(*testnode.Conn, testnode.Req) {}) // never answered; the reader goes on
				start := time.Now()
				levelUntilActive(t, f, 1, "node 0 stopped answering")
				if d := time.Since(start); d < time.Second {
					t.Errorf("node 0 dropped %v after it stopped answering, before request_timeout", d)
				}
				c.req.send(readBlock11)
				wantBlock11(t, f, c.req.answer(`"read"`))
				return []int{1}
			},
			path:      []int{0, 1},
			failovers: map[failover.Reason]float64{failover.ReasonLost: 1},
		},
		{
			// Node 0 is on another chain id. It is down when muxd
			// starts, so node 1 sets the chain; once up, node 0 is never
			// active, though preferred, connected, ahead and failback
			// due, and carries no client traffic.
			name:    "node on another chain id",
			cfg:     func(c *Config) { c.FailbackAfter = 300 * time.Millisecond },
			prepare: func(f *failNet) { f.nodes[0].SetChainID("0x2") },
			first:   1,
			down:    []int{0},
			run: func(t *testing.T, f *failNet, c clients) []int {
				f.nodes[0].Refuse(false)
				conn := f.waitHealth(0, 1)
				eventually(t, "node 0's chain id mismatch counted", func() bool {
					return counterValue(f.srv.metrics.ChainMismatches.WithLabelValues("1")) == 1
				})
				for range 3 {
					f.advance(0, 0, 1) // node 0 ahead
					staysActive(t, f.srv, 1, 700*time.Millisecond)
				}
				onlyHealth(t, 0, conn)
				return []int{0, 1}
			},
			path:       []int{1},
			mismatches: []float64{1, 0},
		},
		{
			// Node 0, preferred, keeps dropping: up for less than
			// failback_after each time, it never gets the traffic back
			// (not one client request, not one client subscription).
			// Once it stays up, with its head level with node 1's, it is
			// active again failback_after later.
			name: "flapping preferred node",
			cfg:  func(c *Config) { c.FailbackAfter = 1500 * time.Millisecond },
			run: func(t *testing.T, f *failNet, c clients) []int {
				f.drop(0)
				waitActive(t, f.srv, 1)
				for k := 2; k <= 4; k++ {
					conn := f.waitHealth(0, k)
					f.advance(0, 1)
					staysActive(t, f.srv, 1, 500*time.Millisecond)
					conn.Drop()
					onlyHealth(t, 0, conn)
				}
				f.waitHealth(0, 5)
				up := time.Now()
				f.advance(0, 1)
				waitActive(t, f.srv, 0)
				if d := time.Since(up); d < 1500*time.Millisecond {
					t.Errorf("failback %v after node 0 came up, before failback_after", d)
				}
				return []int{0, 1}
			},
			path:      []int{0, 1, 0},
			failovers: map[failover.Reason]float64{failover.ReasonLost: 1, failover.ReasonFailback: 1},
		},
		{
			// Node 0 dies, node 1 carries on two blocks; node 0 comes
			// back one block behind, healthy: no failback while it is
			// behind, though healthy longer than failback_after. Once
			// level with node 1, it is active again. A
			// transaction in flight on node 1 then is answered by node 1,
			// whose connection is then closed and dialled again.
			name: "failback",
			cfg:  func(c *Config) { c.FailbackAfter = time.Second },
			run: func(t *testing.T, f *failNet, c clients) []int {
				f.kill(0)
				waitActive(t, f.srv, 1)
				f.advance(1, 1)
				held := f.holdOn(1, "eth_sendRawTransaction")
				c.req.send(sendTx)
				hs := held.TakeN(t, 1)
				// Node 0 comes back one block behind and stays so: healthy,
				// but a block the subscribers saw may not be on it yet, so
				// no failback, however long it is healthy.
				f.nodes[0].SetHead(f.nodes[1].Head() - 1)
				f.nodes[0].Refuse(false)
				f.waitHealth(0, 2)
				up := time.Now()
				for range 5 {
					f.advance(1)
					f.waitSelected(1, f.nodes[1].Head()) // seen before node 0 catches up to it
					f.advance(0)
					staysActive(t, f.srv, 1, 500*time.Millisecond)
				}
				f.advance(0) // level with node 1
				waitActive(t, f.srv, 0)
				if d := time.Since(up); d < time.Second {
					t.Errorf("failback %v after node 0 came up, before failback_after", d)
				}
				old := f.nodes[1].Conn(t, 1)
				if c.req.answered(`"tx"`) || old.Closed() {
					t.Fatalf("the transaction was answered or node 1's connection closed before node 1 answered it")
				}
				answerTx(t, hs[0], 1)
				if r := c.req.answer(`"tx"`); string(r.Result) != txHashOf(1) {
					t.Errorf("transaction: got %s, want node 1's answer %s", r.Raw, txHashOf(1))
				}
				testnode.Await(t, "node 1's drained connection closed", func() (bool, <-chan struct{}) {
					return old.Closed(), old.Done()
				})
				f.waitHealth(1, 2)
				return []int{0, 1}
			},
			path:      []int{0, 1, 0},
			failovers: map[failover.Reason]float64{failover.ReasonLost: 1, failover.ReasonFailback: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := max(tt.nodes, 2)
			f := newFailNet(t, n, tt.cfg, tt.prepare)
			all := make([]int, n)
			for i := range all {
				all[i] = i
			}
			// The first active is the first node up: the others wait
			// until it is, then join as standbys (down: later, in run).
			for i := range n {
				if i != tt.first {
					f.nodes[i].Refuse(true)
				}
			}
			f.start()
			waitActive(t, f.srv, tt.first)
			for i := range n {
				if i != tt.first && !slices.Contains(tt.down, i) {
					f.nodes[i].Refuse(false)
					f.waitHealth(i, 1)
				}
			}
			c := clients{heads: f.dial(t), logs: f.dial(t), req: f.dial(t)}
			headsSub := c.heads.subscribe(`["newHeads"]`)
			logsSub := c.logs.subscribe(`["logs",` + logsFilter + `]`)
			f.waitClientSubs(tt.first)
			// Where the logs subscription starts: block 10.
			f.nodes[tt.first].WaitAnswered(t, "eth_blockNumber", 1)

			heads := func(fs []resp) []string { r, _ := pushed(fs, headsSub); return r }
			logs := func(fs []resp) []string { r, _ := pushed(fs, logsSub); return r }
			waitHead := func(h uint64) {
				t.Helper()
				c.heads.await(fmt.Sprintf("head %d", h), func(fs []resp) bool {
					r := heads(fs)
					return len(r) > 0 && strings.Contains(r[len(r)-1], fmt.Sprintf(`"number":"0x%x"`, h))
				}, func(fs []resp) string { return headSummary(heads(fs)) })
				c.logs.await(fmt.Sprintf("the logs of block %d", h), func(fs []resp) bool {
					r := logs(fs)
					return len(r) > 0 && strings.Contains(r[len(r)-1], fmt.Sprintf(`"blockNumber":"0x%x"`, h))
				}, func(fs []resp) string { return logSummary(logs(fs)) })
			}

			// The chain moves a block at a time: muxd has seen a block
			// come from the active node before the next is made, as at
			// any real block time. (Blocks made faster than muxd reads
			// the active's connection would make the active look behind
			// the standbys that muxd happens to read first.)
			c.waitHead = waitHead
			path := watchActive(t, f.srv)
			for h := uint64(startHead + 1); h <= startHead+2; h++ {
				f.advance(all...)
				waitHead(h)
			}

			live := tt.run(t, f, c)

			active := tt.path[len(tt.path)-1]
			f.waitClientSubs(active)
			for range 3 {
				f.advance(live...)
				waitHead(f.nodes[active].Head())
			}
			last := f.nodes[active].Head()
			c.heads.barrier()
			c.logs.barrier()

			if got := f.srv.Active(); got != active {
				t.Errorf("active upstream %d, want %d", got, active)
			}
			if got := path.get(); !slices.Equal(got, tt.path) {
				t.Errorf("active upstream went %v, want %v", got, tt.path)
			}
			for _, r := range failover.Reasons()[1:] {
				if got, want := f.failoverCount(r), tt.failovers[r]; got != want {
					t.Errorf("failovers{reason=%s} = %v, want %v", r, got, want)
				}
			}
			for i := range n {
				want := 0.0
				if i < len(tt.mismatches) {
					want = tt.mismatches[i]
				}
				if got := counterValue(f.srv.metrics.ChainMismatches.WithLabelValues(fmt.Sprint(i + 1))); got != want {
					t.Errorf("chain mismatches of upstream %d = %v, want %v", i, got, want)
				}
			}

			if n := seriesTotal(f.srv.metrics.BackfillGaps); n != 0 {
				t.Errorf("muxd counted %v subscription gaps it could not close", n)
			}
			c.heads.mu.Lock()
			hs, hOther := pushed(c.heads.frames, headsSub)
			c.heads.mu.Unlock()
			c.logs.mu.Lock()
			ls, lOther := pushed(c.logs.frames, logsSub)
			c.logs.mu.Unlock()
			checkSeq(t, "newHeads subscriber", hs, wantHeads(f.chain, startHead+1, last), headSummary)
			checkSeq(t, "logs subscriber", ls, wantLogs(f.chain, startHead+1, last), logSummary)
			if hOther+lOther > 0 {
				t.Errorf("the subscribers got %d and %d frames that were neither their pushes nor answers", hOther, lOther)
			}
			// A head a subscriber has seen is one the request path can
			// serve.
			r := c.req.call(`"last"`, "eth_getBlockByNumber", fmt.Sprintf(`["0x%x",false]`, last))
			if compact(r.Result) != compact(f.chain.Block(last).JSON()) {
				t.Errorf("block %d, the last head: got %s", last, r.Raw)
			}
		})
	}
}

// TestFailbackBehindDeliveredHead: failback must not move clients to a
// node that lacks a block they have seen in newHeads (failover's rule 4:
// "p's head >= the active's, so a block a client saw in newHeads can be
// read on p"). Node 1, active, pushes block 12 to the client's newHeads
// subscription before its push to muxd's health subscription (geth pushes
// each subscription on its own, in no set order); node 0, preferred and
// healthy for longer than failback_after, is at block 11 — level with the
// head muxd's health subscription last told of node 1, behind the one the
// client has. muxd must stay on node 1 until node 0 has block 12.
func TestFailbackBehindDeliveredHead(t *testing.T) {
	t.Parallel()
	const failback = 300 * time.Millisecond
	f := newFailNet(t, 2, func(c *Config) { c.FailbackAfter = failback }, nil)
	n0, n1 := f.nodes[0], f.nodes[1]
	var mu sync.Mutex
	healthSub := "" // node 1's id of muxd's health subscription
	n1.SetHandler(func(fc *testnode.Conn, r testnode.Req) {
		if r.Method == "eth_subscribe" && string(r.ID) == healthSubscribe {
			id := fc.Subscribe(r)
			mu.Lock()
			healthSub = id
			mu.Unlock()
			return
		}
		n1.Handle(fc, r)
	})
	n0.Refuse(true)
	f.start()
	waitActive(t, f.srv, 1)

	heads := f.dial(t)
	req := f.dial(t)
	sub := heads.subscribe(`["newHeads"]`)
	conn := n1.Conn(t, 1)
	var clientSub string
	for id := range conn.WaitLiveSubs(t, 2) {
		mu.Lock()
		if id != healthSub {
			clientSub = id
		}
		mu.Unlock()
	}
	gotHead := func(h uint64) {
		t.Helper()
		want := compact(f.chain.Block(h).HeaderJSON())
		heads.await(fmt.Sprintf("head %d", h), func(fs []resp) bool {
			r, _ := pushed(fs, sub)
			return slices.Contains(r, want)
		}, func(fs []resp) string { r, _ := pushed(fs, sub); return headSummary(r) })
	}
	n1.Advance() // 11, to both subscriptions
	f.waitSelected(1, 11)
	gotHead(11)

	// Node 0 comes up at block 10, healthy; without a head of its own
	// it is not failed back to.
	n0.Refuse(false)
	f.waitHealth(0, 1)
	staysActive(t, f.srv, 1, 2*failback)

	// Block 12 reaches the client from node 1; node 1's push of it to
	// muxd's health subscription is still to come.
	n1.SetHead(12)
	if err := conn.Push(clientSub, string(f.chain.Block(12).HeaderJSON())); err != nil {
		t.Fatal(err)
	}
	gotHead(12)
	n0.Advance() // node 0 at 11
	f.waitSelected(0, 11)

	// Give failback a health tick to happen, then read what the client
	// saw.
	deadline := time.After(healthTick + 500*time.Millisecond)
	for {
		_, ch := f.srv.Connected()
		if a := f.srv.Active(); a != 1 {
			r := req.call(`"b12"`, "eth_getBlockByNumber", `["0xc",false]`)
			t.Fatalf("failback to node %d at block %d while the newHeads subscriber has block 12 from node 1: "+
				"eth_getBlockByNumber(12) now answers %s (the selector compared node 0's head with the head of node 1's "+
				"health subscription, 11, not with the head delivered to clients, 12)", a, n0.Head(), r.Raw)
		}
		select {
		case <-ch:
			continue
		case <-deadline:
		}
		break
	}

	// Node 1's health push of 12 comes; node 0 gets 12 too: failback,
	// and block 12 is served.
	mu.Lock()
	hs := healthSub
	mu.Unlock()
	if err := conn.Push(hs, string(f.chain.Block(12).HeaderJSON())); err != nil {
		t.Fatal(err)
	}
	n0.Advance()
	waitActive(t, f.srv, 0)
	if r := req.call(`"b12"`, "eth_getBlockByNumber", `["0xc",false]`); compact(r.Result) != compact(f.chain.Block(12).JSON()) {
		t.Errorf("block 12 after failback: %s", r.Raw)
	}
}

// waitActive waits until upstream i is the active one.
func waitActive(t *testing.T, srv *Server, i int) {
	t.Helper()
	testnode.Await(t, fmt.Sprintf("upstream %d active", i), func() (bool, <-chan struct{}) {
		_, ch := srv.Connected()
		return srv.Active() == i, ch
	})
}

// levelUntilActive has nodes 0 and 1 mine level (neither lags nor stalls)
// until node want is active, failing after testTimeout; what says what
// happened to the other.
func levelUntilActive(t *testing.T, f *failNet, want int, what string) {
	t.Helper()
	start := time.Now()
	for f.srv.Active() != want {
		f.advance(0, 1)
		_, ch := f.srv.Connected()
		select {
		case <-ch:
		case <-time.After(100 * time.Millisecond):
		}
		if time.Since(start) > testTimeout {
			t.Fatalf("node %d not active %v after %s", want, testTimeout, what)
		}
	}
}
