// Package chaos runs muxd against an upstream that reorders, delays,
// duplicates, invents answers and cuts its socket all the time, with a few
// hundred raw WebSocket clients checking every message they get.
package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/muxd/muxd/mux"
)

const (
	numClients     = 200
	trafficFor     = 12 * time.Second
	requestTimeout = 3 * time.Second
	// slack over the request timeout: the sweeper runs every
	// timeout/20, plus scheduling under -race on a small box.
	slack       = 1500 * time.Millisecond
	maxInFlight = 6 // units (single request or batch) outstanding per client
	// reconnectMax bounds muxd's backoff between upstream dials.
	reconnectMax = time.Second
)

var retryMethods = []string{"eth_call", "eth_getBalance", "eth_blockNumber", "eth_chainId", "eth_getLogs", "eth_getCode"}

func TestChaos(t *testing.T) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseHeap := ms.HeapInuse
	baseG := runtime.NumGoroutine()

	meter := startStallMeter(t, 10*time.Millisecond)
	up := newChaosUpstream(t)
	gaps := newBreakLog()
	var upOnce sync.Once
	closeUp := func() { upOnce.Do(up.Close) }
	t.Cleanup(closeUp)

	srv, wsURL, stopMuxd := startMuxd(t, mux.Config{
		Upstream:       up.URL,
		RequestTimeout: requestTimeout,
		PingInterval:   -1,
		// Every connection is cut within 2 s, so the backoff would
		// reach its 10 s maximum and the node be away most of the run:
		// few backfills, each of a gap past backfill_blocks.
		ReconnectMax: reconnectMax,
		Logger:       logOnFailure(t),
	})

	start := time.Now()
	end := start.Add(trafficFor)
	clients := make([]*client, numClients)
	var wg, watching sync.WaitGroup
	released := make(chan struct{})
	for i := range clients {
		c := newClient(t, i)
		c.chain, c.gaps, c.meter = up.chain, gaps, meter
		clients[i] = c
		wg.Add(1)
		var watched func()
		if c.watcher() {
			watching.Add(1)
			watched = sync.OnceFunc(watching.Done)
		}
		go func() {
			defer wg.Done()
			if watched != nil {
				defer watched()
			}
			c.run(wsURL, end, watched, released)
		}()
	}
	watching.Wait()
	checkCaughtUp(t, up, clients)
	close(released)
	wg.Wait()
	t.Logf("clients done after %v (the process stalled %v of it)", time.Since(start).Round(time.Millisecond), meter.now().stalled)

	var tot clientStats
	for _, c := range clients {
		tot.add(c.stats)
	}
	t.Logf("client traffic: %+v", tot)
	if tot.Results == 0 || tot.BatchesAnswered == 0 {
		t.Errorf("traffic too thin to prove anything: %+v", tot)
	}
	if tot.Pushes == 0 || tot.SubsLive == 0 {
		// The crosstalk and ordering checks of pushes would have had
		// nothing to check (a run here has thousands of each).
		t.Errorf("subscription path not exercised: %+v", tot)
	}
	for _, f := range up.Failures() {
		t.Error(f)
	}

	m := srv.Metrics()
	drops := map[string]float64{}
	for r := mux.DropUnknownID; r <= mux.DropNoUpstream; r++ {
		drops[r.String()] = value(m.Dropped.WithLabelValues(r.String()))
	}
	t.Logf("muxd: reconnects=%v retried=%v pushes=%v dropped=%v slow_consumers=%v", value(m.UpstreamReconnects), value(m.Retried), value(m.Pushes), drops, value(m.SlowConsumers))
	t.Logf("upstream: conns=%d requests=%d arrays=%d notifications=%d subscribes=%d/%d unsubscribes=%d pushes=%d dup_answers=%d unknown_ids=%d null_ids=%d",
		up.NumConns(), up.requests.Load(), up.arrays.Load(), up.notifs.Load(), up.subscribes.Load(), up.subRecv.Load(), up.unsubs.Load(), up.pushes.Load(), up.dups.Load(), up.unknownIDs.Load(), up.nullIDs.Load())
	checkBackfill(t, m, up, gaps, tot)
	if up.arrays.Load() == 0 {
		t.Errorf("no client batch reached the node as an array")
	}
	if up.NumConns() < 3 {
		t.Errorf("only %d upstream connections: the chaos did not happen", up.NumConns())
	}
	if v := value(m.SlowConsumers); v != 0 {
		t.Errorf("%v clients cut as slow consumers", v)
	}
	// Sessions end asynchronously after the clients close, and muxd's own
	// eth_unsubscribe/eth_subscribe may still be in flight: both gauges must
	// reach zero within a request timeout (plus slack).
	settle := time.NewTicker(10 * time.Millisecond)
	defer settle.Stop()
	for left := meter.now(); meter.now().ran(left) < requestTimeout+slack; <-settle.C {
		if value(m.InFlight) == 0 && value(m.ClientSubs) == 0 && value(m.Clients.WithLabelValues("ws")) == 0 {
			break
		}
	}
	if v := value(m.InFlight); v != 0 {
		t.Errorf("muxd_requests_in_flight = %v after every client left", v)
	}
	if v := value(m.ClientSubs); v != 0 {
		t.Errorf("muxd_client_subscriptions = %v after every client left", v)
	}
	if v := value(m.Clients.WithLabelValues("ws")); v != 0 {
		t.Errorf("muxd_clients{ws} = %v after every client left", v)
	}

	if err := stopMuxd(); err != nil {
		t.Error(err)
	}
	closeUp()

	// Everything muxd, the upstream and the clients started must be gone.
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for runtime.NumGoroutine() > baseG+2 && time.Now().Before(deadline) {
		<-tick.C
	}
	if n := runtime.NumGoroutine(); n > baseG+2 {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("goroutines: %d at start, %d after shutdown\n%s", baseG, n, buf)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	if limit := 4*baseHeap + 48<<20; ms.HeapInuse > limit {
		t.Errorf("HeapInuse %d MiB after shutdown and GC, baseline %d MiB", ms.HeapInuse>>20, baseHeap>>20)
	}
	t.Logf("goroutines %d -> %d, HeapInuse %d KiB -> %d KiB, total %v", baseG, runtime.NumGoroutine(), baseHeap>>10, ms.HeapInuse>>10, time.Since(start).Round(time.Millisecond))
}

