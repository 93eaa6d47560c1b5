// Command bench measures muxd side by side with clients connected straight
// to the upstream (direct) and with a dumb 1:1 WebSocket relay (the
// baseline: the floor any proxy pays for the extra hop), against the same
// fast upstream, on loopback.
//
//	go run ./integration/bench                 # full suite, table on stdout
//	go run ./integration/bench -smoke          # tiny sizes, seconds (CI)
//	go run ./integration/bench -json -out r.json
//	go run ./integration/bench -out docs/bench.json -chart docs/bench.svg
//	go run ./integration/bench -replot docs/bench.json -chart docs/bench.svg
//	go run ./integration/bench -check          # exit 1 if a target is missed
//
// The upstream, the relay and muxd each run as a child process (this binary
// re-executed with -role), so the CPU (utime+stime from /proc/<pid>/stat)
// and RSS (VmRSS) figures are the proxy process's own; the load-generating
// clients run in this process. Every measurement gets a fresh upstream and
// proxy; the upstream counts the WebSocket connections it accepted.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Options sizes a run.
type Options struct {
	Reps        int
	Duration    time.Duration // per throughput/latency measurement
	Warmup      time.Duration
	Clients     int // (b), (c)
	Window      int // outstanding messages per client
	Batch       int // (c)
	FanoutSizes []int
	Pushes      int // measured pushes per fan-out measurement
	PushGap     time.Duration
	Idle        int // (e)
	Settle      time.Duration
	// ProbeSubs subscribers share one subscription in (f) while a probe
	// client measures its round trips, quiet and then with a push every
	// ProbeEvery, each for ProbeWindow; at saturation the upstream stays
	// Ahead pushes ahead of the subscribers.
	ProbeSubs   int
	ProbeEvery  time.Duration
	ProbeWindow time.Duration
	Ahead       int
	// LargeSizes are the answer sizes of (g), in bytes; LargeClients
	// each keep one request outstanding.
	LargeSizes   []int
	LargeClients int
	// HeadClients clients in (h) each send three reads on every one of
	// Heads new heads (per phase) to a node that answers in NodeDelay.
	HeadClients int
	Heads       int
	NodeDelay   time.Duration
	Smoke       bool
	Only        string    // workloads to run, e.g. "b,c" or "d"; "" runs all
	Progress    io.Writer // nil: quiet
}

func fullOptions() Options {
	return Options{
		Reps: 3, Duration: 1500 * time.Millisecond, Warmup: 300 * time.Millisecond,
		Clients: 100, Window: 8, Batch: 10,
		FanoutSizes: []int{1000, 10000}, Pushes: 40, PushGap: 5 * time.Millisecond,
		Idle: 10000, Settle: time.Second,
		ProbeSubs: 10000, ProbeEvery: 500 * time.Millisecond, ProbeWindow: 5 * time.Second, Ahead: 16,
		LargeSizes: []int{1e6, 8e6, 32e6}, LargeClients: 10,
		HeadClients: 100, Heads: 20, NodeDelay: 20 * time.Millisecond,
	}
}

func smokeOptions() Options {
	return Options{
		Reps: 1, Duration: time.Second, Warmup: 100 * time.Millisecond,
		Clients: 10, Window: 8, Batch: 10,
		FanoutSizes: []int{50, 100}, Pushes: 10, PushGap: time.Millisecond,
		Idle: 200, Settle: 200 * time.Millisecond,
		ProbeSubs: 200, ProbeEvery: 100 * time.Millisecond, ProbeWindow: 500 * time.Millisecond, Ahead: 16,
		LargeSizes: []int{64e3, 1e6}, LargeClients: 10,
		HeadClients: 10, Heads: 3, NodeDelay: 20 * time.Millisecond, Smoke: true,
	}
}

var modes = []string{"direct", "relay", "muxd"}

