package main

// The load-generating clients; they run in the bench's own process.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

func dialWS(ctx context.Context, url string) (*websocket.Conn, error) {
	c, _, err := websocket.Dial(ctx, url, dialOpts)
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(readLimit)
	return c, nil
}

// dialMany opens n sockets with bounded parallelism; each is passed to
// setup (may be nil) before it counts as open.
func dialMany(ctx context.Context, url string, n int, setup func(i int, c *websocket.Conn) error) ([]*websocket.Conn, error) {
	conns := make([]*websocket.Conn, n)
	var (
		wg    sync.WaitGroup
		next  atomic.Int64
		mu    sync.Mutex
		first error
	)
	par := min(64, n)
	for range par {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				mu.Lock()
				failed := first != nil
				mu.Unlock()
				if failed {
					return
				}
				c, err := dialWS(ctx, url)
				if err == nil && setup != nil {
					err = setup(i, c)
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("client %d of %d: %w", i, n, err)
					}
					mu.Unlock()
					if c != nil {
						c.CloseNow()
					}
					return
				}
				conns[i] = c
			}
		})
	}
	wg.Wait()
	if first != nil {
		closeAll(conns)
		return nil, first
	}
	return conns, nil
}

func closeAll(conns []*websocket.Conn) {
	for _, c := range conns {
		if c != nil {
			c.CloseNow()
		}
	}
}

// appendCall appends one eth_call-shaped request with the given id.
func appendCall(b []byte, id int64) []byte {
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, `,"method":"eth_call","params":[{"to":"0x6b175474e89094c44da98b954eedeac495271d0f","data":"0x70a08231000000000000000000000000f39fd6e51aad88f6f4ce6ab8827279cfffb92266"},"latest"]}`...)
	return b
}

var resultKey = []byte(`"result":`)

// readInto reads c's next message into buf, which it resets first, and
// returns the message's type. The load generator and the relay should cost
// as little as they can, since they share the machine with what is
// measured: no buffer per message, and a context that never ends, so that
// coder/websocket watches none per read. A reader is stopped by closing its
// connection.
func readInto(c *websocket.Conn, buf *bytes.Buffer) (websocket.MessageType, error) {
	typ, r, err := c.Reader(context.Background())
	if err != nil {
		return 0, err
	}
	buf.Reset()
	_, err = buf.ReadFrom(r)
	return typ, err
}

// pause waits d, or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// load is a closed-loop measurement's load: its goroutines run until ctx
// ends, which stop or the first failure brings about.
type load struct {
	ctx  context.Context
	stop context.CancelFunc
	once sync.Once
	err  error // the first failure; read only once the goroutines are done
}

func newLoad(ctx context.Context) *load {
	l := &load{}
	l.ctx, l.stop = context.WithCancel(ctx)
	return l
}

// fail records err, unless the load has already ended, and ends it. Any
// goroutine of the load may call it.
func (l *load) fail(err error) {
	if l.ctx.Err() != nil {
		return
	}
	l.once.Do(func() { l.err = err; l.stop() })
}

func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// ---- (a) latency --------------------------------------------------------

func runLatency(ctx context.Context, e *env, o Options) (p50, p99 float64, err error) {
	c, err := dialWS(ctx, e.target)
	if err != nil {
		return 0, 0, err
	}
	defer c.CloseNow()
	now := time.Now()
	lats, err := roundTrips(ctx, c, appendCall, now.Add(o.Warmup), now.Add(o.Warmup+o.Duration))
	if err != nil {
		return 0, 0, fmt.Errorf("latency: %w", err)
	}
	return percentile(lats, 0.50), percentile(lats, 0.99), nil
}

// roundTrips sends requests made by appendReq on c one at a time until end
// and returns the round trips (µs) of those sent after warmEnd, sorted.
// Every answer must carry a result.
func roundTrips(ctx context.Context, c *websocket.Conn, appendReq func([]byte, int64) []byte, warmEnd, end time.Time) ([]float64, error) {
	var buf []byte
	var lats []float64
	for id := int64(1); time.Now().Before(end); id++ {
		buf = appendReq(buf[:0], id)
		t0 := time.Now()
		if err := c.Write(ctx, websocket.MessageText, buf); err != nil {
			return nil, err
		}
		_, msg, err := c.Read(ctx)
		if err != nil {
			return nil, err
		}
		d := time.Since(t0)
		if !bytes.Contains(msg, resultKey) {
			return nil, fmt.Errorf("bad response %.200s", msg)
		}
		if t0.After(warmEnd) {
			lats = append(lats, float64(d)/float64(time.Microsecond))
		}
	}
	if len(lats) == 0 {
		return nil, errors.New("no samples")
	}
	slices.Sort(lats)
	return lats, nil
}