// checkCaughtUp ends the chaos on the node (no more cut sockets) and waits
// for every watcher's gap-free subscription to deliver from a block mined
// after that: a backfill that cannot finish holds every later push, which
// the checks of each push alone would never see. Whatever the watcher was
// delivered up to then is held to the same checks as the rest.
func checkCaughtUp(t *testing.T, up *chaosUpstream, clients []*client) {
	t.Helper()
	top := up.calm()
	calmed := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	// A hold is bounded by a redial and a few request timeouts: on a
	// connection that stays up every backfill ends within a few round
	// trips, or a request timeout and its retry. So the watchers must
	// move within that much of the calm, and of each other move; a
	// machine too busy to deliver quickly only makes them move slowly,
	// while a backfill that never ends holds them still. Behind that, a
	// bound on the whole wait.
	stillFor := reconnectMax + 3*requestTimeout + slack
	moved, seen := calmed, ""
	for ; ; <-tick.C {
		var behind []string
		for _, c := range clients {
			if c.watcher() {
				if ok, where := c.pastBlock(top); !ok {
					behind = append(behind, fmt.Sprintf("client %d %s", c.n, where))
				}
			}
		}
		if len(behind) == 0 {
			t.Logf("watchers caught up with block %d within %v of the node calming down", top, time.Since(calmed).Round(time.Millisecond))
			return
		}
		if now := fmt.Sprint(behind); now != seen {
			moved, seen = time.Now(), now
		}
		if time.Since(moved) > stillFor || time.Since(calmed) > 4*stillFor {
			t.Errorf("%d watchers were delivered nothing from past block %d within %v of the node calming down, none of them moving for %v (a backfill that never ends holds every later push): %v",
				len(behind), top, time.Since(calmed).Round(time.Millisecond), time.Since(moved).Round(time.Millisecond), behind)
			return
		}
	}
}

