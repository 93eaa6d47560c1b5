package mux

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestBuildInfoMetric: muxd_build_info is one gauge series of value 1
// labelled version, revision and go_version; an unknown revision reads
// "unknown", not an empty label (which Prometheus treats as no label).
func TestBuildInfoMetric(t *testing.T) {
	for _, tc := range []struct {
		name, version, revision, goVersion string
		want                               map[string]string
	}{
		{"release", "v1.2.3", "0123456789abcdef0123456789abcdef01234567", "go1.26.8",
			map[string]string{"version": "v1.2.3", "revision": "0123456789abcdef0123456789abcdef01234567", "go_version": "go1.26.8"}},
		{"dirty tree", "v1.2.3-4-g0123456-dirty", "0123456789abcdef0123456789abcdef01234567-dirty", "go1.26.8",
			map[string]string{"version": "v1.2.3-4-g0123456-dirty", "revision": "0123456789abcdef0123456789abcdef01234567-dirty", "go_version": "go1.26.8"}},
		{"unknown revision", "(devel)", "", "go1.26.8",
			map[string]string{"version": "(devel)", "revision": "unknown", "go_version": "go1.26.8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(NewBuildInfo(tc.version, tc.revision, tc.goVersion))
			families, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			if len(families) != 1 || families[0].GetName() != "muxd_build_info" || families[0].GetType() != dto.MetricType_GAUGE {
				t.Fatalf("gathered %v, want one gauge muxd_build_info", families)
			}
			ms := families[0].GetMetric()
			if len(ms) != 1 || ms[0].GetGauge().GetValue() != 1 {
				t.Fatalf("series %v, want one of value 1", ms)
			}
			got := map[string]string{}
			for _, l := range ms[0].GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if len(got) != len(tc.want) {
				t.Errorf("labels %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("label %s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}
