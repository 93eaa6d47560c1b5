package core

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/muxd/muxd/router"
)

// This file is the test harness of the core: a Core with a fixed config,
// a fixed clock, deterministic subscription ids and a recording Observer,
// driven by scripts of steps whose expected effects are written out as the
// bytes each party gets. The scripts themselves are text, in
// testdata/*.txt, played by TestScripts (script_test.go).

// Short durations for step times.
const (
	msec = time.Millisecond
	sec  = time.Second
)

// t0 is the harness's epoch: step times are offsets from it.
var t0 = time.Unix(1_700_000_000, 0)

// testConfig is the config of every harness unless a row changes it:
// limits small enough for a table row to reach.
func testConfig() Config {
	return Config{
		RequestTimeout:   10 * time.Second,
		UpstreamWait:     5 * time.Second,
		UpstreamMaxBatch: 3,
		MaxBatch:         6,
		MaxInFlight:      4,
		MaxHeldBytes:     1000,
		MaxSubscriptions: 2,
		MaxClients:       3,
		MaxWaiting:       3,
		HeldPushBytes:    200,
		DenyMethods:      DefaultDenyMethods,
		RetryMethods:     DefaultRetryMethods,
	}
}

// recorder is an Observer that counts every call by a readable name, and
// keeps the in-flight gauge and the last subscription gauges.
type recorder struct {
	counts     map[string]int
	inflight   int
	upSubs     int
	clientSubs int
	durations  int
}

func newRecorder() *recorder { return &recorder{counts: map[string]int{}} }

func (r *recorder) Request(method string) { r.counts["request "+method]++ }
func (r *recorder) Answered(method string, code int, o Outcome, latency time.Duration) {
	who := "upstream"
	if latency < 0 {
		who = "muxd"
	}
	r.counts["answered "+strconv.Itoa(code)+" "+who]++
	r.counts["outcome "+method+" "+o.String()]++
}
func (r *recorder) RoundTrip(gen uint64, d time.Duration) {
	r.counts["round trip "+strconv.FormatUint(gen, 10)]++
	r.counts["round trip ms"] += int(d / time.Millisecond)
}
func (r *recorder) Limit(name string)                   { r.counts["limit "+name]++ }
func (r *recorder) Dropped(d DropReason)                { r.counts["dropped "+d.String()]++ }
func (r *recorder) InFlight(delta int)                  { r.inflight += delta }
func (r *recorder) Retried(n int)                       { r.counts["retried"] += n }
func (r *recorder) Subscriptions(up, cl int)            { r.upSubs, r.clientSubs = up, cl }
func (r *recorder) Pushed(n int)                        { r.counts["pushed"] += n }
func (r *recorder) Backfilled(kind string, n int)       { r.counts["backfilled "+kind] += n }
func (r *recorder) HistoryDelivered(kind string, n int) { r.counts["history "+kind] += n }
func (r *recorder) HistoryRequests(n int)               { r.counts["history requests"] += n }
func (r *recorder) HistoryRefused(reason string)        { r.counts["history refused "+reason]++ }
func (r *recorder) BackfillGap(kind, reason string) {
	r.counts["gap "+kind+" "+reason]++
}
func (r *recorder) BackfillDuration(time.Duration) { r.durations++ }
func (r *recorder) Coalesced(method string)        { r.counts["coalesced "+method]++ }
func (r *recorder) CacheHit(method string)         { r.counts["cache hit "+method]++ }
func (r *recorder) CacheMiss(method string)        { r.counts["cache miss "+method]++ }
func (r *recorder) CacheEvicted(method string)     { r.counts["cache evicted "+method]++ }
func (r *recorder) CacheBytes(int)                 {}
func (r *recorder) Orphaned(n int)                 { r.counts["orphaned"] = n } // a gauge: the last value
func (r *recorder) FairQueued(time.Duration)       { r.counts["fair queued"]++ }
func (r *recorder) Throttled(uint64)               { r.counts["throttled"]++ }

// harness drives one Core. now only moves when a step says so; the core
// never reads a clock.
type harness struct {
	t    *testing.T
	c    *Core
	obs  *recorder
	e    Effects
	now  time.Time
	gen  uint64
	subN int
	seq  map[router.ClientID]uint64 // the last Seq seen per client
	msgs []router.Message
	// where, when set, names step i's place in a testdata file.
	where func(i int) string
	// got, when not nil, takes what each step did instead of comparing
	// it (TestScripts -update).
	got []stepGot
}