// checkBackfill reports what the backfill did and holds the gaps clients
// saw in gap-free subscriptions against the gaps muxd counted: a gap muxd
// did not count is muxd losing a head or a log.
func checkBackfill(t *testing.T, m *mux.Metrics, up *chaosUpstream, gaps *breakLog, tot clientStats) {
	t.Helper()
	counted := map[string]float64{} // kind -> gaps muxd counted for it
	var byReason []string
	for _, lv := range collect(m.BackfillGaps) {
		kind, reason := lv.labels["kind"], lv.labels["reason"]
		byReason = append(byReason, fmt.Sprintf("%s/%s=%v", kind, reason, lv.value))
		if reason != "not_backfillable" && reason != "disabled" {
			counted[kind] += lv.value
		}
	}
	sort.Strings(byReason)
	var dm dto.Metric
	_ = m.BackfillDuration.Write(&dm)
	hist := dm.GetHistogram()
	chainEvents := func() (blocks, reorgs int) {
		up.chain.mu.Lock()
		defer up.chain.mu.Unlock()
		return len(up.chain.canon), up.chain.reorgs
	}
	blocks, reorgs := chainEvents()
	t.Logf("chain: %d blocks, %d reorgs; node: chain requests=%d (failed=%d null=%d unanswered=%d on purpose) pushes heads=%d logs=%d removed=%d",
		blocks, reorgs, up.chainReqs.Load(), up.chainFailed.Load(), up.chainNulls.Load(), up.chainSilent.Load(), up.headPushes.Load(), up.logPushes.Load(), up.removedPushes.Load())
	t.Logf("muxd backfill: heads=%v logs=%v jobs=%d (mean %.0f ms) gaps %v",
		value(m.BackfilledHeads), value(m.BackfilledLogs), hist.GetSampleCount(), 1000*hist.GetSampleSum()/max(1, float64(hist.GetSampleCount())), byReason)
	t.Logf("clients: heads=%d (reorgs seen %d) logs=%d removed=%d (of logs delivered before the subscriber joined %d, never delivered %d); breaks seen: newHeads=%d logs=%d",
		tot.HeadPushes, tot.HeadReorgs, tot.LogPushes, tot.RemovedLogs, tot.RemovedUnseen, tot.RemovedNever, gaps.count("newHeads"), gaps.count("logs"))

	if tot.HeadPushes == 0 || tot.LogPushes == 0 {
		t.Errorf("gap-free subscriptions not exercised: %d heads, %d logs delivered", tot.HeadPushes, tot.LogPushes)
	}
	if value(m.BackfilledHeads) <= 0 || value(m.BackfilledLogs) <= 0 {
		t.Errorf("no backfill happened: heads=%v logs=%v", value(m.BackfilledHeads), value(m.BackfilledLogs))
	}
	for _, kind := range []string{"newHeads", "logs"} {
		if n := gaps.count(kind); float64(n) > counted[kind] {
			t.Errorf("%s: clients saw %d distinct gaps, muxd counted %v: it lost pushes without counting; e.g. %q", kind, n, counted[kind], gaps.samples)
		}
	}
	gaps.mu.Lock()
	for _, d := range gaps.never {
		t.Errorf("removed:true for a log muxd never delivered: %s", d)
	}
	gaps.mu.Unlock()
}

type labeledValue struct {
	labels map[string]string
	value  float64
}

// collect reads every counter of cv with its labels.
func collect(cv *prometheus.CounterVec) []labeledValue {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		cv.Collect(ch)
		close(ch)
	}()
	var out []labeledValue
	for mt := range ch {
		var d dto.Metric
		if mt.Write(&d) != nil {
			continue
		}
		lv := labeledValue{labels: map[string]string{}, value: d.GetCounter().GetValue()}
		for _, lp := range d.GetLabel() {
			lv.labels[lp.GetName()] = lp.GetValue()
		}
		out = append(out, lv)
	}
	return out
}

func value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	return -1
}

// ---- client side --------------------------------------------------------

type kind uint8

const (
	kindCall kind = iota
	kindSub
	kindUnsub
)

type req struct {
	id       []byte
	tag      string // calls: the tag inside params
	method   string
	params   []byte
	kind     kind
	sent     stamp
	batch    *batch
	resolved bool
	late     bool     // reported unanswered past its deadline (its answer is still checked)
	subID    string   // kindUnsub: the client subscription id
	subParam *variant // kindSub: the params subscribed with
	keep     bool     // kindSub: held until the end of the run
	first    []byte   // the first answer, for the report of a second one
	firstAt  time.Time
}

type group struct {
	reqs          []*req
	results, errs int
	late          int // requests reported unanswered past their deadline
}

type batch struct {
	n        int
	elems    []*req // id-bearing elements
	sent     stamp
	resolved bool
	late     bool   // reported unanswered past its deadline (its answer is still checked)
	idSet    string // sorted ids, to identify an all-error answer
}

type liveSub struct {
	params      string
	kind        pushKind
	filter      *logFilter // pushLogs
	keep        bool       // not unsubscribed before the end of the run
	conn, n     int64      // pushCounter: the last push
	heads       headCheck  // pushHeads
	logs        logCheck   // pushLogs
	unsubscribe bool       // eth_unsubscribe sent, answer not yet seen
}

type clientStats struct {
	Sent, Results, Errors, Timeouts, Unavailable, Limits int
	BatchesSent, BatchesAnswered, Notifications          int
	SubsSent, SubsLive, Unsubs, Pushes                   int
	HeadPushes, HeadReorgs, LogPushes, RemovedLogs       int
	RemovedUnseen, RemovedNever                          int
}

func (s *clientStats) add(o clientStats) {
	s.Sent += o.Sent
	s.Results += o.Results
	s.Errors += o.Errors
	s.Timeouts += o.Timeouts
	s.Unavailable += o.Unavailable
	s.Limits += o.Limits
	s.BatchesSent += o.BatchesSent
	s.BatchesAnswered += o.BatchesAnswered
	s.Notifications += o.Notifications
	s.SubsSent += o.SubsSent
	s.SubsLive += o.SubsLive
	s.Unsubs += o.Unsubs
	s.Pushes += o.Pushes
	s.HeadPushes += o.HeadPushes
	s.HeadReorgs += o.HeadReorgs
	s.LogPushes += o.LogPushes
	s.RemovedLogs += o.RemovedLogs
	s.RemovedUnseen += o.RemovedUnseen
	s.RemovedNever += o.RemovedNever
}