// ---- (b), (c) closed-loop throughput ------------------------------------

// runThroughput runs o.Clients clients with o.Window messages outstanding
// each; a message is a single request (batch <= 1) or a batch of that many.
// It returns answered requests (batch elements) per second and the proxy's
// CPU seconds per million of them (0 when there is no proxy).
func runThroughput(ctx context.Context, e *env, o Options, batch int) (perSec, cpuPerM float64, err error) {
	conns, err := dialMany(ctx, e.target, o.Clients, nil)
	if err != nil {
		return 0, 0, err
	}
	defer closeAll(conns)
	load := newLoad(ctx)
	defer load.stop()
	loadCtx, fail := load.ctx, load.fail
	var done, bad atomic.Int64
	var wg sync.WaitGroup
	for _, c := range conns {
		tokens := make(chan struct{}, o.Window)
		for range o.Window {
			tokens <- struct{}{}
		}
		wg.Go(func() { // writer
			var buf []byte
			id := int64(0)
			for {
				select {
				case <-loadCtx.Done():
					return
				case <-tokens:
				}
				buf = buf[:0]
				if batch > 1 {
					buf = append(buf, '[')
					for k := range batch {
						if k > 0 {
							buf = append(buf, ',')
						}
						id++
						buf = appendCall(buf, id)
					}
					buf = append(buf, ']')
				} else {
					id++
					buf = appendCall(buf, id)
				}
				if err := c.Write(context.Background(), websocket.MessageText, buf); err != nil {
					fail(err)
					return
				}
			}
		})
		wg.Go(func() { // reader
			want := int64(max(batch, 1))
			var buf bytes.Buffer
			for {
				if _, err := readInto(c, &buf); err != nil {
					fail(err)
					return
				}
				got := int64(bytes.Count(buf.Bytes(), resultKey))
				done.Add(got)
				if got != want {
					bad.Add(want - got)
				}
				tokens <- struct{}{}
			}
		})
	}
	pause(loadCtx, o.Warmup)
	n0, cpu0, t0 := done.Load(), e.proxyCPU(), time.Now()
	pause(loadCtx, o.Duration)
	n1, cpu1, t1 := done.Load(), e.proxyCPU(), time.Now()
	load.stop()
	closeAll(conns)
	wg.Wait()
	if load.err != nil {
		return 0, 0, load.err
	}
	if b := bad.Load(); b != 0 {
		return 0, 0, fmt.Errorf("throughput: %d responses without a result", b)
	}
	n := float64(n1 - n0)
	if n <= 0 {
		return 0, 0, errors.New("throughput: nothing answered")
	}
	perSec = n / t1.Sub(t0).Seconds()
	if e.proxy != nil {
		cpuPerM = (cpu1 - cpu0).Seconds() / n * 1e6
	}
	return perSec, cpuPerM, nil
}

func (e *env) proxyCPU() time.Duration {
	if e.proxy == nil {
		return 0
	}
	d, _ := e.proxy.cpu()
	return d
}

// ---- (d) fan-out --------------------------------------------------------

var subscribeNewHeads = []byte(`{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}`)

// subscribeMany opens n sockets and subscribes each to newHeads (the same
// parameters, so muxd holds one upstream subscription for all). Each
// socket then gets a reader goroutine, counted in wg, that passes every
// message it reads to onPush (the message is only valid during the call)
// until the socket is closed.
func subscribeMany(ctx context.Context, url string, n int, wg *sync.WaitGroup, onPush func(msg []byte)) ([]*websocket.Conn, error) {
	return subscribeEach(ctx, url, n, wg, func(_ int, _ *websocket.Conn, msg []byte) { onPush(msg) })
}

// subscribeEach is subscribeMany with onMsg told which socket (its index
// and itself) read the message; onMsg runs on that socket's reader
// goroutine, the only one that calls it for that socket.
func subscribeEach(ctx context.Context, url string, n int, wg *sync.WaitGroup, onMsg func(i int, c *websocket.Conn, msg []byte)) ([]*websocket.Conn, error) {
	return dialMany(ctx, url, n, func(i int, c *websocket.Conn) error {
		if err := c.Write(ctx, websocket.MessageText, subscribeNewHeads); err != nil {
			return err
		}
		_, msg, err := c.Read(ctx)
		if err != nil {
			return err
		}
		if !bytes.Contains(msg, resultKey) {
			return fmt.Errorf("subscribe: %.200s", msg)
		}
		wg.Go(func() {
			var buf bytes.Buffer
			for {
				if _, err := readInto(c, &buf); err != nil {
					return // closed by closeAll
				}
				onMsg(i, c, buf.Bytes())
			}
		})
		return nil
	})
}