// newHarness returns a harness over testConfig changed by mod (nil: none).
func newHarness(t *testing.T, mod func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t, obs: newRecorder(), now: t0, seq: map[router.ClientID]uint64{}}
	cfg := testConfig()
	cfg.Observer = h.obs
	cfg.NewSubscriptionID = func() string {
		h.subN++
		return `"0xs` + strconv.Itoa(h.subN) + `"`
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	return h
}

// join opens a session and fails the test if it cannot.
func (h *harness) join(http bool) router.ClientID {
	h.t.Helper()
	id, err := h.c.Join(http)
	if err != nil {
		h.t.Fatalf("join: %v", err)
	}
	return id
}

// clientFrame scans frame as the shell does and feeds it from client id.
// It returns the rendered effects, with "no answer" last when ClientFrame
// reports that none will come.
func (h *harness) clientFrame(id router.ClientID, frame string) []string {
	h.t.Helper()
	buf := []byte(frame)
	f, err := router.ScanClient(buf, h.msgs)
	h.msgs = f.Messages
	answers := h.c.ClientFrame(&h.e, id, buf, f, err, h.now)
	out := h.render(buf)
	if !answers {
		out = append(out, "no answer")
	}
	return out
}

// upstreamFrame scans frame as the shell does and feeds it as read from
// connection gen (0: the current one). head routes it by its head, as the
// shell does a large answer.
func (h *harness) upstreamFrame(gen uint64, frame string, head bool) []string {
	h.t.Helper()
	if gen == 0 {
		gen = h.gen
	}
	buf := []byte(frame)
	var (
		f   router.Frame
		err error
	)
	if head {
		m, ok := router.ScanResponseHead(buf)
		if !ok {
			h.t.Fatalf("ScanResponseHead refused %s", frame)
		}
		f = router.Frame{Messages: append(h.msgs[:0], m)}
	} else {
		f, err = router.ScanUpstream(buf, h.msgs)
	}
	h.msgs = f.Messages
	h.c.UpstreamFrame(&h.e, gen, buf, f, err, h.now)
	return h.render(buf)
}

// connect makes a new connection current.
func (h *harness) connect() []string {
	h.gen++
	h.c.UpstreamConnected(&h.e, h.gen, h.now)
	if h.e.Gen != h.gen {
		h.t.Errorf("UpstreamConnected: Effects.Gen %d, want %d", h.e.Gen, h.gen)
	}
	return h.render(nil)
}

// render turns h.e into lines, in the order the shell applies them:
//
//	c<N>< <bytes>   a delivery to client N, spliced as the shell does
//	slow c<N>       client N cut as a slow consumer
//	up> <frame>     a frame written upstream
//	drop <reason>   a dropped message
//	close <gen>     connection gen to be closed (drained)
//	idle            nothing is owed any more (shutting down)
//
// It checks what every event must keep: each client's deliveries are
// numbered 1, 2, 3, … across events; a borrowed delivery lies in frame at
// Off; upstream frames are for the current connection. Then it overwrites
// frame, as the shell's reader reuses its buffer, so that a later step
// catches any reference the core kept to it.
func (h *harness) render(frame []byte) []string {
	h.t.Helper()
	var out []string
	for _, d := range h.e.Deliveries {
		if d.Seq != h.seq[d.Client]+1 {
			h.t.Errorf("delivery to c%d has Seq %d, want %d", d.Client, d.Seq, h.seq[d.Client]+1)
		}
		h.seq[d.Client] = d.Seq
		if d.Borrowed {
			if frame == nil || d.Off+len(d.Msg) > len(frame) || &frame[d.Off] != &d.Msg[0] {
				h.t.Errorf("delivery to c%d is Borrowed but does not lie in the frame at Off %d", d.Client, d.Off)
			}
		}
		msg := d.Msg
		if d.ID != nil {
			msg = router.AppendSpliced(nil, d.Msg, d.At, d.ID)
		}
		// The shell bounds pushes apart from answers (Delivery.Push).
		push := bytes.Contains(msg, []byte(`"method":"eth_subscription"`)) || bytes.Contains(msg, []byte(`"method":"`+GapNoticeMethod+`"`))
		if push != d.Push {
			h.t.Errorf("delivery to c%d has Push %v: %s", d.Client, d.Push, msg)
		}
		out = append(out, fmt.Sprintf("c%d< %s", d.Client, msg))
	}
	for _, id := range h.e.Slow {
		out = append(out, fmt.Sprintf("slow c%d", id))
	}
	if len(h.e.Upstream) > 0 && h.e.Gen != h.gen {
		h.t.Errorf("upstream frames for connection %d, current is %d", h.e.Gen, h.gen)
	}
	for _, f := range h.e.Upstream {
		out = append(out, "up> "+string(f))
	}
	for _, n := range h.e.Notes {
		if n.Drop {
			out = append(out, "drop "+n.Reason.String())
		}
	}
	for _, g := range h.e.Close {
		out = append(out, fmt.Sprintf("close %d", g))
	}
	if h.e.Idle {
		out = append(out, "idle")
	}
	for i := range frame {
		frame[i] = '#'
	}
	return out
}