var failures atomic.Int64

type client struct {
	t     *testing.T
	n     int
	rng   *rand.Rand
	chain *chain      // the node's chain, to check heads and logs against
	gaps  *breakLog   // where gap-free subscriptions broke
	meter *stallMeter // what deadlines are measured with

	mu          sync.Mutex
	wake        chan struct{}
	outstanding int
	seq         int
	usedIDs     [][]byte
	tags        map[string]*req
	notifTags   map[string]bool
	groups      map[string]*group
	subReqs     map[string]*req
	batches     []*batch
	live        map[string]*liveSub
	dead        map[string]bool
	stats       clientStats
	recent      [][]byte
}

func newClient(t *testing.T, n int) *client {
	return &client{
		t: t, n: n,
		rng:       rand.New(rand.NewPCG(uint64(n), uint64(time.Now().UnixNano()))),
		wake:      make(chan struct{}, 1),
		tags:      map[string]*req{},
		notifTags: map[string]bool{},
		groups:    map[string]*group{},
		subReqs:   map[string]*req{},
		live:      map[string]*liveSub{},
		dead:      map[string]bool{},
	}
}

func (c *client) fail(format string, args ...any) {
	if failures.Add(1) > 40 {
		return
	}
	c.t.Errorf("client %d: "+format, append([]any{c.n}, args...)...)
}

// watcher reports whether c holds one gap-free subscription for the whole
// run (one client in 8).
func (c *client) watcher() bool { return c.n%8 == 0 }

// run sends traffic until end, then drains. A watcher then calls watched
// and keeps its subscription until released (the node's calm phase).
func (c *client) run(url string, end time.Time, watched func(), released <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	conn, _, err := websocket.Dial(dctx, url, nil)
	dcancel()
	if err != nil {
		c.fail("dial: %v", err)
		return
	}
	defer conn.CloseNow()
	conn.SetReadLimit(16 << 20)

	var closing atomic.Bool
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for {
			_, msg, err := conn.Read(ctx)
			if err != nil {
				if ctx.Err() == nil && !closing.Load() {
					c.fail("read: %v (muxd must never cut a client here)", err)
				}
				return
			}
			c.onMessage(msg)
		}
	}()

	if c.watcher() {
		// A watcher: one gap-free subscription for the whole run.
		c.mu.Lock()
		v := &subVariants[chainVariants[(c.n/8)%len(chainVariants)]]
		r := c.subLocked(nil, v)
		r.keep = true
		c.outstanding++
		c.mu.Unlock()
		if err := conn.Write(ctx, websocket.MessageText, encode(r)); err != nil {
			c.fail("write: %v", err)
			return
		}
	}

	check := time.NewTicker(250 * time.Millisecond)
	defer check.Stop()
	pace := time.NewTimer(0)
	defer pace.Stop()
	endT := time.NewTimer(time.Until(end))
	defer endT.Stop()
	var lastSent stamp
send:
	for time.Now().Before(end) {
		// Pace first, then wait for room (an answer) if the window is full.
		if !waitFor(pace.C, readDone, check, c) {
			return
		}
		for {
			c.mu.Lock()
			full := c.outstanding >= maxInFlight
			c.mu.Unlock()
			if !full {
				break
			}
			if time.Now().After(end) {
				break send // what is still unanswered is drain's to report
			}
			if !waitFor(c.wake, readDone, check, c, endT.C) {
				return
			}
		}
		frame := c.next()
		lastSent = c.meter.now()
		if err := conn.Write(ctx, websocket.MessageText, frame); err != nil {
			c.fail("write: %v", err)
			return
		}
		pace.Reset(time.Duration(c.rng.IntN(120)) * time.Millisecond)
	}

	// Drain, unsubscribe whatever is live, drain again: every request must
	// be answered within its deadline plus slack.
	if !c.drain(conn, ctx, lastSent, check, readDone) {
		return
	}
	if watched != nil {
		watched()
		if !waitFor(released, readDone, check, c) {
			return
		}
	}
	c.mu.Lock()
	var unsubs [][]byte
	for sid, l := range c.live {
		if !l.unsubscribe {
			unsubs = append(unsubs, c.unsubLocked(sid))
		}
	}
	c.mu.Unlock()
	for _, f := range unsubs {
		lastSent = c.meter.now()
		if err := conn.Write(ctx, websocket.MessageText, f); err != nil {
			c.fail("write: %v", err)
			return
		}
	}
	if !c.drain(conn, ctx, lastSent, check, readDone) {
		return
	}
	c.mu.Lock()
	if len(c.live) != 0 {
		c.fail("%d subscriptions still live after unsubscribing all", len(c.live))
	}
	c.mu.Unlock()
	closing.Store(true)
	conn.Close(websocket.StatusNormalClosure, "bye")
	cancel()
	<-readDone
}

