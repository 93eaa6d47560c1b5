package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary serve as the bench's child processes: the
// bench re-executes os.Args[0] with childEnv set.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// TestSmoke runs the whole suite with tiny sizes and checks its shape: every
// figure present and positive, muxd on exactly one upstream socket per
// workload, direct and relay on one per client. No thresholds.
func TestSmoke(t *testing.T) {
	o := smokeOptions()
	o.Duration, o.Warmup = 500*time.Millisecond, 50*time.Millisecond
	o.Clients, o.Window = 4, 4
	o.FanoutSizes, o.Pushes = []int{10, 30}, 5
	o.Idle, o.Settle = 50, 100*time.Millisecond
	o.ProbeSubs, o.ProbeEvery, o.ProbeWindow = 20, 100*time.Millisecond, 300*time.Millisecond
	o.LargeSizes, o.LargeClients = []int{20e3, 300e3}, 3
	if testing.Verbose() {
		o.Progress = os.Stderr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}

	clients := map[string]int64{"a": 1, "b": int64(o.Clients), "c": int64(o.Clients), "d10": 10, "d30": 30, "e": int64(o.Idle), "f": int64(o.ProbeSubs) + 1, "g20KB": 3, "g300KB": 3}
	wantKeys := []string{"a.p50", "a.p99", "b.rps", "b.cpu", "c.rps", "c.cpu", "d10.p50", "d10.p99", "d30.p50", "d30.p99", "e.rss",
		"f.p99", "f.max", "f.dps", "g20KB.mbps", "g20KB.cpu", "g20KB.rss", "g300KB.mbps", "g300KB.cpu", "g300KB.rss"}
	got := map[string]*Row{}
	for _, r := range rep.Rows {
		got[r.Key] = r
	}
	for _, k := range wantKeys {
		r := got[k]
		if r == nil {
			t.Errorf("figure %s missing", k)
			continue
		}
		modes := []string{"direct", "relay", "muxd"}
		if strings.HasSuffix(k, ".cpu") || strings.HasSuffix(k, ".rss") {
			modes = []string{"relay", "muxd"} // no proxy process in direct mode
			if _, ok := r.Value["direct"]; ok {
				t.Errorf("%s: direct has a value, but there is no proxy process", k)
			}
		}
		for _, m := range modes {
			if v, ok := r.Value[m]; !ok || !(v > 0) {
				t.Errorf("%s %s = %v (present %v), want > 0", k, m, v, ok)
			}
			if n := len(r.Samples[m]); n != o.Reps {
				t.Errorf("%s %s: %d samples, want %d", k, m, n, o.Reps)
			}
		}
		if r.MuxdRelay == nil || !(*r.MuxdRelay > 0) {
			t.Errorf("%s: no muxd/relay ratio", k)
		}
		if len(modes) == 3 && (r.MuxdDirect == nil || !(*r.MuxdDirect > 0)) {
			t.Errorf("%s: no muxd/direct ratio", k)
		}
		n := clients[r.Workload]
		if c := r.UpstreamConns["muxd"]; c != 1 {
			t.Errorf("%s: muxd used %d upstream connections, want 1", k, c)
		}
		if c := r.UpstreamConns["relay"]; c != n {
			t.Errorf("%s: relay used %d upstream connections, want %d (one per client)", k, c, n)
		}
		if len(modes) == 3 {
			if c := r.UpstreamConns["direct"]; c != n {
				t.Errorf("%s: direct used %d upstream connections, want %d", k, c, n)
			}
		}
	}
	if len(rep.Rows) != len(wantKeys) {
		t.Errorf("%d rows, want %d", len(rep.Rows), len(wantKeys))
	}

	var tbl bytes.Buffer
	rep.WriteTable(&tbl)
	for _, s := range []string{"muxd/relay", "BASELINE", "upstream conns"} {
		if !strings.Contains(tbl.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, tbl.String())
		}
	}
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js, &back); err != nil || len(back.Rows) != len(rep.Rows) {
		t.Fatalf("JSON round trip: %v, %d rows", err, len(back.Rows))
	}
	for i, r := range rep.Rows {
		if (r.Goal == nil) != (back.Rows[i].Goal == nil) || r.Goal != nil && *r.Goal != *back.Rows[i].Goal {
			t.Errorf("%s: goal %+v after the JSON round trip, want %+v", r.Key, back.Rows[i].Goal, r.Goal)
		}
	}
	checkSVG(t, rep)
	checkSVG(t, &back) // -replot draws from the JSON
	t.Logf("\n%s", tbl.String())
}

// checkSVG draws rep and checks that the SVG is well-formed XML with one
// muxd bar and one label per row.
func checkSVG(t *testing.T, rep *Report) {
	t.Helper()
	var svg bytes.Buffer
	if err := rep.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(svg.Bytes()))
	muxdBars, texts := 0, map[string]bool{}
	var inText bool
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("chart is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			inText = tok.Name.Local == "text"
			for _, a := range tok.Attr {
				if tok.Name.Local == "rect" && a.Name.Local == "fill" && a.Value == chartColors["muxd"] {
					muxdBars++
				}
			}
		case xml.CharData:
			if inText {
				texts[string(tok)] = true
			}
		case xml.EndElement:
			inText = false
		}
	}
	// the legend has a muxd swatch too
	if want := len(rep.Rows) + 1; muxdBars != want {
		t.Errorf("chart has %d muxd bars, want %d (one per row and the legend)", muxdBars, want)
	}
	for _, r := range rep.Rows {
		if !texts[r.Name] {
			t.Errorf("chart lacks the label %q", r.Name)
		}
	}
}

func TestGoal(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	tests := []struct {
		name string
		goal *goal
		row  Row
		want string // "yes", "no", "" (no verdict)
	}{
		{"ratio below limit", ratioTarget(1.15, false), Row{MuxdRelay: f(1.1)}, "yes"},
		{"ratio above limit", ratioTarget(1.15, false), Row{MuxdRelay: f(1.2)}, "no"},
		{"ratio at limit", ratioTarget(1.15, false), Row{MuxdRelay: f(1.15)}, "yes"},
		{"higher is better, met", ratioTarget(0.9, true), Row{MuxdRelay: f(0.95)}, "yes"},
		{"higher is better, missed", ratioTarget(0.9, true), Row{MuxdRelay: f(0.85)}, "no"},
		{"no relay figure", ratioTarget(0.9, true), Row{Value: map[string]float64{"muxd": 1}}, ""},
		{"absolute met", absTarget(200, "ms"), Row{Value: map[string]float64{"muxd": 182}}, "yes"},
		{"absolute missed", absTarget(200, "ms"), Row{Value: map[string]float64{"muxd": 201}}, "no"},
		{"absolute, no muxd figure", absTarget(200, "ms"), Row{Value: map[string]float64{"relay": 1}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if m := tt.goal.met(&tt.row); m != nil {
				got = map[bool]string{true: "yes", false: "no"}[*m]
			}
			if got != tt.want {
				t.Errorf("%s on %+v: met %q, want %q", tt.goal, tt.row, got, tt.want)
			}
		})
	}
	r := Row{Value: map[string]float64{"relay": 400, "muxd": 180}}
	if x, ok := absTarget(200, "ms").ratio(&r); !ok || x != 0.5 {
		t.Errorf("200 ms against a 400 ms relay: ratio %v %v, want 0.5", x, ok)
	}
}