// step is one event of a script. do names the event:
//
//	join, join http     Join (want: nothing, or "err <error>")
//	c<N>                a client frame from client N (in)
//	refuse c<N>         Refuse for client N with "message too large"
//	gone c<N>           ClientGone
//	connect             UpstreamConnected with the next gen
//	switch              UpstreamSwitch to the next gen
//	lost                UpstreamLost of the current gen
//	lost <gen>          UpstreamLost of that gen
//	up                  an upstream frame on the current connection (in)
//	up <gen>            an upstream frame on connection gen (in)
//	uphead              a large answer routed by its head (in)
//	tick                Tick
//	reached             Dialing(true): a dial is at a node
//	unreached           Dialing(false)
//	away                DialsFailed at the step's time
//	begin               BeginShutdown ("idle" when it reports idle)
//	shutdown            Shutdown with "upstream unavailable (shutdown)"
//
// at, when not zero, moves the clock to t0+at first.
type step struct {
	do   string
	in   string
	at   time.Duration
	want []string
	// counts, when set, are observer counts the step must have left.
	counts map[string]int
	// keys, when not nil, are the subscription keys the step must have
	// left, as keyStates renders them.
	keys []string
}

// run plays steps on h, comparing each step's effects with its want.
func (h *harness) run(steps []step) {
	h.t.Helper()
	for i, s := range steps {
		if s.at != 0 {
			h.now = t0.Add(s.at)
		}
		got := h.step(s)
		at := fmt.Sprintf("step %d", i)
		if h.where != nil {
			at = h.where(i)
		}
		h.checkHistoryPace(at)
		if h.got != nil {
			g := stepGot{effects: got, counts: map[string]int{}}
			if s.keys != nil {
				g.keys = h.keyStates()
			}
			for name := range s.counts {
				g.counts[name] = h.obs.counts[name]
			}
			h.got[i] = g
			continue
		}
		if !slices.Equal(got, s.want) {
			h.t.Errorf("%s (%s %s):\n got: %s\nwant: %s", at, s.do, s.in, lines(got), lines(s.want))
		}
		if s.keys != nil {
			if got := h.keyStates(); !slices.Equal(got, s.keys) {
				h.t.Errorf("%s (%s): keys %q, want %q", at, s.do, got, s.keys)
			}
		}
		for name, n := range s.counts {
			if h.obs.counts[name] != n {
				h.t.Errorf("%s (%s): count %q is %d, want %d", at, s.do, name, h.obs.counts[name], n)
			}
		}
	}
}

func lines(ls []string) string {
	if len(ls) == 0 {
		return "(nothing)"
	}
	return "\n\t" + strings.Join(ls, "\n\t")
}