// runFanout subscribes n clients to newHeads, has the upstream push
// o.Pushes notifications one at a time, and returns the p50/p99 (ms) of the
// time from the upstream's write (its wall-clock stamp in the payload) until
// the last of the n clients has read it.
func runFanout(ctx context.Context, e *env, o Options, n int) (p50, p99 float64, err error) {
	warm := 2
	total := o.Pushes + warm
	cnt := make([]atomic.Int64, total)
	last := make([]atomic.Int64, total)
	stamp := make([]atomic.Int64, total)
	all := make([]chan struct{}, total)
	for i := range all {
		all[i] = make(chan struct{})
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	var stray atomic.Int64
	conns, err := subscribeMany(ctx, e.target, n, &wg, func(msg []byte) {
		at := time.Now().UnixNano()
		seq, ts, ok := parsePush(msg)
		if !ok || seq < 0 || seq >= total {
			stray.Add(1)
			return
		}
		stamp[seq].Store(ts)
		for {
			old := last[seq].Load()
			if at <= old || last[seq].CompareAndSwap(old, at) {
				break
			}
		}
		if cnt[seq].Add(1) == int64(n) {
			close(all[seq])
		}
	})
	if err != nil {
		return 0, 0, err
	}
	defer closeAll(conns)
	var lats []float64
	for seq := range total {
		var pr pushReply
		if err := ctlGet(ctx, e.upstream, "/ctl/push?seq="+strconv.Itoa(seq), &pr); err != nil {
			return 0, 0, err
		}
		select {
		case <-all[seq]:
		case <-time.After(30 * time.Second):
			return 0, 0, fmt.Errorf("fan-out: push %d reached %d of %d clients in 30s", seq, cnt[seq].Load(), n)
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
		if seq >= warm {
			lats = append(lats, float64(last[seq].Load()-stamp[seq].Load())/1e6)
		}
		time.Sleep(o.PushGap)
	}
	if s := stray.Load(); s > 0 {
		return 0, 0, fmt.Errorf("fan-out: %d unexpected messages", s)
	}
	slices.Sort(lats)
	return percentile(lats, 0.50), percentile(lats, 0.99), nil
}

var (
	seqKey = []byte(`"bench_seq":`)
	tsKey  = []byte(`"bench_ts":`)
)

func parsePush(msg []byte) (seq int, ts int64, ok bool) {
	i := bytes.Index(msg, seqKey)
	if i < 0 {
		return 0, 0, false
	}
	rest := msg[i+len(seqKey):]
	j := bytes.IndexByte(rest, ',')
	if j < 0 {
		return 0, 0, false
	}
	s, err := strconv.Atoi(string(rest[:j]))
	if err != nil {
		return 0, 0, false
	}
	rest = rest[j+1:]
	if !bytes.HasPrefix(rest, tsKey) || len(rest) < len(tsKey)+tsWidth {
		return 0, 0, false
	}
	t, err := strconv.ParseInt(string(rest[len(tsKey):len(tsKey)+tsWidth]), 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return s, t, true
}

// ---- (e) idle clients ------------------------------------------------------

// runIdle opens n idle sockets and returns the proxy's RSS growth per client
// in KiB.
func runIdle(ctx context.Context, e *env, o Options, n int) (float64, error) {
	time.Sleep(o.Settle / 2)
	before, err := e.proxy.rssKiB()
	if err != nil {
		return 0, err
	}
	conns, err := dialMany(ctx, e.target, n, nil)
	if err != nil {
		return 0, err
	}
	defer closeAll(conns)
	if e.mode == "relay" {
		// every relay session has dialled its upstream socket
		deadline := time.Now().Add(30 * time.Second)
		for {
			st, err := upstreamStatsOf(ctx, e.upstream)
			if err != nil {
				return 0, err
			}
			if st.Current >= int64(n) {
				break
			}
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("idle: relay has %d of %d upstream sockets", st.Current, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	time.Sleep(o.Settle)
	after, err := e.proxy.rssKiB()
	if err != nil {
		return 0, err
	}
	return float64(after-before) / float64(n), nil
}

// ---- (f) a probe client under fan-out; fan-out at saturation -------------

// appendChainID appends an eth_chainId request with the given id.
func appendChainID(b []byte, id int64) []byte {
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = strconv.AppendInt(b, id, 10)
	return append(b, `,"method":"eth_chainId","params":[]}`...)
}

// probeFigures are the figures of one (f) measurement.
type probeFigures struct {
	p99Ratio, maxRatio float64 // the probe's round trip under fan-out / quiet
	deliveriesPerSec   float64 // at saturation
}

// runProbe subscribes n clients to newHeads (through muxd, one shared
// upstream subscription) and opens one probe client that sends eth_chainId
// one request at a time. After o.Warmup, the probe's round trips are
// measured for o.ProbeWindow in all with no pushes (quiet), and for as long
// while the upstream pushes a 2 KB notification every o.ProbeEvery, each of
// which must reach every subscriber; the figures are the p99 and max under
// fan-out over those when quiet. Last, the upstream is kept o.Ahead pushes
// ahead of the subscribers (the proxy always has a backlog) and the
// deliveries they read during o.Duration, after o.Warmup, are counted.
func runProbe(ctx context.Context, e *env, o Options, n int) (probeFigures, error) {
	var f probeFigures
	var wg sync.WaitGroup
	defer wg.Wait()
	var stray atomic.Int64
	p := &pusher{upstream: e.upstream, subs: int64(n), step: make(chan struct{}, 1)}
	conns, err := subscribeMany(ctx, e.target, n, &wg, func(msg []byte) {
		if _, _, ok := parsePush(msg); !ok {
			stray.Add(1)
			return
		}
		p.delivered()
	})
	if err != nil {
		return f, err
	}
	defer closeAll(conns)
	probe, err := dialWS(ctx, e.target)
	if err != nil {
		return f, err
	}
	defer probe.CloseNow()

	// Quiet and fan-out alternate in slices of about two push intervals, so
	// that load from outside the bench that comes and goes weighs on both
	// alike; a quiet slice starts once the last push has reached everyone.
	parts := max(1, int(o.ProbeWindow/(2*o.ProbeEvery)))
	slice := o.ProbeWindow / time.Duration(parts)
	var quiet, busy []float64
	warmEnd := time.Now().Add(o.Warmup)
	for range parts {
		start := time.Now()
		if start.Before(warmEnd) {
			start = warmEnd
		}
		q, err := roundTrips(ctx, probe, appendChainID, warmEnd, start.Add(slice))
		if err != nil {
			return f, fmt.Errorf("probe, quiet: %w", err)
		}
		stopPushing := inBackground(ctx, p.every(o.ProbeEvery))
		start = time.Now()
		b, err := roundTrips(ctx, probe, appendChainID, start, start.Add(slice))
		if stopErr := stopPushing(); err == nil {
			err = stopErr
		}
		if err == nil {
			err = p.caughtUp(ctx, 0)
		}
		if err != nil {
			return f, fmt.Errorf("probe, under fan-out: %w", err)
		}
		quiet, busy = append(quiet, q...), append(busy, b...)
	}
	slices.Sort(quiet)
	slices.Sort(busy)
	f.p99Ratio = percentile(busy, 0.99) / percentile(quiet, 0.99)
	f.maxRatio = busy[len(busy)-1] / quiet[len(quiet)-1]

	stopPushing := inBackground(ctx, p.ahead(o.Ahead))
	pause(ctx, o.Warmup)
	d0, t0 := p.count.Load(), time.Now()
	pause(ctx, o.Duration)
	d1, t1 := p.count.Load(), time.Now()
	if err := stopPushing(); err != nil {
		return f, fmt.Errorf("fan-out at saturation: %w", err)
	}
	if s := stray.Load(); s > 0 {
		return f, fmt.Errorf("probe: %d unexpected messages to subscribers", s)
	}
	f.deliveriesPerSec = float64(d1-d0) / t1.Sub(t0).Seconds()
	return f, nil
}

// pusher has the upstream push to subs subscribers and follows their
// deliveries.
type pusher struct {
	upstream *child
	subs     int64
	pushed   int64 // owned by the one goroutine pushing at a time
	count    atomic.Int64
	step     chan struct{} // nudged whenever count reaches a multiple of subs
}

// delivered counts one push read by a subscriber (from its reader).
func (p *pusher) delivered() {
	if p.count.Add(1)%p.subs == 0 {
		select {
		case p.step <- struct{}{}:
		default:
		}
	}
}

// push has the upstream push once. A push once asked for is not given up
// when ctx ends (ctlClient's timeout still holds), so that pushed counts
// exactly the pushes made.
func (p *pusher) push(ctx context.Context) error {
	var pr pushReply
	if err := ctlGet(context.WithoutCancel(ctx), p.upstream, "/ctl/push?seq="+strconv.FormatInt(p.pushed, 10), &pr); err != nil {
		return err
	}
	p.pushed++
	return nil
}

// caughtUp waits until the subscribers have read all but ahead of the
// pushes made.
func (p *pusher) caughtUp(ctx context.Context, ahead int) error {
	want := (p.pushed - int64(ahead)) * p.subs
	for {
		got := p.count.Load()
		if got >= want {
			return nil
		}
		select {
		case <-p.step:
		case <-time.After(30 * time.Second):
			return fmt.Errorf("fan-out stalled: %d of %d deliveries read, and not %d more in 30s", got, want, p.subs)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// every pushes at once and then every d, until ctx ends.
func (p *pusher) every(d time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			if err := p.push(ctx); err != nil {
				return err
			}
			select {
			case <-t.C:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// ahead pushes whenever the subscribers have read all but n of the pushes,
// until ctx ends.
func (p *pusher) ahead(n int) func(context.Context) error {
	return func(ctx context.Context) error {
		for ctx.Err() == nil {
			if err := p.caughtUp(ctx, n); err != nil {
				return err
			}
			if err := p.push(ctx); err != nil {
				return err
			}
		}
		return nil
	}
}

// inBackground runs fn in a goroutine until the returned stop cancels it;
// stop returns fn's error unless it is that cancellation.
func inBackground(ctx context.Context, fn func(context.Context) error) (stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	return func() error {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}
}

// ---- (g) large answers ----------------------------------------------------

// appendLarge appends a bench_large request for an answer of about size
// bytes.
func appendLarge(b []byte, id int64, size int) []byte {
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, `,"method":"`+largeMethod+`","params":[`...)
	b = strconv.AppendInt(b, int64(size), 10)
	return append(b, "]}"...)
}

// largeFigures are the figures of one (g) measurement.
type largeFigures struct {
	mbps      float64 // answer bytes per second, in MB (10^6)
	cpuPerGB  float64 // proxy CPU seconds per GB (10^9) of answers
	peakRSSMB float64 // the proxy's peak RSS (VmHWM), MiB
}

// runLarge runs o.LargeClients clients with one bench_large request of size
// outstanding each. Every answer is checked: its own id back and the whole
// body, by length.
func runLarge(ctx context.Context, e *env, o Options, size int) (largeFigures, error) {
	var f largeFigures
	conns, err := dialMany(ctx, e.target, o.LargeClients, nil)
	if err != nil {
		return f, err
	}
	defer closeAll(conns)
	load := newLoad(ctx)
	defer load.stop()
	loadCtx, fail := load.ctx, load.fail
	var bytesIn atomic.Int64
	var wg sync.WaitGroup
	bodyLen := len(largeBody(size)) // built here, not during the measurement
	for _, c := range conns {
		wg.Go(func() {
			var req []byte
			var buf bytes.Buffer
			var want []byte
			for id := int64(1); loadCtx.Err() == nil; id++ {
				req = appendLarge(req[:0], id, size)
				if err := c.Write(context.Background(), websocket.MessageText, req); err != nil {
					fail(err)
					return
				}
				if _, err := readInto(c, &buf); err != nil {
					fail(err)
					return
				}
				want = strconv.AppendInt(append(want[:0], `{"jsonrpc":"2.0","id":`...), id, 10)
				got := buf.Bytes()
				if !bytes.HasPrefix(got, want) || len(got) != len(want)+bodyLen || !bytes.HasPrefix(got[len(want):], []byte(`,"result":[`)) {
					fail(fmt.Errorf("large: bad answer to id %d: %d bytes, want %d: %.80s", id, len(got), len(want)+bodyLen, got))
					return
				}
				bytesIn.Add(int64(len(got)))
			}
		})
	}
	pause(loadCtx, o.Warmup)
	n0, cpu0, t0 := bytesIn.Load(), e.proxyCPU(), time.Now()
	pause(loadCtx, o.Duration)
	n1, cpu1, t1 := bytesIn.Load(), e.proxyCPU(), time.Now()
	if e.proxy != nil {
		hwm, err := e.proxy.peakRSSKiB()
		if err != nil {
			return f, err
		}
		f.peakRSSMB = float64(hwm) / 1024
	}
	load.stop()
	closeAll(conns)
	wg.Wait()
	if load.err != nil {
		return f, load.err
	}
	n := float64(n1 - n0)
	if n <= 0 {
		return f, errors.New("large: nothing answered")
	}
	f.mbps = n / 1e6 / t1.Sub(t0).Seconds()
	if e.proxy != nil {
		f.cpuPerGB = (cpu1 - cpu0).Seconds() / n * 1e9
	}
	return f, nil
}