// Row is one figure.
type Row struct {
	Key      string `json:"key"`
	Workload string `json:"workload"`
	Name     string `json:"name"`
	Unit     string `json:"unit"`
	// Better is "lower" or "higher".
	Better string `json:"better"`
	// Median over the repetitions, per mode; absent where the figure does
	// not apply (no proxy process in direct mode).
	Value   map[string]float64   `json:"value"`
	Samples map[string][]float64 `json:"samples"`
	// MuxdRelay and MuxdDirect are muxd's median divided by the other's.
	MuxdRelay  *float64 `json:"muxd_relay,omitempty"`
	MuxdDirect *float64 `json:"muxd_direct,omitempty"`
	Target     string   `json:"target,omitempty"`
	TargetMet  *bool    `json:"target_met,omitempty"`
	// UpstreamConns is the number of WebSocket connections the upstream
	// accepted during the measurement (max over the repetitions).
	UpstreamConns map[string]int64 `json:"upstream_conns"`

	// Goal is the target in numbers (the chart draws it).
	Goal *goal `json:"goal,omitempty"`
}

// Report is the whole run.
type Report struct {
	Started     time.Time `json:"started"`
	ElapsedSec  float64   `json:"elapsed_s"`
	GoVersion   string    `json:"go_version"`
	NumCPU      int       `json:"num_cpu"`
	GOMAXPROCS  int       `json:"gomaxprocs"`
	NofileLimit uint64    `json:"nofile_limit"`
	// TCPCongestion is the host's TCP congestion control (Linux), which
	// every socket of the run uses. It moves (g): under bbr one loopback
	// flow is slower than under cubic, and muxd's upstream is one flow
	// where the relay's are ten (see docs/limits.md).
	TCPCongestion string `json:"tcp_congestion_control,omitempty"`
	Options       struct {
		Reps         int     `json:"reps"`
		DurationSec  float64 `json:"duration_s"`
		Clients      int     `json:"clients"`
		Window       int     `json:"window"`
		Batch        int     `json:"batch"`
		FanoutSizes  []int   `json:"fanout_sizes"`
		Pushes       int     `json:"pushes"`
		Idle         int     `json:"idle"`
		ProbeSubs    int     `json:"probe_subs"`
		ProbeEveryMS float64 `json:"probe_every_ms"`
		ProbeWindowS float64 `json:"probe_window_s"`
		Ahead        int     `json:"ahead"`
		LargeSizes   []int   `json:"large_sizes"`
		LargeClients int     `json:"large_clients"`
		HeadClients  int     `json:"head_clients"`
		Heads        int     `json:"heads"`
		NodeDelayMS  float64 `json:"node_delay_ms"`
		Smoke        bool    `json:"smoke"`
	} `json:"options"`
	Rows  []*Row   `json:"rows"`
	Notes []string `json:"notes,omitempty"`
}

// goal is a target (from the project's performance issue): a limit on muxd's figure, either as a
// multiple of the relay's (relative) or in the row's unit.
type goal struct {
	Limit    float64 `json:"limit"`
	Higher   bool    `json:"higher,omitempty"` // the figure must be at least Limit
	Relative bool    `json:"relative,omitempty"`
	Unit     string  `json:"unit,omitempty"`
}

func ratioTarget(limit float64, higher bool) *goal {
	return &goal{Limit: limit, Higher: higher, Relative: true}
}

func absTarget(limit float64, unit string) *goal { return &goal{Limit: limit, Unit: unit} }

func (g *goal) String() string {
	op := "<="
	if g.Higher {
		op = ">="
	}
	if g.Relative {
		return fmt.Sprintf("muxd/relay %s %.2f", op, g.Limit)
	}
	return fmt.Sprintf("muxd %s %g %s", op, g.Limit, g.Unit)
}

// met reports whether r meets the goal; nil when muxd (or, for a relative
// goal, the relay) has no figure.
func (g *goal) met(r *Row) *bool {
	v, ok := r.Value["muxd"]
	if g.Relative {
		if r.MuxdRelay == nil {
			return nil
		}
		v, ok = *r.MuxdRelay, true
	}
	if !ok {
		return nil
	}
	m := v <= g.Limit
	if g.Higher {
		m = v >= g.Limit
	}
	return &m
}