// waitFor waits for ch (or, if given, until[0]: a window that stays full
// must not outlast the run), checking deadlines meanwhile; false when the
// connection is gone.
func waitFor[T any](ch <-chan T, readDone chan struct{}, check *time.Ticker, c *client, until ...<-chan time.Time) bool {
	var stop <-chan time.Time
	if len(until) > 0 {
		stop = until[0]
	}
	for {
		select {
		case <-ch:
			return true
		case <-stop:
			return true
		case <-readDone:
			return false
		case <-check.C:
			c.checkDeadlines(c.meter.now(), false)
		}
	}
}

// drain waits until nothing is outstanding, failing what is still
// unanswered past the last send's deadline plus slack. It reports false when
// the connection is gone.
func (c *client) drain(conn *websocket.Conn, ctx context.Context, lastSent stamp, check *time.Ticker, readDone chan struct{}) bool {
	drainBy := time.NewTimer(requestTimeout + slack - c.meter.now().ran(lastSent))
	defer drainBy.Stop()
	for {
		c.mu.Lock()
		left := c.outstanding
		c.mu.Unlock()
		if left == 0 {
			return true
		}
		select {
		case <-c.wake:
		case <-check.C:
			c.checkDeadlines(c.meter.now(), false)
		case <-readDone:
			return false
		case <-drainBy.C:
			now := c.meter.now()
			if left := requestTimeout + slack - now.ran(lastSent); left > 0 {
				drainBy.Reset(left) // the process stalled meanwhile
				continue
			}
			c.checkDeadlines(now, true)
			c.mu.Lock()
			c.fail("%d requests/batches unanswered %v after the last was sent", c.outstanding, requestTimeout+slack)
			c.outstanding = 0
			c.mu.Unlock()
			return true
		}
	}
}

// ---- traffic -------------------------------------------------------------

func (c *client) newID() []byte {
	c.seq++
	if len(c.usedIDs) > 0 && c.rng.IntN(10) == 0 {
		return c.usedIDs[c.rng.IntN(len(c.usedIDs))] // a duplicate
	}
	var id []byte
	switch c.rng.IntN(7) {
	case 0, 1:
		id = fmt.Appendf(nil, "%d", c.seq)
	case 2:
		id = fmt.Appendf(nil, `"%d"`, c.seq)
	case 3:
		id = fmt.Appendf(nil, `"q\"%d\\x\u00e9\n"`, c.seq)
	case 4:
		id = fmt.Appendf(nil, "%d.0", c.seq)
	case 5:
		id = fmt.Appendf(nil, "18446744073709551616%d", c.seq)
	default:
		if c.rng.IntN(4) == 0 {
			id = []byte("null")
		} else {
			id = fmt.Appendf(nil, "%de2", c.seq)
		}
	}
	c.usedIDs = append(c.usedIDs, id)
	return id
}

func (c *client) callLocked(b *batch, id []byte) *req {
	c.seq++
	method := retryMethods[c.rng.IntN(len(retryMethods))]
	if c.rng.IntN(20) == 0 {
		method = "eth_sendRawTransaction"
	}
	tag := fmt.Sprintf("c%d-%d", c.n, c.seq)
	params := fmt.Appendf(nil, `[{"tag":"%s","pad":"%x","s":"a\"b\\c"},"latest"]`, tag, c.rng.Uint64())
	r := &req{id: id, tag: tag, method: method, params: params, kind: kindCall, batch: b, sent: c.meter.now()}
	c.tags[tag] = r
	if b == nil {
		g := c.groups[string(id)]
		if g == nil {
			g = &group{}
			c.groups[string(id)] = g
		}
		g.reqs = append(g.reqs, r)
	}
	c.stats.Sent++
	return r
}

func encode(r *req) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"method":"%s","params":%s}`, r.id, r.method, r.params)
}

func (c *client) notifLocked() []byte {
	c.seq++
	tag := fmt.Sprintf("n%d-%d", c.n, c.seq)
	c.notifTags[tag] = true
	c.stats.Notifications++
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"eth_blockNumber","params":[{"tag":"%s"}]}`, tag)
}

// subLocked builds an eth_subscribe of v, or of a variant drawn at random
// when v is nil.
func (c *client) subLocked(b *batch, v *variant) *req {
	c.seq++
	if v == nil {
		v = &subVariants[c.rng.IntN(len(subVariants))]
	}
	r := &req{id: fmt.Appendf(nil, `"s-%d"`, c.seq), method: "eth_subscribe", params: []byte(v.params), kind: kindSub, subParam: v, batch: b, sent: c.meter.now()}
	c.subReqs[string(r.id)] = r
	c.stats.SubsSent++
	return r
}

