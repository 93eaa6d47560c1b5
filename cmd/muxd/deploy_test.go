package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/muxd/muxd/internal/testnode"
)

// deployDir is deploy/ at the repository's root.
var deployDir = filepath.Join("..", "..", "deploy")

func readDeploy(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// metricName finds the names of muxd's own series (and the Go and process
// collectors') in a PromQL expression.
var metricName = regexp.MustCompile(`\b(?:muxd|go|process)_[a-zA-Z0-9_]+\b`)

// exprsOfDashboard returns every query of the Grafana dashboard.
func exprsOfDashboard(t *testing.T) []string {
	t.Helper()
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal([]byte(readDeploy(t, "grafana/muxd.json")), &dash); err != nil {
		t.Fatalf("grafana/muxd.json: %v", err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if v.Definition != "" {
			exprs = append(exprs, v.Definition)
		}
	}
	return exprs
}

// exprsOfRules returns every rule's expression of the alerting rules.
func exprsOfRules(t *testing.T) []string {
	t.Helper()
	docs, err := parseYAML(readDeploy(t, "prometheus/muxd-alerts.yml"))
	if err != nil {
		t.Fatalf("prometheus/muxd-alerts.yml: %v", err)
	}
	var exprs []string
	for _, g := range list(docs[0], "groups") {
		for _, r := range list(g, "rules") {
			exprs = append(exprs, str(r, "expr"))
		}
	}
	return exprs
}

// scrapeNames runs muxd against two fake nodes (so that every per-upstream
// series is there), sends a few calls, and returns the names in its
// /metrics output, a histogram's _bucket, _sum and _count included.
func scrapeNames(t *testing.T) map[string]bool {
	t.Helper()
	t.Setenv("MUXD_UPSTREAM", "")
	chain := testnode.NewChain(0)
	a, b := chain.NewNode(t, 0), chain.NewNode(t, 0) // they answer eth_chainId
	s := startServed(t, "--upstream", a.URL, "--upstream", b.URL, "--listen", "127.0.0.1:0")
	s.waitProbe(t, "/readyz", http.StatusOK, "ready")
	for _, call := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}`,
		`{"jsonrpc":"2.0","id":2,"method":"eth_chainId","params":[]}`,
		`{"jsonrpc":"2.0","id":3,"method":"eth_blockNumber","params":[]}`,
	} {
		if r := awaitHTTP(t, postAsync(s.addr, call)); !strings.Contains(r.body, `"result"`) {
			t.Fatalf("%s: %s", call, r.body)
		}
	}
	_, body := s.probe(t, "/metrics")
	names := map[string]bool{}
	for line := range strings.SplitSeq(body, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		names[name] = true
	}
	return names
}

// TestDeployMetricsExist: every series the Grafana dashboard and the
// alerting rules ask for is one muxd serves.
func TestDeployMetricsExist(t *testing.T) {
	names := scrapeNames(t)
	for _, src := range []struct {
		file  string
		exprs []string
	}{
		{"grafana/muxd.json", exprsOfDashboard(t)},
		{"prometheus/muxd-alerts.yml", exprsOfRules(t)},
	} {
		if len(src.exprs) == 0 {
			t.Errorf("%s: no queries found", src.file)
		}
		for _, e := range src.exprs {
			found := metricName.FindAllString(e, -1)
			if len(found) == 0 {
				t.Errorf("%s: a query with no muxd series: %s", src.file, e)
			}
			for _, n := range found {
				if !names[n] {
					t.Errorf("%s: %s is not in muxd's /metrics (query %s)", src.file, n, e)
				}
			}
		}
	}
}

// TestAlertRulesTested: the rules hold the alerts the dashboard's readers
// are promised, and each has a unit test in muxd-alerts_test.yml (which
// scripts/check-alerts.sh runs with promtool).
func TestAlertRulesTested(t *testing.T) {
	docs, err := parseYAML(readDeploy(t, "prometheus/muxd-alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var alerts []string
	for _, g := range list(docs[0], "groups") {
		for _, r := range list(g, "rules") {
			alerts = append(alerts, str(r, "alert"))
			if str(field(r, "labels"), "severity") == "" {
				t.Errorf("alert %s has no severity", str(r, "alert"))
			}
		}
	}
	for _, want := range []string{"MuxdNoUpstreamHealthy", "MuxdHeadStalled", "MuxdFailoverFlapping", "MuxdSlowConsumerCuts", "MuxdBackfillGaps", "MuxdThrottlingClients"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s in muxd-alerts.yml", want)
		}
	}
	tests, err := parseYAML(readDeploy(t, "prometheus/muxd-alerts_test.yml"))
	if err != nil {
		t.Fatal(err)
	}
	tested := map[string]bool{}
	for _, tc := range list(tests[0], "tests") {
		for _, a := range list(tc, "alert_rule_test") {
			if len(list(a, "exp_alerts")) > 0 {
				tested[str(a, "alertname")] = true
			}
		}
	}
	for _, a := range alerts {
		if !tested[a] {
			t.Errorf("alert %s has no unit test that expects it to fire", a)
		}
	}
}