// ratio is the goal as a multiple of the relay's figure (for the chart).
func (g *goal) ratio(r *Row) (float64, bool) {
	if g.Relative {
		return g.Limit, true
	}
	rv := r.Value["relay"]
	return g.Limit / rv, rv != 0
}

// measurement is one workload run in one mode, producing figures by key.
type measurement struct {
	workload string
	modes    []string
	run      func(ctx context.Context, e *env) (map[string]float64, error)
}

// runs reports whether workload w (a, b, c, d<n>, e, f, g<size>, h) was asked for.
func (o Options) runs(w string) bool {
	if o.Only == "" {
		return true
	}
	for _, x := range strings.Split(o.Only, ",") {
		if x = strings.TrimSpace(x); x != "" && strings.HasPrefix(w, x) {
			return true
		}
	}
	return false
}

// Run executes the suite.
func Run(ctx context.Context, o Options) (*Report, error) {
	start := time.Now()
	rep := &Report{Started: start, GoVersion: runtime.Version(), NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), TCPCongestion: tcpCongestion()}
	maxN := max(o.Idle, o.ProbeSubs+1)
	for _, n := range o.FanoutSizes {
		maxN = max(maxN, n)
	}
	// Every process holds at most one socket per client, but the relay
	// holds two (its client's and its own upstream socket). Under a low
	// RLIMIT_NOFILE only the relay's count is reduced, and the row says so.
	rep.NofileLimit = raiseNofile(uint64(2*maxN + 4096))
	clientsFor := func(mode string, n int) int {
		per := 1
		if mode == "relay" {
			per = 2
		}
		avail := (int(rep.NofileLimit) - 64) / per
		if n > avail {
			note := fmt.Sprintf("RLIMIT_NOFILE %d (hard limit, could not be raised): the relay (2 sockets per client) ran %d clients where the others ran %d", rep.NofileLimit, avail, n)
			if !slices.Contains(rep.Notes, note) {
				rep.Notes = append(rep.Notes, note)
			}
			return max(avail, 1)
		}
		return n
	}
	relayNote := func(n int) string {
		if r := clientsFor("relay", n); r != n {
			return fmt.Sprintf(" (relay: %d)", r)
		}
		return ""
	}
	rep.Options.Reps, rep.Options.DurationSec = o.Reps, o.Duration.Seconds()
	rep.Options.Clients, rep.Options.Window, rep.Options.Batch = o.Clients, o.Window, o.Batch
	rep.Options.FanoutSizes, rep.Options.Pushes, rep.Options.Idle, rep.Options.Smoke = o.FanoutSizes, o.Pushes, o.Idle, o.Smoke
	rep.Options.LargeSizes, rep.Options.LargeClients = o.LargeSizes, o.LargeClients
	rep.Options.ProbeSubs, rep.Options.ProbeEveryMS = o.ProbeSubs, float64(o.ProbeEvery)/float64(time.Millisecond)
	rep.Options.ProbeWindowS, rep.Options.Ahead = o.ProbeWindow.Seconds(), o.Ahead
	rep.Options.HeadClients, rep.Options.Heads = o.HeadClients, o.Heads
	rep.Options.NodeDelayMS = float64(o.NodeDelay) / float64(time.Millisecond)

	rows := map[string]*Row{}
	addRow := func(r *Row) {
		r.Value, r.Samples, r.UpstreamConns = map[string]float64{}, map[string][]float64{}, map[string]int64{}
		rows[r.Key] = r
		rep.Rows = append(rep.Rows, r)
	}
	addRow(&Row{Key: "a.p50", Workload: "a", Name: "(a) 1 client sequential: latency p50", Unit: "µs", Better: "lower", Goal: ratioTarget(1.15, false)})
	addRow(&Row{Key: "a.p99", Workload: "a", Name: "(a) 1 client sequential: latency p99", Unit: "µs", Better: "lower", Goal: ratioTarget(1.3, false)})
	bName := fmt.Sprintf("(b) %d clients x %d outstanding", o.Clients, o.Window)
	addRow(&Row{Key: "b.rps", Workload: "b", Name: bName + ": throughput", Unit: "req/s", Better: "higher", Goal: ratioTarget(0.9, true)})
	addRow(&Row{Key: "b.cpu", Workload: "b", Name: bName + ": proxy CPU per 1M req", Unit: "CPU-s", Better: "lower", Goal: ratioTarget(1.2, false)})
	cName := fmt.Sprintf("(c) batches of %d, %d clients x %d outstanding", o.Batch, o.Clients, o.Window)
	addRow(&Row{Key: "c.rps", Workload: "c", Name: cName + ": throughput", Unit: "elem/s", Better: "higher", Goal: ratioTarget(1.0, true)})
	addRow(&Row{Key: "c.cpu", Workload: "c", Name: cName + ": proxy CPU per 1M elem", Unit: "CPU-s", Better: "lower", Goal: ratioTarget(1.3, false)})
	for i, n := range o.FanoutSizes {
		w := fmt.Sprintf("d%d", n)
		var t *goal
		if i == len(o.FanoutSizes)-1 && !o.Smoke {
			t = absTarget(200, "ms")
		}
		k := o.Pushes
		addRow(&Row{Key: w + ".p50", Workload: w, Name: fmt.Sprintf("(d) 2 KB push to %d subscribers%s: last delivery p50 of %d pushes", n, relayNote(n), k), Unit: "ms", Better: "lower"})
		addRow(&Row{Key: w + ".p99", Workload: w, Name: fmt.Sprintf("(d) 2 KB push to %d subscribers%s: last delivery p99 of %d pushes", n, relayNote(n), k), Unit: "ms", Better: "lower", Goal: t})
	}
	addRow(&Row{Key: "e.rss", Workload: "e", Name: fmt.Sprintf("(e) %d idle clients%s: proxy RSS per client", o.Idle, relayNote(o.Idle)), Unit: "KiB", Better: "lower", Goal: absTarget(24, "KiB")})
	// (f): the probe is one more client, so the relay's count is cut by
	// one more socket pair.
	probeSubs := func(mode string) int { return clientsFor(mode, o.ProbeSubs+1) - 1 }
	fName := fmt.Sprintf("(f) %d subscribers of one subscription", o.ProbeSubs)
	if r := probeSubs("relay"); r != o.ProbeSubs {
		fName += fmt.Sprintf(" (relay: %d)", r)
	}
	var fGoal *goal
	if !o.Smoke {
		fGoal = absTarget(2, "×")
	}
	fPush := fmt.Sprintf(", 2 KB push every %v", o.ProbeEvery)
	addRow(&Row{Key: "f.p99", Workload: "f", Name: fName + fPush + ": probe p99 under fan-out / quiet", Unit: "×", Better: "lower", Goal: fGoal})
	addRow(&Row{Key: "f.max", Workload: "f", Name: fName + fPush + ": probe max under fan-out / quiet (no target)", Unit: "×", Better: "lower"})
	addRow(&Row{Key: "f.dps", Workload: "f", Name: fmt.Sprintf("%s, upstream %d pushes ahead: deliveries at saturation", fName, o.Ahead), Unit: "deliveries/s", Better: "higher"})
	for i, size := range o.LargeSizes {
		w := largeWorkload(size)
		name := fmt.Sprintf("(g) %s answers, %d clients x 1 outstanding", fmtBytes(size), o.LargeClients)
		var rssGoal *goal
		if i == len(o.LargeSizes)-1 && !o.Smoke {
			rssGoal = ratioTarget(1.5, false)
		}
		addRow(&Row{Key: w + ".mbps", Workload: w, Name: name + ": throughput", Unit: "MB/s", Better: "higher", Goal: ratioTarget(0.9, true)})
		addRow(&Row{Key: w + ".cpu", Workload: w, Name: name + ": proxy CPU per GB", Unit: "CPU-s", Better: "lower", Goal: ratioTarget(1.2, false)})
		addRow(&Row{Key: w + ".rss", Workload: w, Name: name + ": proxy peak RSS", Unit: "MiB", Better: "lower", Goal: rssGoal})
	}
	var hGoal *goal
	if !o.Smoke {
		hGoal = absTarget(0.05, "calls/call")
	}
	hName := fmt.Sprintf("(h) %d clients, ", o.HeadClients)
	hNode := fmt.Sprintf(" per head, node %d ms: upstream calls per client call", o.NodeDelay.Milliseconds())
	addRow(&Row{Key: "h.same", Workload: "h", Name: hName + "same 3 reads" + hNode, Unit: "calls/call", Better: "lower", Goal: hGoal})
	addRow(&Row{Key: "h.distinct", Workload: "h", Name: hName + "control, 3 distinct reads" + hNode, Unit: "calls/call", Better: "lower"})

	ms := []measurement{
		{"a", modes, func(ctx context.Context, e *env) (map[string]float64, error) {
			p50, p99, err := runLatency(ctx, e, o)
			return map[string]float64{"a.p50": p50, "a.p99": p99}, err
		}},
		{"b", modes, func(ctx context.Context, e *env) (map[string]float64, error) {
			rps, cpu, err := runThroughput(ctx, e, o, 1)
			return map[string]float64{"b.rps": rps, "b.cpu": cpu}, err
		}},
		{"c", modes, func(ctx context.Context, e *env) (map[string]float64, error) {
			rps, cpu, err := runThroughput(ctx, e, o, o.Batch)
			return map[string]float64{"c.rps": rps, "c.cpu": cpu}, err
		}},
	}
	for _, n := range o.FanoutSizes {
		w := fmt.Sprintf("d%d", n)
		ms = append(ms, measurement{w, modes, func(ctx context.Context, e *env) (map[string]float64, error) {
			p50, p99, err := runFanout(ctx, e, o, clientsFor(e.mode, n))
			return map[string]float64{w + ".p50": p50, w + ".p99": p99}, err
		}})
	}
	ms = append(ms, measurement{"e", []string{"relay", "muxd"}, func(ctx context.Context, e *env) (map[string]float64, error) {
		v, err := runIdle(ctx, e, o, clientsFor(e.mode, o.Idle))
		return map[string]float64{"e.rss": v}, err
	}})
	ms = append(ms, measurement{"f", modes, func(ctx context.Context, e *env) (map[string]float64, error) {
		f, err := runProbe(ctx, e, o, probeSubs(e.mode))
		return map[string]float64{"f.p99": f.p99Ratio, "f.max": f.maxRatio, "f.dps": f.deliveriesPerSec}, err
	}})
	for _, size := range o.LargeSizes {
		w := largeWorkload(size)
		ms = append(ms, measurement{w, modes, func(ctx context.Context, e *env) (map[string]float64, error) {
			f, err := runLarge(ctx, e, o, size)
			return map[string]float64{w + ".mbps": f.mbps, w + ".cpu": f.cpuPerGB, w + ".rss": f.peakRSSMB}, err
		}})
	}
	ms = append(ms, measurement{"h", modes, func(ctx context.Context, e *env) (map[string]float64, error) {
		f, err := runReads(ctx, e, o)
		return map[string]float64{"h.same": f.same, "h.distinct": f.distinct}, err
	}})
	// The upstream's flags by workload; without: the fast echo.
	upstreamArgs := map[string][]string{"h": {"-node-delay", o.NodeDelay.String()}}

	for _, m := range ms {
		if !o.runs(m.workload) {
			continue
		}
		for r := range o.Reps {
			// relay and muxd alternate which goes first; direct last.
			order := []string{"relay", "muxd", "direct"}
			if r%2 == 1 {
				order = []string{"muxd", "relay", "direct"}
			}
			for _, mode := range order {
				if !slices.Contains(m.modes, mode) {
					continue
				}
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				t0 := time.Now()
				figs, conns, err := measure(ctx, mode, upstreamArgs[m.workload], m.run)
				if err != nil {
					return nil, fmt.Errorf("workload %s, %s, rep %d: %w", m.workload, mode, r+1, err)
				}
				for k, v := range figs {
					if mode == "direct" && (strings.HasSuffix(k, ".cpu") || strings.HasSuffix(k, ".rss")) {
						continue // no proxy process
					}
					rows[k].Samples[mode] = append(rows[k].Samples[mode], v)
				}
				for _, row := range rep.Rows {
					if row.Workload == m.workload {
						row.UpstreamConns[mode] = max(row.UpstreamConns[mode], conns)
					}
				}
				if o.Progress != nil {
					fmt.Fprintf(o.Progress, "bench: %-6s rep %d %-6s %5.1fs %v conns=%d\n", m.workload, r+1, mode, time.Since(t0).Seconds(), fmtFigs(figs), conns)
				}
			}
		}
	}
	for _, row := range rep.Rows {
		for mode, s := range row.Samples {
			row.Value[mode] = median(s)
		}
		mv, okm := row.Value["muxd"]
		if rv, ok := row.Value["relay"]; ok && okm && rv != 0 {
			x := mv / rv
			row.MuxdRelay = &x
		}
		if dv, ok := row.Value["direct"]; ok && okm && dv != 0 {
			x := mv / dv
			row.MuxdDirect = &x
		}
		if row.Goal != nil {
			row.Target, row.TargetMet = row.Goal.String(), row.Goal.met(row)
		}
	}
	rep.ElapsedSec = time.Since(start).Seconds()
	return rep, nil
}