func (c *client) unsubLocked(sid string) []byte {
	c.seq++
	c.live[sid].unsubscribe = true
	r := &req{id: fmt.Appendf(nil, `"s-%d"`, c.seq), method: "eth_unsubscribe", params: fmt.Appendf(nil, "[%s]", sid), kind: kindUnsub, subID: sid, sent: c.meter.now()}
	c.subReqs[string(r.id)] = r
	c.outstanding++
	return encode(r)
}

// next builds the client's next frame and records what it expects.
func (c *client) next() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch x := c.rng.IntN(100); {
	case x < 55:
		c.outstanding++
		return encode(c.callLocked(nil, c.newID()))
	case x < 60:
		return c.notifLocked()
	case x < 75:
		c.stats.BatchesSent++
		b := &batch{n: c.seq, sent: c.meter.now()}
		var elems [][]byte
		first := c.callLocked(b, fmt.Appendf(nil, `"b-%d"`, c.seq))
		b.elems = append(b.elems, first)
		for range 1 + c.rng.IntN(5) {
			switch y := c.rng.IntN(10); {
			case y < 2:
				elems = append(elems, c.notifLocked())
			case y < 4:
				// a duplicate id inside the batch
				// (of a call: subscription ids stay unique, they are
				// how the client tells its subscribe answers apart)
				prev := b.elems[0]
				if x := b.elems[c.rng.IntN(len(b.elems))]; x.kind == kindCall {
					prev = x
				}
				r := c.callLocked(b, prev.id)
				b.elems = append(b.elems, r)
			case y < 5 && len(c.live) < 3:
				b.elems = append(b.elems, c.subLocked(b, nil))
			default:
				b.elems = append(b.elems, c.callLocked(b, c.newID()))
			}
		}
		for _, r := range b.elems {
			elems = append(elems, encode(r))
		}
		c.rng.Shuffle(len(elems), func(i, j int) { elems[i], elems[j] = elems[j], elems[i] })
		ids := make([]string, len(b.elems))
		for i, r := range b.elems {
			ids[i] = string(r.id)
		}
		sort.Strings(ids)
		b.idSet = strings.Join(ids, "\x00")
		c.batches = append(c.batches, b)
		c.outstanding++
		return append(append([]byte("["), bytes.Join(elems, []byte(","))...), ']')
	case x < 80:
		// only notifications: nothing must come back
		var elems [][]byte
		for range 1 + c.rng.IntN(3) {
			elems = append(elems, c.notifLocked())
		}
		return append(append([]byte("["), bytes.Join(elems, []byte(","))...), ']')
	case x < 90 && len(c.live) < 3:
		c.outstanding++
		return encode(c.subLocked(nil, nil))
	default:
		for sid, l := range c.live {
			if !l.unsubscribe && !l.keep {
				return c.unsubLocked(sid)
			}
		}
		c.outstanding++
		return encode(c.callLocked(nil, c.newID()))
	}
}

// ---- checking --------------------------------------------------------------

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type inMsg struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *rpcError       `json:"error"`
	Method string          `json:"method"`
	Params *struct {
		Subscription json.RawMessage `json:"subscription"`
		Result       json.RawMessage `json:"result"`
	} `json:"params"`
}

// counterPush is the payload the node pushes to subscriptions the chain
// does not feed.
type counterPush struct {
	N      int64           `json:"n"`
	Conn   int64           `json:"conn"`
	Params json.RawMessage `json:"params"`
}

type echo struct {
	Echo []json.RawMessage `json:"echo"`
	M    string            `json:"m"`
}

// tagOf returns the tag of a result {"echo":[{"tag":...}], "m":...}.
func tagOf(result json.RawMessage) (string, *echo) {
	if len(result) == 0 || result[0] != '{' {
		return "", nil
	}
	var e echo
	if json.Unmarshal(result, &e) != nil || len(e.Echo) == 0 {
		return "", nil
	}
	var p struct {
		Tag string `json:"tag"`
	}
	if json.Unmarshal(e.Echo[0], &p) != nil {
		return "", nil
	}
	return p.Tag, &e
}

func (c *client) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *client) onMessage(msg []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recent = append(c.recent, msg)
	if len(c.recent) > 6 {
		c.recent = c.recent[1:]
	}
	t := bytes.TrimLeft(msg, " \t\r\n")
	if len(t) > 0 && t[0] == '[' {
		var entries []json.RawMessage
		if err := json.Unmarshal(msg, &entries); err != nil {
			c.fail("bad array from muxd: %v: %.200s", err, msg)
			return
		}
		c.onBatch(entries, msg)
		return
	}
	var m inMsg
	if err := json.Unmarshal(msg, &m); err != nil {
		c.fail("bad message from muxd: %v: %.200s", err, msg)
		return
	}
	if m.Method == "eth_subscription" {
		c.onPush(&m, msg)
		return
	}
	if m.ID == nil {
		c.fail("message with neither id nor method: %.200s", msg)
		return
	}
	c.onSingle(&m, msg)
}

