package main

// The chart: every figure of a report as bars relative to the relay
// baseline, written as SVG with the standard library only.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"strings"
)

// chart geometry, in SVG user units (px)
const (
	chartWidth   = 1040
	chartLabelW  = 490 // left column: figure names
	chartPlotW   = 470 // bars
	chartBarH    = 9
	chartRowGap  = 14
	chartTop     = 76
	chartBottom  = 44
	chartMaxAxis = 4.0 // ratios above are clipped and marked
)

var chartColors = map[string]string{"direct": "#9e9e9e", "relay": "#4878a8", "muxd": "#e07b22"}

// WriteSVG draws each figure that has a relay value as three bars, direct,
// relay and muxd, each as a multiple of the relay's figure (so the relay's
// bar is always 1), with the target as a red tick where one is
// set. Bars longer than the axis are clipped and carry their value.
func (rep *Report) WriteSVG(w io.Writer) error {
	var rows []*Row
	axis := 1.0
	for _, r := range rep.Rows {
		rv, ok := r.Value["relay"]
		if !ok || rv == 0 {
			continue
		}
		rows = append(rows, r)
		for _, v := range r.Value {
			axis = max(axis, v/rv)
		}
	}
	axis = min(math.Ceil(axis*2)/2, chartMaxAxis)
	rowH := 3*chartBarH + chartRowGap
	height := chartTop + len(rows)*rowH + chartBottom
	x0 := float64(chartLabelW)
	scale := float64(chartPlotW) / axis
	xAt := func(ratio float64) float64 { return x0 + min(ratio, axis)*scale }

	b := bufio.NewWriter(w)
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	esc := html.EscapeString
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		chartWidth, height, chartWidth, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="10" y="20" font-size="14" font-weight="bold">%s</text>`+"\n",
		esc(fmt.Sprintf("muxd bench: each figure as a multiple of the relay baseline (relay = 1)")))
	p(`<text x="10" y="38">%s</text>`+"\n", esc(fmt.Sprintf("%s, %d CPUs, %d reps (medians), %s; made by go run ./integration/bench -chart",
		rep.GoVersion, rep.NumCPU, rep.Options.Reps, rep.Started.UTC().Format("2006-01-02 15:04 MST"))))
	lx := 10.0
	for _, m := range []string{"direct", "relay", "muxd"} {
		p(`<rect x="%.0f" y="48" width="12" height="10" fill="%s"/><text x="%.0f" y="57">%s</text>`+"\n", lx, chartColors[m], lx+16, m)
		lx += 70
	}
	p(`<line x1="%.0f" y1="48" x2="%.0f" y2="58" stroke="#d00000" stroke-width="2"/><text x="%.0f" y="57">target</text>`+"\n", lx, lx, lx+6)

	// grid: a line at every 0.5, the relay's 1.0 darker
	plotBottom := float64(height - chartBottom)
	for g := 0.0; g <= axis+1e-9; g += 0.5 {
		stroke, width := "#e0e0e0", 1
		if g == 1 {
			stroke, width = "#4878a8", 1
		}
		x := xAt(g)
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%.0f" stroke="%s" stroke-width="%d"/>`+"\n", x, chartTop-6, x, plotBottom, stroke, width)
		p(`<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", x, plotBottom+14, strings.TrimSuffix(fmt.Sprintf("%.1f", g), ".0")+"×")
	}
	p(`<text x="%.0f" y="%.0f" text-anchor="middle">multiple of relay</text>`+"\n", x0+float64(chartPlotW)/2, plotBottom+30)

	for i, r := range rows {
		y := float64(chartTop + i*rowH)
		rv := r.Value["relay"]
		better := "lower is better"
		if r.Better == "higher" {
			better = "higher is better"
		}
		p(`<text x="10" y="%.0f">%s</text>`+"\n", y+11, esc(r.Name))
		p(`<text x="10" y="%.0f" fill="#666">%s</text>`+"\n", y+24, esc(fmt.Sprintf("%s, %s; muxd %s %s", r.Unit, better, fmtNum(r.Value["muxd"]), r.Unit)))
		for j, m := range []string{"direct", "relay", "muxd"} {
			v, ok := r.Value[m]
			if !ok {
				continue
			}
			ratio := v / rv
			by := y + float64(j*chartBarH)
			p(`<rect x="%.0f" y="%.0f" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>`+"\n",
				x0, by, xAt(ratio)-x0, chartBarH-1, chartColors[m], esc(fmt.Sprintf("%s: %s %s", m, fmtNum(v), r.Unit)))
			label := fmt.Sprintf("%.2f", ratio)
			if ratio > axis {
				label = "▶ " + label
			}
			p(`<text x="%.1f" y="%.0f" font-size="9">%s</text>`+"\n", xAt(ratio)+3, by+chartBarH-1, esc(label))
		}
		if t, ok := r.goalRatio(); ok && t <= axis {
			x := xAt(t)
			p(`<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#d00000" stroke-width="2"><title>%s</title></line>`+"\n",
				x, y+float64(2*chartBarH)-2, x, y+float64(3*chartBarH)+1, esc(r.Target))
		}
	}
	p("</svg>\n")
	return b.Flush()
}

func (r *Row) goalRatio() (float64, bool) {
	if r.Goal == nil {
		return 0, false
	}
	return r.Goal.ratio(r)
}

// replotChart draws the report saved in jsonPath (by -out) into svgPath.
func replotChart(jsonPath, svgPath string) error {
	if svgPath == "" {
		return errors.New("-replot needs -chart")
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		return fmt.Errorf("replot: %w", err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("replot %s: %w", jsonPath, err)
	}
	return writeChart(svgPath, &rep)
}

func writeChart(path string, rep *Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if err := rep.WriteSVG(f); err != nil {
		f.Close()
		return fmt.Errorf("chart %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("chart %s: %w", path, err)
	}
	return nil
}
