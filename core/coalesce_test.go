package core

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/muxd/muxd/router"
)

// coalRig drives a Core through its events for the coalescing and cache
// tests, and turns its effects into bytes: each delivery as the client
// gets it (spliced), each upstream frame as written.
type coalRig struct {
	t      *testing.T
	c      *Core
	e      Effects
	now    time.Time
	gen    uint64
	counts *coalCounts
	subIDs int
}

// coalCounts is an Observer that counts what the coalescing and cache
// tests check.
type coalCounts struct {
	nopObserver
	coalesced, hits, misses, evicted int
	bytes                            int
	lastEvicted                      string // the method of the last entry evicted
}

func (o *coalCounts) Coalesced(string) { o.coalesced++ }
func (o *coalCounts) CacheHit(string)  { o.hits++ }
func (o *coalCounts) CacheMiss(string) { o.misses++ }
func (o *coalCounts) CacheEvicted(method string) {
	o.evicted++
	o.lastEvicted = method
}
func (o *coalCounts) CacheBytes(n int) { o.bytes = n }

const coalTimeout = 10 * time.Second

func newCoalRig(t *testing.T, tweak func(*Config)) *coalRig {
	t.Helper()
	r := &coalRig{t: t, now: time.Unix(1_700_000_000, 0), counts: &coalCounts{}}
	cfg := Config{
		RequestTimeout: coalTimeout, UpstreamWait: coalTimeout, UpstreamMaxBatch: 100,
		MaxBatch: 100, MaxInFlight: 100, MaxHeldBytes: 1 << 20, MaxSubscriptions: 10,
		MaxClients: 1000, MaxWaiting: 1000, HeldPushBytes: 1 << 20,
		RetryMethods:    DefaultRetryMethods,
		CoalesceMethods: DefaultCoalesceMethods,
		CacheBytes:      1 << 20,
		NewSubscriptionID: func() string {
			r.subIDs++
			return fmt.Sprintf(`"0x%x"`, r.subIDs)
		},
		Observer: r.counts,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.c = c
	return r
}

// out is what one event did: deliveries by client, spliced, and upstream
// frames.
type out struct {
	to map[router.ClientID][]string
	up []string
}

func (r *coalRig) collect() out {
	o := out{to: map[router.ClientID][]string{}}
	for _, d := range r.e.Deliveries {
		msg := string(d.Msg)
		if d.ID != nil {
			msg = string(router.AppendSpliced(nil, d.Msg, d.At, d.ID))
		}
		o.to[d.Client] = append(o.to[d.Client], msg)
	}
	for _, f := range r.e.Upstream {
		o.up = append(o.up, string(f))
	}
	return o
}

func (r *coalRig) join() router.ClientID {
	id, err := r.c.Join(false)
	if err != nil {
		r.t.Fatal(err)
	}
	return id
}

func (r *coalRig) connect() out {
	r.gen++
	r.c.UpstreamConnected(&r.e, r.gen, r.now)
	return r.collect()
}

func (r *coalRig) lose() out {
	r.c.UpstreamLost(&r.e, r.gen, r.now)
	return r.collect()
}

func (r *coalRig) send(id router.ClientID, frame string) out {
	f, err := router.ScanClient([]byte(frame), nil)
	r.c.ClientFrame(&r.e, id, []byte(frame), f, err, r.now)
	return r.collect()
}

func (r *coalRig) upstream(frame string) out {
	f, err := router.ScanUpstream([]byte(frame), nil)
	r.c.UpstreamFrame(&r.e, r.gen, []byte(frame), f, err, r.now)
	return r.collect()
}

func (r *coalRig) tick(d time.Duration) out {
	r.now = r.now.Add(d)
	r.c.Tick(&r.e, r.now)
	return r.collect()
}

func (r *coalRig) gone(id router.ClientID) out {
	r.c.ClientGone(&r.e, id, r.now)
	return r.collect()
}

// upID returns the id of an upstream request frame.
func upID(t *testing.T, frame string) string {
	t.Helper()
	var m struct{ ID json.RawMessage }
	if err := json.Unmarshal([]byte(frame), &m); err != nil {
		t.Fatalf("upstream frame %s: %v", frame, err)
	}
	return string(m.ID)
}

// reply is the node's answer to upstream frame f, laid out as geth does,
// result as given.
func reply(t *testing.T, f, result string) string {
	return `{"jsonrpc":"2.0","id":` + upID(t, f) + `,"result":` + result + `}`
}

// withID is the node's answer as the client must get it: its id in place.
func withID(answer, upstreamID, clientID string) string {
	return strings.Replace(answer, `"id":`+upstreamID, `"id":`+clientID, 1)
}

func request(id, method, params string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"` + method + `","params":` + params + `}`
}

// TestCoalesceIdentical: identical requests from many clients in flight
// together cost one upstream frame, and each client gets the node's answer
// byte for byte with its own id, whatever the id's form and however the
// params were spelled.
func TestCoalesceIdentical(t *testing.T) {
	r := newCoalRig(t, nil)
	r.connect()
	frames := []string{
		request(`1`, "eth_call", `[{"to":"0xab","data":"0x01"},"latest"]`),
		request(`"a-string"`, "eth_call", `[ {"data":"0x01", "to":"0xab"}, "latest" ]`),
		`{"params":[{"to":"0xab","data":"0x01"},"latest"],"id":"x\"y","method":"eth_call","jsonrpc":"2.0"}`,
		request(`1e3`, "eth_call", `[{"to":"0xab","data":"0x01"},"latest"]`),
	}
	ids := []string{`1`, `"a-string"`, `"x\"y"`, `1e3`}
	var clients []router.ClientID
	var up []string
	for _, f := range frames {
		id := r.join()
		clients = append(clients, id)
		o := r.send(id, f)
		up = append(up, o.up...)
		if len(o.to) != 0 {
			t.Fatalf("a client was answered before the node: %v", o.to)
		}
	}
	if len(up) != 1 {
		t.Fatalf("%d upstream frames for %d identical requests, want 1: %q", len(up), len(frames), up)
	}
	if got := r.c.Stats().Joined; got != len(frames)-1 {
		t.Errorf("Stats.Joined = %d, want %d", got, len(frames)-1)
	}
	answer := reply(t, up[0], `"0x00000000000000000000000000000000000000000000000000000000000000ff"`)
	o := r.upstream(answer)
	for i, id := range clients {
		want := withID(answer, upID(t, up[0]), ids[i])
		if got := o.to[id]; len(got) != 1 || got[0] != want {
			t.Errorf("client %d got %q, want %q", i, got, want)
		}
	}
	if r.counts.coalesced != len(frames)-1 {
		t.Errorf("coalesced counted %d, want %d", r.counts.coalesced, len(frames)-1)
	}
	if s := r.c.Stats(); s.InFlight != 0 || s.Pending != 0 || s.HeldBytes != 0 {
		t.Errorf("after the answer: %+v", s)
	}
	// Answered, the call is over: the same request goes upstream again.
	if o := r.send(clients[0], frames[0]); len(o.up) != 1 {
		t.Errorf("a request after the answer sent %d frames, want 1", len(o.up))
	}
}

// TestCoalesceNever: requests that differ, methods off the list, batch
// elements, and everything with coalescing off go upstream each.
func TestCoalesceNever(t *testing.T) {
	for _, tc := range []struct {
		name   string
		a, b   string
		tweak  func(*Config)
		frames int
	}{
		{"different params", request(`1`, "eth_getBalance", `["0xab","latest"]`), request(`2`, "eth_getBalance", `["0xac","latest"]`), nil, 2},
		{"hex case differs", request(`1`, "eth_getBalance", `["0xab","latest"]`), request(`2`, "eth_getBalance", `["0xAB","latest"]`), nil, 2},
		{"different method", request(`1`, "eth_getBalance", `["0xab","latest"]`), request(`2`, "eth_getCode", `["0xab","latest"]`), nil, 2},
		{"not on the list", request(`1`, "eth_sendRawTransaction", `["0x01"]`), request(`2`, "eth_sendRawTransaction", `["0x01"]`), nil, 2},
		{"filter", request(`1`, "eth_getFilterChanges", `["0x1"]`), request(`2`, "eth_getFilterChanges", `["0x1"]`), nil, 2},
		{"unknown method", request(`1`, "x_read", `[]`), request(`2`, "x_read", `[]`), nil, 2},
		{"batch element", `[` + request(`1`, "eth_blockNumber", `[]`) + `]`, `[` + request(`2`, "eth_blockNumber", `[]`) + `]`, nil, 2},
		{"single then batch", request(`1`, "eth_blockNumber", `[]`), `[` + request(`2`, "eth_blockNumber", `[]`) + `]`, nil, 2},
		{"coalescing off", request(`1`, "eth_blockNumber", `[]`), request(`2`, "eth_blockNumber", `[]`), func(c *Config) { c.CoalesceMethods = nil }, 2},
		{"list of one", request(`1`, "eth_blockNumber", `[]`), request(`2`, "eth_blockNumber", `[]`), func(c *Config) { c.CoalesceMethods = []string{"eth_blockNumber"} }, 1},
		{"control", request(`1`, "eth_blockNumber", `[]`), request(`2`, "eth_blockNumber", `[]`), nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newCoalRig(t, tc.tweak)
			r.connect()
			n := len(r.send(r.join(), tc.a).up) + len(r.send(r.join(), tc.b).up)
			if n != tc.frames {
				t.Errorf("%d upstream frames, want %d", n, tc.frames)
			}
		})
	}
}

// TestCoalesceWaiterLeaves: each waiter keeps its own deadline, and one
// that times out or whose client leaves, the lead included, leaves the
// others served by the one call.
func TestCoalesceWaiterLeaves(t *testing.T) {
	for _, tc := range []struct {
		name string
		// leave makes waiter i (0 is the lead) stop waiting.
		leave func(r *coalRig, clients []router.ClientID) out
		left  int // the waiter that stopped
		timed bool
	}{
		{"lead times out", func(r *coalRig, _ []router.ClientID) out { return r.tick(coalTimeout / 2) }, 0, true},
		{"lead's client leaves", func(r *coalRig, cs []router.ClientID) out { return r.gone(cs[0]) }, 0, false},
		{"waiter's client leaves", func(r *coalRig, cs []router.ClientID) out { return r.gone(cs[1]) }, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newCoalRig(t, nil)
			r.connect()
			var clients []router.ClientID
			var up []string
			for i := range 3 {
				if i == 1 {
					// The lead's deadline comes half a timeout before
					// the others'.
					r.now = r.now.Add(coalTimeout / 2)
				}
				id := r.join()
				clients = append(clients, id)
				up = append(up, r.send(id, request(fmt.Sprint(i+10), "eth_blockNumber", `[]`)).up...)
			}
			if len(up) != 1 {
				t.Fatalf("%d upstream frames, want 1", len(up))
			}
			o := tc.leave(r, clients)
			if tc.timed {
				got := o.to[clients[tc.left]]
				if len(got) != 1 || !strings.Contains(got[0], `"code":-32002`) || !strings.Contains(got[0], `"id":10`) {
					t.Fatalf("timed-out lead got %q", got)
				}
				if len(o.to) != 1 {
					t.Fatalf("a timeout answered others too: %v", o.to)
				}
			}
			// Both remaining waiters wait on a frame sent for another
			// when the lead has gone.
			wantJoined := 1
			if tc.left == 0 {
				wantJoined = 2
			}
			if s := r.c.Stats(); s.InFlight != 2 || s.Joined != wantJoined {
				t.Fatalf("after one waiter left: in flight %d, joined %d; want 2, %d", s.InFlight, s.Joined, wantJoined)
			}
			answer := reply(t, up[0], `"0x10"`)
			o = r.upstream(answer)
			for i, id := range clients {
				got := o.to[id]
				if i == tc.left {
					if len(got) != 0 {
						t.Errorf("the waiter that left got %q", got)
					}
					continue
				}
				if want := withID(answer, upID(t, up[0]), fmt.Sprint(i+10)); len(got) != 1 || got[0] != want {
					t.Errorf("waiter %d got %q, want %q", i, got, want)
				}
			}
			if s := r.c.Stats(); s.InFlight != 0 || s.Pending != 0 || s.Joined != 0 {
				t.Errorf("after the answer: %+v", s)
			}
		})
	}
}

// TestCoalesceAllLeave: a call whose waiters have all gone is over: its
// late answer is dropped, and the same request goes upstream anew.
func TestCoalesceAllLeave(t *testing.T) {
	r := newCoalRig(t, nil)
	r.connect()
	a, b := r.join(), r.join()
	up := r.send(a, request(`1`, "eth_gasPrice", `[]`)).up
	r.send(b, request(`2`, "eth_gasPrice", `[]`))
	r.gone(a)
	r.gone(b)
	c := r.join()
	if again := r.send(c, request(`3`, "eth_gasPrice", `[]`)).up; len(again) != 1 {
		t.Fatalf("the request after everyone left sent %d frames, want 1", len(again))
	}
	if o := r.upstream(reply(t, up[0], `"0x1"`)); len(o.to) != 0 {
		t.Errorf("the late answer reached %v", o.to)
	}
}

// TestCoalesceLimits: every waiter counts against its client's limits.
func TestCoalesceLimits(t *testing.T) {
	r := newCoalRig(t, func(c *Config) { c.MaxInFlight = 1 })
	r.connect()
	a := r.join()
	r.send(r.join(), request(`1`, "eth_chainId", `[]`))
	if o := r.send(a, request(`2`, "eth_chainId", `[]`)); len(o.to[a]) != 0 {
		t.Fatalf("a first request was refused: %q", o.to[a])
	}
	o := r.send(a, request(`3`, "eth_chainId", `[]`))
	if got := o.to[a]; len(got) != 1 || !strings.Contains(got[0], `-32005`) {
		t.Errorf("a second request past max in flight got %q, want -32005", got)
	}
}

// TestCoalesceLoss: on upstream loss the waiters of a call are retried
// together (one frame on the next connection) or failed together, as their
// method says; never coalesced across connections.
func TestCoalesceLoss(t *testing.T) {
	for _, tc := range []struct {
		name, method string
		retried      bool
	}{
		{"retry list", "eth_blockNumber", true},
		{"not on the retry list", "eth_getBlockReceipts", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newCoalRig(t, func(c *Config) {
				if !tc.retried { // every default coalesced method is on the default retry list
					c.RetryMethods = slices.DeleteFunc(slices.Clone(c.RetryMethods), func(m string) bool { return m == tc.method })
				}
			})
			r.connect()
			var clients []router.ClientID
			var up []string
			for i := range 3 {
				id := r.join()
				clients = append(clients, id)
				up = append(up, r.send(id, request(fmt.Sprint(i), tc.method, `["0x1"]`)).up...)
			}
			if len(up) != 1 {
				t.Fatalf("%d frames, want 1", len(up))
			}
			o := r.lose()
			if !tc.retried {
				for i, id := range clients {
					if got := o.to[id]; len(got) != 1 || !strings.Contains(got[0], "connection lost") || !strings.Contains(got[0], fmt.Sprintf(`"id":%d`, i)) {
						t.Errorf("waiter %d got %q, want connection lost", i, got)
					}
				}
				return
			}
			if len(o.to) != 0 {
				t.Fatalf("retried requests were answered: %v", o.to)
			}
			// A request on the old connection's call cannot be
			// joined once it is lost: the late arrival waits too.
			late := r.join()
			clients = append(clients, late)
			r.send(late, request(`3`, tc.method, `["0x1"]`))
			o = r.connect()
			if len(o.up) != 1 {
				t.Fatalf("%d frames on the next connection, want 1: %q", len(o.up), o.up)
			}
			answer := reply(t, o.up[0], `"0x5"`)
			o = r.upstream(answer)
			for i, id := range clients {
				if want := withID(answer, upID(t, answer), fmt.Sprint(i)); len(o.to[id]) != 1 || o.to[id][0] != want {
					t.Errorf("waiter %d got %q, want %q", i, o.to[id], want)
				}
			}
			// An answer on the lost connection reaches no one.
			if o := r.upstream(reply(t, up[0], `"0x4"`)); len(o.to) != 0 {
				t.Errorf("an answer for the old call reached %v", o.to)
			}
		})
	}
}

// TestCoalesceAfterStateChange: a read does not join an identical one sent
// before muxd answered a transaction (or a test node's state change): the
// client that got that answer (or heard of it from the one that did) may
// read only state that includes it, as it would from the node directly.
// A transaction not yet answered, refused by the node, or a read answered
// meanwhile changes nothing.
func TestCoalesceAfterStateChange(t *testing.T) {
	read := func(id string) string {
		return request(id, "eth_getTransactionCount", `["0xab","pending"]`)
	}
	tx := request(`"tx"`, "eth_sendRawTransaction", `["0x02f8"]`)
	for _, tc := range []struct {
		name string
		// between runs after the first read was sent, and answers what
		// it sent with the node's reply (nil: leave it in flight).
		between  string
		answer   func(t *testing.T, up string) string
		tick     time.Duration // muxd's deadline passes for what is in flight
		frames   int           // upstream frames of the second, identical read
		joinedTo bool          // the second read got the first call's answer
	}{
		{"transaction answered", tx, func(t *testing.T, up string) string { return reply(t, up, `"0x1234"`) }, 0, 1, false},
		{"transaction in a batch answered", `[` + tx + `,` + request(`"bn"`, "eth_blockNumber", `[]`) + `]`,
			func(t *testing.T, up string) string {
				var elems []json.RawMessage
				if err := json.Unmarshal([]byte(up), &elems); err != nil {
					t.Fatal(err)
				}
				return `[` + reply(t, string(elems[0]), `"0x1234"`) + `,` + reply(t, string(elems[1]), `"0x5"`) + `]`
			}, 0, 1, false},
		{"test node mined", request(`"m"`, "evm_mine", `[]`), func(t *testing.T, up string) string { return reply(t, up, `"0x0"`) }, 0, 1, false},
		{"transaction timed out", tx, nil, coalTimeout, 1, false},
		{"transaction refused by the node", tx, func(t *testing.T, up string) string {
			return `{"jsonrpc":"2.0","id":` + upID(t, up) + `,"error":{"code":-32000,"message":"nonce too low"}}`
		}, 0, 0, true},
		{"transaction not answered yet", tx, nil, 0, 0, true},
		{"a read answered", request(`"b"`, "eth_getBalance", `["0xab","latest"]`), func(t *testing.T, up string) string { return reply(t, up, `"0x1"`) }, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newCoalRig(t, func(c *Config) { c.RequestTimeout = 2 * coalTimeout })
			r.connect()
			a, b := r.join(), r.join()
			first := r.send(a, read(`1`))
			if len(first.up) != 1 {
				t.Fatalf("first read: %d upstream frames", len(first.up))
			}
			if tc.tick != 0 {
				// The read's own deadline is later than the transaction's.
				r.c.cfg.RequestTimeout = coalTimeout
			}
			o := r.send(b, tc.between)
			if len(o.up) != 1 {
				t.Fatalf("%s: %d upstream frames", tc.between, len(o.up))
			}
			switch {
			case tc.answer != nil:
				if got := r.upstream(tc.answer(t, o.up[0])).to[b]; len(got) != 1 {
					t.Fatalf("client b got %q, want the answer", got)
				}
			case tc.tick != 0:
				if got := r.tick(tc.tick).to[b]; len(got) != 1 || !strings.Contains(got[0], "-32002") {
					t.Fatalf("client b got %q, want -32002", got)
				}
			}
			second := r.send(b, read(`2`))
			if len(second.up) != tc.frames {
				t.Fatalf("second read: %d upstream frames, want %d", len(second.up), tc.frames)
			}
			answer := reply(t, first.up[0], `"0x7"`)
			o = r.upstream(answer)
			if got := len(o.to[b]) == 1; got != tc.joinedTo {
				t.Errorf("second read answered with the first's call: %v, want %v", got, tc.joinedTo)
			}
		})
	}
}

// TestCoalesceAfterBlockNumber: with no newHeads subscription, a client
// that polls learns of a block from an answer that names one: the number
// eth_blockNumber answers, a block's own, the block of a transaction or
// receipt, the last block of eth_getLogs. A read after an answer naming a
// block above any seen does not join a call sent before it; one after an
// answer naming no new block (the same, a lower one, a pending block,
// null) does.
func TestCoalesceAfterBlockNumber(t *testing.T) {
	const (
		h16 = `"0x10"`
		h15 = `"0xf"`
	)
	block := func(n string) string {
		return `{"baseFeePerGas":"0x7","hash":"0xaa","logsBloom":"0x00","number":` + n + `,"transactions":[{"blockNumber":"0x1","hash":"0xbb"}]}`
	}
	receipt := func(n string) string {
		return `{"blockHash":"0xaa","blockNumber":` + n + `,"logs":[{"blockNumber":` + n + `}],"status":"0x1"}`
	}
	logs := func(ns ...string) string {
		var parts []string
		for _, n := range ns {
			parts = append(parts, `{"address":"0xab","blockNumber":`+n+`,"logIndex":"0x0"}`)
		}
		return `[` + strings.Join(parts, ",") + `]`
	}
	for _, tc := range []struct {
		name, method, params, answer string
		joins                        bool // the read after it joins the call before it
	}{
		{"block number", "eth_blockNumber", `[]`, h16, false},
		{"block by number", "eth_getBlockByNumber", `["0x10",true]`, block(h16), false},
		{"block by hash", "eth_getBlockByHash", `["0xaa",false]`, block(h16), false},
		{"receipt", "eth_getTransactionReceipt", `["0xbb"]`, receipt(h16), false},
		{"transaction", "eth_getTransactionByHash", `["0xbb"]`, `{"blockHash":"0xaa","blockNumber":"0x10","hash":"0xbb"}`, false},
		{"block receipts", "eth_getBlockReceipts", `["0x10"]`, `[` + receipt(h16) + `]`, false},
		{"logs up to the block", "eth_getLogs", `[{"fromBlock":"0xe"}]`, logs(`"0xe"`, h15, h16), false},
		{"filter changes up to the block", "eth_getFilterChanges", `["0x1"]`, logs(h15, h16), false},
		{"transaction by block and index", "eth_getTransactionByBlockNumberAndIndex", `["0x10","0x0"]`, `{"blockHash":"0xaa","blockNumber":"0x10","hash":"0xbb"}`, false},
		{"block filter changes", "eth_getFilterChanges", `["0x2"]`, `["0xaa"]`, true},
		{"the same block number", "eth_blockNumber", `[]`, `"0x5"`, true},
		{"a pending block", "eth_getBlockByNumber", `["pending",false]`, block(h16), true},
		{"no block", "eth_getBlockByNumber", `["0x10",false]`, `null`, true},
		{"a transaction not mined", "eth_getTransactionByHash", `["0xbb"]`, `{"blockHash":null,"blockNumber":null,"hash":"0xbb"}`, true},
		{"no logs", "eth_getLogs", `[{"fromBlock":"0xe"}]`, `[]`, true},
		{"a read naming no block", "eth_getBalance", `["0xab","0x10"]`, `"0x10"`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newCoalRig(t, nil)
			r.connect()
			call := func(id string) string { return request(id, "eth_call", `[{"to":"0xab"},"latest"]`) }
			// Block 5 is known before the first read is sent.
			learn := func(cl router.ClientID, id, method, params, answer string) {
				t.Helper()
				o := r.send(cl, request(id, method, params))
				if len(o.up) != 1 {
					t.Fatalf("%s: %d upstream frames", method, len(o.up))
				}
				if got := r.upstream(reply(t, o.up[0], answer)).to[cl]; len(got) != 1 {
					t.Fatalf("%s answer: %q", method, got)
				}
			}
			a, b := r.join(), r.join()
			learn(b, `"bn"`, "eth_blockNumber", `[]`, `"0x5"`)
			if o := r.send(a, call(`1`)); len(o.up) != 1 {
				t.Fatalf("first read: %d upstream frames", len(o.up))
			}
			learn(b, `"learn"`, tc.method, tc.params, tc.answer)
			frames := len(r.send(b, call(`2`)).up)
			if joined := frames == 0; joined != tc.joins {
				t.Errorf("after %s answered %s: the read sent %d upstream frames, want joining %v", tc.method, tc.answer, frames, tc.joins)
			}
		})
	}
}

// TestCoalesceAfterLogPushed: a log or a receipt pushed to a subscriber
// tells it of its block: a read after one of a block above any seen does
// not join a call sent before it; after one of a block already seen it
// does.
func TestCoalesceAfterLogPushed(t *testing.T) {
	logOf := func(n string) string {
		return `{"address":"0xab","blockHash":"0xaa","blockNumber":` + n + `,"logIndex":"0x0","removed":false}`
	}
	receiptsOf := func(n string) string {
		return `[{"blockHash":"0xaa","blockNumber":` + n + `,"status":"0x1","transactionHash":"0xbb"}]`
	}
	for _, tc := range []struct {
		name, params, result string
		joins                bool
	}{
		{"log of a new block", `["logs",{"address":"0xab"}]`, logOf(`"0x11"`), false},
		{"log of a block seen", `["logs",{"address":"0xab"}]`, logOf(`"0x10"`), true},
		{"receipts of a new block", `["transactionReceipts"]`, receiptsOf(`"0x11"`), false},
		{"receipts of a block seen", `["transactionReceipts"]`, receiptsOf(`"0x10"`), true},
		{"a pending transaction", `["newPendingTransactions"]`, `"0xbb"`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newCoalRig(t, nil)
			r.connect()
			a, b := r.join(), r.join()
			o := r.send(b, request(`"bn"`, "eth_blockNumber", `[]`))
			r.upstream(reply(t, o.up[0], `"0x10"`))
			o = r.send(b, request(`"s"`, "eth_subscribe", tc.params))
			if len(o.up) != 1 {
				t.Fatalf("eth_subscribe: %d upstream frames", len(o.up))
			}
			r.upstream(reply(t, o.up[0], `"0xup"`))
			call := func(id string) string { return request(id, "eth_call", `[{"to":"0xab"},"latest"]`) }
			if o := r.send(a, call(`1`)); len(o.up) != 1 {
				t.Fatalf("first read: %d upstream frames", len(o.up))
			}
			r.upstream(`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xup","result":` + tc.result + `}}`)
			frames := len(r.send(b, call(`2`)).up)
			if joined := frames == 0; joined != tc.joins {
				t.Errorf("after a push of %s: the read sent %d upstream frames, want joining %v", tc.result, frames, tc.joins)
			}
		})
	}
}