func (c *client) okError(e *rpcError, r *req, msg []byte) {
	switch e.Code {
	case -32002:
		if strings.Contains(e.Message, "timed out") {
			c.stats.Timeouts++
		} else {
			c.stats.Unavailable++
		}
	case -32005:
		c.stats.Limits++
	default:
		c.fail("unexpected error for %s: %.300s", r.method, msg)
	}
	c.stats.Errors++
}

func (c *client) checkCall(r *req, m *inMsg, e *echo, msg []byte) {
	if !bytes.Equal(m.ID, r.id) {
		c.fail("answer to request %s (id %s) came with id %s: %.300s", r.tag, r.id, m.ID, msg)
	}
	if e.M != r.method {
		c.fail("answer for %s carries method %q: %.300s", r.method, e.M, msg)
	}
	var want []json.RawMessage
	_ = json.Unmarshal(r.params, &want)
	if len(want) != len(e.Echo) || !bytes.Equal(want[0], e.Echo[0]) || !bytes.Equal(want[1], e.Echo[1]) {
		c.fail("answer echoes params %s, request sent %s", e.Echo, r.params)
	}
	if r.resolved {
		c.fail("second answer to request %s (id %s): %.300s", r.tag, r.id, msg)
	}
	r.resolved = true
	c.stats.Results++
}

func (c *client) onSingle(m *inMsg, msg []byte) {
	if r := c.subReqs[string(m.ID)]; r != nil {
		if r.batch != nil {
			c.fail("batch element answered on its own: %.300s", msg)
			return
		}
		c.onSubAnswer(r, m, msg)
		c.outstanding--
		c.signal()
		return
	}
	g := c.groups[string(m.ID)]
	if g == nil {
		c.fail("response with an id this client never sent as a single request: %.300s", msg)
		return
	}
	if g.results+g.errs >= len(g.reqs) {
		c.fail("more responses with id %s than requests (%d): %.300s", m.ID, len(g.reqs), msg)
		return
	}
	if m.Error != nil {
		c.okError(m.Error, g.reqs[0], msg)
		g.errs++
	} else {
		tag, e := tagOf(m.Result)
		r := c.tags[tag]
		switch {
		case e == nil:
			c.fail("result that is no echo: %.300s", msg)
			return
		case c.notifTags[tag]:
			c.fail("a notification was answered: %.300s", msg)
			return
		case r == nil:
			c.fail("answer echoes a request this client never sent (crosstalk): %.300s", msg)
			return
		case r.batch != nil:
			c.fail("batch element answered on its own: %.300s", msg)
			return
		}
		c.checkCall(r, m, e, msg)
		g.results++
	}
	c.outstanding--
	c.signal()
}

func (c *client) onSubAnswer(r *req, m *inMsg, msg []byte) {
	if r.resolved {
		c.fail("second answer to %s id %s (sent %v ago) %v after the first %s: %.300s\nrecent: %s", r.method, r.id, time.Since(r.sent.at), time.Since(r.firstAt), r.first, msg, bytes.Join(c.recent, []byte("\n")))
		return
	}
	r.resolved = true
	r.first, r.firstAt = append([]byte(nil), msg...), time.Now()
	if m.Error != nil {
		c.okError(m.Error, r, msg)
		if r.kind == kindUnsub {
			c.fail("eth_unsubscribe of a live subscription failed: %.300s", msg)
		}
		return
	}
	switch r.kind {
	case kindSub:
		var s string
		if json.Unmarshal(m.Result, &s) != nil || !strings.HasPrefix(s, "0x") {
			c.fail("eth_subscribe result is no subscription id: %.300s", msg)
			return
		}
		sid := string(m.Result)
		if c.live[sid] != nil || c.dead[sid] {
			c.fail("subscription id %s handed out twice", sid)
		}
		v := r.subParam
		c.live[sid] = &liveSub{params: v.params, kind: v.kind, filter: v.filter, keep: r.keep}
		c.stats.SubsLive++
	case kindUnsub:
		if string(m.Result) != "true" {
			c.fail("eth_unsubscribe of a live subscription answered %s", m.Result)
			return
		}
		delete(c.live, r.subID)
		c.dead[r.subID] = true
		c.stats.Unsubs++
	}
}

func (c *client) onPush(m *inMsg, msg []byte) {
	if m.ID != nil || m.Params == nil {
		c.fail("malformed push: %.300s", msg)
		return
	}
	sid := string(m.Params.Subscription)
	if c.dead[sid] {
		c.fail("push for subscription %s after its eth_unsubscribe was answered true: %.300s", sid, msg)
		return
	}
	l := c.live[sid]
	if l == nil {
		c.fail("push for a subscription this client does not hold: %.300s", msg)
		return
	}
	switch l.kind {
	case pushHeads:
		c.onHeadPush(sid, l, m.Params.Result)
		return
	case pushLogs:
		c.onLogPush(sid, l, m.Params.Result)
		return
	}
	var res counterPush
	if err := json.Unmarshal(m.Params.Result, &res); err != nil {
		c.fail("push for %s is not the node's payload: %v: %.300s", sid, err, msg)
		return
	}
	if string(res.Params) != l.params {
		c.fail("push for %s carries params %s, subscribed with %s", sid, res.Params, l.params)
	}
	if res.Conn < l.conn || (res.Conn == l.conn && res.N <= l.n) {
		c.fail("push for %s out of order or repeated: conn %d n %d after conn %d n %d", sid, res.Conn, res.N, l.conn, l.n)
	}
	l.conn, l.n = res.Conn, res.N
	c.stats.Pushes++
}