// largeWorkload names the (g) workload of one answer size: g1MB, g64KB.
func largeWorkload(size int) string { return "g" + strings.ReplaceAll(fmtBytes(size), " ", "") }

// fmtBytes writes a size in decimal units: 64 KB, 1 MB, 32 MB.
func fmtBytes(n int) string {
	switch {
	case n >= 1e6 && n%1e6 == 0:
		return fmt.Sprintf("%d MB", n/1e6)
	case n >= 1e3 && n%1e3 == 0:
		return fmt.Sprintf("%d KB", n/1e3)
	default:
		return fmt.Sprintf("%d B", n)
	}
}

func fmtFigs(f map[string]float64) string {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%.4g ", k, f[k])
	}
	return strings.TrimSpace(b.String())
}

// measure starts a fresh upstream (with upstreamArgs) and proxy, runs fn,
// and returns its figures and the number of connections the upstream
// accepted.
func measure(ctx context.Context, mode string, upstreamArgs []string, fn func(context.Context, *env) (map[string]float64, error)) (map[string]float64, int64, error) {
	e, err := startEnv(mode, upstreamArgs...)
	if err != nil {
		return nil, 0, err
	}
	defer e.stop()
	figs, err := fn(ctx, e)
	if err != nil {
		return nil, 0, err
	}
	st, err := upstreamStatsOf(ctx, e.upstream)
	if err != nil {
		return nil, 0, err
	}
	return figs, st.Accepted, nil
}