// TestCoalesceAfterRewind: the node's head set back (debug_setHead, a
// shorter chain) moves the epoch whether a client sees it in newHeads or in
// eth_blockNumber, and the blocks that regrow above it are new again.
func TestCoalesceAfterRewind(t *testing.T) {
	r := newCoalRig(t, nil)
	r.connect()
	a, b := r.join(), r.join()
	blockNumber := func(answer string) {
		t.Helper()
		o := r.send(b, request(`"bn"`, "eth_blockNumber", `[]`))
		if len(o.up) != 1 {
			t.Fatalf("eth_blockNumber: %d upstream frames", len(o.up))
		}
		r.upstream(reply(t, o.up[0], answer))
	}
	// Each step reads its own address, so that what earlier steps left
	// in flight is no call to join.
	call := func(id string, step int) string {
		return request(id, "eth_call", fmt.Sprintf(`[{"to":"0x%x"},"latest"]`, step))
	}
	blockNumber(`"0x10"`)
	for i, step := range []struct {
		answer string
		joins  bool
	}{
		{`"0x8"`, false}, // set back
		{`"0x9"`, false}, // regrowing: block 9 is new again
		{`"0x9"`, true},  // nothing new
	} {
		if o := r.send(a, call(`"a"`, i)); len(o.up) != 1 {
			t.Fatalf("step %d: the lead sent %d frames", i, len(o.up))
		}
		blockNumber(step.answer)
		frames := len(r.send(b, call(`"b"`, i)).up)
		if joined := frames == 0; joined != step.joins {
			t.Errorf("after eth_blockNumber %s: the read sent %d upstream frames, want joining %v", step.answer, frames, step.joins)
		}
	}
}