func (c *client) onBatch(entries []json.RawMessage, msg []byte) {
	msgs := make([]inMsg, len(entries))
	ids := make([]string, len(entries))
	var b *batch
	for i, e := range entries {
		if err := json.Unmarshal(e, &msgs[i]); err != nil || msgs[i].ID == nil {
			c.fail("bad batch entry %.200s", e)
			return
		}
		ids[i] = string(msgs[i].ID)
		if tag, ec := tagOf(msgs[i].Result); ec != nil {
			if c.notifTags[tag] {
				c.fail("a notification was answered in a batch: %.300s", msg)
				return
			}
			if r := c.tags[tag]; r != nil && r.batch != nil {
				if b != nil && b != r.batch {
					c.fail("one array mixes answers of two batches: %.300s", msg)
					return
				}
				b = r.batch
			} else {
				c.fail("array entry answers no batch element of this client: %.300s", e)
				return
			}
		}
	}
	sort.Strings(ids)
	idSet := strings.Join(ids, "\x00")
	if b == nil {
		for _, x := range c.batches {
			if !x.resolved && x.idSet == idSet {
				b = x
				break
			}
		}
		if b == nil {
			c.fail("array matches no batch this client sent: %.300s", msg)
			return
		}
	}
	if b.resolved {
		c.fail("second array for batch %d: %.300s", b.n, msg)
		return
	}
	if idSet != b.idSet {
		c.fail("array ids %q, batch sent ids %q: %.300s", ids, b.idSet, msg)
		return
	}
	b.resolved = true
	c.outstanding--
	c.stats.BatchesAnswered++
	c.signal()
	// Results by tag first, then subscription answers, then errors to the
	// remaining calls with that id.
	var rest []int
	for i := range msgs {
		m := &msgs[i]
		if tag, e := tagOf(m.Result); e != nil {
			c.checkCall(c.tags[tag], m, e, entries[i])
			continue
		}
		if r := c.subReqs[string(m.ID)]; r != nil && r.batch == b {
			c.onSubAnswer(r, m, entries[i])
			continue
		}
		rest = append(rest, i)
	}
	for _, i := range rest {
		m := &msgs[i]
		if m.Error == nil {
			c.fail("batch entry neither echo nor error: %.300s", entries[i])
			continue
		}
		var got *req
		for _, r := range b.elems {
			if r.kind == kindCall && !r.resolved && bytes.Equal(r.id, m.ID) {
				got = r
				break
			}
		}
		if got == nil {
			c.fail("batch error entry for no unanswered element: %.300s", entries[i])
			continue
		}
		got.resolved = true
		c.okError(m.Error, got, entries[i])
	}
}

// checkDeadlines fails every request that is still unanswered past its
// deadline plus slack, counted in time the process could run (stallMeter);
// with all, every request still unanswered.
func (c *client) checkDeadlines(now stamp, all bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	late := func(sent stamp) bool { return all || now.ran(sent) > requestTimeout+slack }
	age := func(sent stamp) string {
		return fmt.Sprintf("sent %v ago, the process stalled %v of that", now.at.Sub(sent.at).Round(time.Millisecond), (now.stalled - sent.stalled).Round(time.Millisecond))
	}
	for id, g := range c.groups {
		n, oldest := 0, stamp{}
		for _, r := range g.reqs {
			if !r.resolved && late(r.sent) {
				if n == 0 {
					oldest = r.sent
				}
				n++
			}
		}
		// An error answer to this id resolves one of its requests
		// without saying which: g.errs of them are answered.
		if missing := n - g.errs; missing > g.late {
			c.fail("%d requests with id %s unanswered past deadline+slack (the first %s)", missing-g.late, id, age(oldest))
			g.late = missing // report once
		}
	}
	for _, r := range c.subReqs {
		if r.batch == nil && !r.resolved && !r.late && late(r.sent) {
			c.fail("%s id %s unanswered past deadline+slack (%s)", r.method, r.id, age(r.sent))
			r.late = true // report once
		}
	}
	for _, b := range c.batches {
		if !b.resolved && !b.late && late(b.sent) {
			c.fail("batch %d (%d elements with id) unanswered past deadline+slack (%s)", b.n, len(b.elems), age(b.sent))
			b.late = true // report once
		}
	}
}