func median(s []float64) float64 {
	c := slices.Clone(s)
	slices.Sort(c)
	n := len(c)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return c[n/2]
	}
	return (c[n/2-1] + c[n/2]) / 2
}

// WriteTable prints the report as a table.
func (rep *Report) WriteTable(w io.Writer) {
	cc := ""
	if rep.TCPCongestion != "" {
		cc = ", TCP congestion control " + rep.TCPCongestion
	}
	fmt.Fprintf(w, "muxd bench: %s, %d CPUs, GOMAXPROCS %d%s, reps: %d (medians), %gs per throughput measurement, elapsed %.0fs\n",
		rep.GoVersion, rep.NumCPU, rep.GOMAXPROCS, cc, rep.Options.Reps, rep.Options.DurationSec, rep.ElapsedSec)
	fmt.Fprintln(w, "relay = BASELINE: dumb 1:1 WebSocket relay in this program (own upstream socket per client, frames copied unparsed)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tunit\tdirect\trelay\tmuxd\tmuxd/relay\tmuxd/direct\ttarget\tmet\tupstream conns d/r/m")
	for _, r := range rep.Rows {
		cell := func(m string) string {
			v, ok := r.Value[m]
			if !ok {
				return "n/a"
			}
			return fmtNum(v)
		}
		ratio := func(p *float64) string {
			if p == nil {
				return "n/a"
			}
			return fmt.Sprintf("%.2f", *p)
		}
		met := ""
		if r.TargetMet != nil {
			met = "no"
			if *r.TargetMet {
				met = "yes"
			}
		}
		conns := func(m string) string {
			if v, ok := r.UpstreamConns[m]; ok {
				return fmt.Sprint(v)
			}
			return "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s/%s/%s\n", r.Name, r.Unit, cell("direct"), cell("relay"), cell("muxd"),
			ratio(r.MuxdRelay), ratio(r.MuxdDirect), r.Target, met, conns("direct"), conns("relay"), conns("muxd"))
	}
	tw.Flush()
	for _, n := range rep.Notes {
		fmt.Fprintln(w, "note:", n)
	}
}