// step plays one step and returns its rendered effects.
func (h *harness) step(s step) []string {
	h.t.Helper()
	verb, arg, _ := strings.Cut(s.do, " ")
	switch verb {
	case "join":
		if _, err := h.c.Join(arg == "http"); err != nil {
			return []string{"err " + err.Error()}
		}
		return nil
	case "refuse":
		h.c.Refuse(&h.e, clientArg(h.t, arg), nil, router.ErrorLimit.Because("message too large"))
		return h.render(nil)
	case "gone":
		h.c.ClientGone(&h.e, clientArg(h.t, arg), h.now)
		return h.render(nil)
	case "connect":
		return h.connect()
	case "switch":
		h.gen++
		h.c.UpstreamSwitch(&h.e, h.gen, h.now)
		return h.render(nil)
	case "lost":
		gen := h.gen
		if arg != "" {
			gen = uint64(atoi(h.t, arg))
		}
		h.c.UpstreamLost(&h.e, gen, h.now)
		return h.render(nil)
	case "up":
		var gen uint64
		if arg != "" {
			gen = uint64(atoi(h.t, arg))
		}
		return h.upstreamFrame(gen, s.in, false)
	case "uphead":
		return h.upstreamFrame(0, s.in, true)
	case "toolarge":
		// toolarge UID [array]: an answer past the shell's read limit.
		uid, array, _ := strings.Cut(arg, " ")
		h.c.UpstreamTooLarge(&h.e, h.gen, uint64(atoi(h.t, uid)), array == "array", h.now)
		return h.render(nil)
	case "tick":
		h.c.Tick(&h.e, h.now)
		return h.render(nil)
	case "reached", "unreached":
		h.c.Dialing(verb == "reached")
		return nil
	case "away":
		h.c.DialsFailed(&h.e, h.now, h.now)
		return h.render(nil)
	case "begin":
		if h.c.BeginShutdown() {
			return []string{"idle"}
		}
		return nil
	case "shutdown":
		n := h.c.Shutdown(&h.e, router.ErrorUnavailable.Because("shutdown"), h.now)
		return append(h.render(nil), fmt.Sprintf("answered %d", n))
	}
	if strings.HasPrefix(s.do, "c") {
		return h.clientFrame(clientArg(h.t, s.do), s.in)
	}
	h.t.Fatalf("unknown step %q", s.do)
	return nil
}

func clientArg(t *testing.T, s string) router.ClientID {
	t.Helper()
	return router.ClientID(atoi(t, strings.TrimPrefix(s, "c")))
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("bad number %q in a step", s)
	}
	return n
}

// heldSum is the sum of the bytes held for each client.
func heldSum(h *harness) (sum int) {
	for _, cl := range h.c.clients {
		sum += cl.held
	}
	return sum
}

// checkHistoryPace checks histpace.go's bound after every step: at most
// historyInFlight history requests at the node, each of them in the
// pending table.
func (h *harness) checkHistoryPace(at string) {
	h.t.Helper()
	if n := len(h.c.pace.inFlight); n > historyInFlight {
		h.t.Errorf("%s: %d history requests in flight, more than %d", at, n, historyInFlight)
	}
	for uid := range h.c.pace.inFlight {
		if _, ok := h.c.reqs.Peek(uid); !ok {
			h.t.Errorf("%s: history request %d counted in flight, not in the pending table", at, uid)
		}
	}
}

// checkGauges checks that the observer's gauges agree with the tables. It
// empties the pending table to count it: call it last.
func (h *harness) checkGauges() {
	h.t.Helper()
	s := h.c.Stats()
	// The bytes held for all clients are the sum of each client's.
	if sum := heldSum(h); h.c.held != sum {
		h.t.Errorf("bytes held for all clients %d, sum of the clients' %d", h.c.held, sum)
	}
	// Every request in flight or waiting is counted once in the gauge:
	// clients' (InFlight) and muxd's own (the rest of the tables).
	own := 0
	h.c.reqs.Discard(func(_ uint64, p router.Pending) {
		if p.Client == router.Internal {
			own++
		}
	})
	for _, w := range h.c.waiting.items {
		if w.p.Client == router.Internal {
			own++
		}
	}
	if want := s.InFlight + own; h.obs.inflight != want {
		h.t.Errorf("in-flight gauge %d, want %d (clients %d + muxd's own %d)", h.obs.inflight, want, s.InFlight, own)
	}
	if s.Orphaned != h.obs.counts["orphaned"] {
		h.t.Errorf("orphaned-calls gauge %d, table %d", h.obs.counts["orphaned"], s.Orphaned)
	}
	if s.UpstreamSubs != h.obs.upSubs || s.ClientSubs != h.obs.clientSubs {
		h.t.Errorf("subscription gauges %d/%d, tables %d/%d", h.obs.upSubs, h.obs.clientSubs, s.UpstreamSubs, s.ClientSubs)
	}
}

// keyStates renders the subscription table's keys, sorted, as
// "key state members".
func (h *harness) keyStates() []string {
	out := []string{}
	for key, sh := range h.c.subs.byKey {
		out = append(out, fmt.Sprintf("%s %s %d", key, sh.state, len(sh.members)))
	}
	slices.Sort(out)
	return out
}

// withoutCounts returns steps with no observer counts to check.
func withoutCounts(steps []step) []step {
	out := slices.Clone(steps)
	for i := range out {
		out[i].counts = nil
	}
	return out
}

// req is a request of client id (raw JSON) for method, with no params.
func req(id, method string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"` + method + `"}`
}

// res is an answer with id (raw JSON) and result (raw JSON).
func res(id, result string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"result":` + result + `}`
}