func fmtNum(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// missed lists the targets not met.
func (rep *Report) missed() []string {
	var m []string
	for _, r := range rep.Rows {
		if r.TargetMet != nil && !*r.TargetMet {
			m = append(m, r.Name+": "+r.Target)
		}
	}
	return m
}

func main() {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain(os.Args[1:]))
	}
	var (
		role     = flag.String("role", "", "internal: run as a child process (upstream, relay, muxd)")
		_        = flag.String("upstream", "", "internal: upstream URL for -role relay/muxd")
		_        = flag.Duration("node-delay", 0, "internal: -role upstream answers the simulated chain's reads after this long")
		asJSON   = flag.Bool("json", false, "print the report as JSON instead of a table")
		smoke    = flag.Bool("smoke", false, "tiny sizes, 1 rep, ~1 s per measurement (CI)")
		reps     = flag.Int("reps", 0, "repetitions per measurement (default 3, smoke 1)")
		duration = flag.Duration("duration", 0, "duration of each latency/throughput measurement (default 1.5s, smoke 1s)")
		out      = flag.String("out", "", "also write the JSON report to this file")
		chart    = flag.String("chart", "", "also draw the report as an SVG chart in this file")
		replot   = flag.String("replot", "", "run nothing: draw the JSON report in this file (from -out) as the -chart")
		check    = flag.Bool("check", false, "exit 1 when a target in the table is missed")
		quiet    = flag.Bool("q", false, "no progress lines on stderr")
		only     = flag.String("only", "", "run only these workloads, comma-separated: a, b, c, d (or d1000, d10000), e, f, g (or g1MB, g8MB, g32MB), h")
		large    = flag.String("large", "", "answer sizes of (g) in bytes, comma-separated (default 1e6,8e6,32e6; smoke 64e3,1e6)")
	)
	flag.Parse()
	if *role != "" {
		os.Exit(childMain(os.Args[1:]))
	}
	o := fullOptions()
	if *smoke {
		o = smokeOptions()
	}
	if *reps > 0 {
		o.Reps = *reps
	}
	if *duration > 0 {
		o.Duration = *duration
	}
	if !*quiet {
		o.Progress = os.Stderr
	}
	o.Only = *only
	if *large != "" {
		o.LargeSizes = nil
		for _, f := range strings.Split(*large, ",") {
			v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || v < 1 || v > 60e6 {
				fmt.Fprintf(os.Stderr, "bench: -large: %q is not a size in bytes from 1 to 60e6\n", f)
				os.Exit(2)
			}
			o.LargeSizes = append(o.LargeSizes, int(v))
		}
	}
	if *replot != "" {
		if err := replotChart(*replot, *chart); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	rep, err := Run(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	js, _ := json.MarshalIndent(rep, "", "  ")
	if *asJSON {
		os.Stdout.Write(append(js, '\n'))
	} else {
		rep.WriteTable(os.Stdout)
	}
	if *out != "" {
		if err := os.WriteFile(*out, append(js, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
	if *chart != "" {
		if err := writeChart(*chart, rep); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
	if *check {
		if m := rep.missed(); len(m) > 0 {
			for _, s := range m {
				fmt.Fprintln(os.Stderr, "bench: target missed:", s)
			}
			os.Exit(1)
		}
	}
}
