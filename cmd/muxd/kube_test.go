package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/muxd/muxd/mux"
)

// TestKubernetesSidecar: the sidecar manifest runs muxd as a native
// sidecar with options muxd takes, the upstream from a Secret through the
// variable muxd reads, and probes on the paths and port muxd serves.
func TestKubernetesSidecar(t *testing.T) {
	docs, err := parseYAML(readDeploy(t, "kubernetes/muxd-sidecar.yaml"))
	if err != nil {
		t.Fatalf("kubernetes/muxd-sidecar.yaml: %v", err)
	}
	var pod any
	for _, d := range docs {
		if str(d, "kind") == "Deployment" {
			pod = field(field(field(d, "spec"), "template"), "spec")
		}
	}
	if pod == nil {
		t.Fatal("no Deployment")
	}
	var c any
	for _, ic := range list(pod, "initContainers") {
		if str(ic, "name") == "muxd" {
			c = ic
		}
	}
	if c == nil {
		t.Fatal("no init container named muxd")
	}
	if got := str(c, "restartPolicy"); got != "Always" {
		t.Errorf("muxd's restartPolicy %q, want Always (a native sidecar)", got)
	}

	// The arguments are muxd's own options: loadConfig takes them, with
	// the upstream from each variable the manifest sets from a Secret.
	var args []string
	for _, a := range list(c, "args") {
		args = append(args, a.(string))
	}
	const upstream = "wss://node.example/KEY"
	t.Setenv("MUXD_UPSTREAM", "") // only what the manifest sets counts
	for _, e := range list(c, "env") {
		name := str(e, "name")
		if field(field(e, "valueFrom"), "secretKeyRef") == nil {
			t.Errorf("env %s is not from a Secret", name)
			continue
		}
		t.Setenv(name, upstream)
	}
	cfg, _, err := loadConfig(args)
	if err != nil {
		t.Fatalf("muxd refuses the manifest's arguments %q: %v", args, err)
	}
	if len(cfg.Upstreams) != 1 || cfg.Upstreams[0].URL != upstream {
		t.Errorf("the Secret's variables do not give muxd its upstream: %+v", cfg.Upstreams)
	}
	if host, _, _ := net.SplitHostPort(cfg.Listen); host != "127.0.0.1" {
		t.Errorf("listen %q: keep the node's endpoint to the pod", cfg.Listen)
	}
	_, metricsPort, err := net.SplitHostPort(cfg.Metrics)
	if err != nil {
		t.Fatalf("metrics %q: %v", cfg.Metrics, err)
	}
	ports := map[string]string{} // port name -> number
	for _, p := range list(c, "ports") {
		ports[str(p, "name")] = str(p, "containerPort")
	}

	// Each probe asks a path muxd's metrics listener serves, on the port
	// muxd's metrics option binds.
	handler := probeHandler(t)
	for _, probe := range []struct{ name, path string }{
		{"startupProbe", healthzPath},
		{"livenessProbe", healthzPath},
		{"readinessProbe", readyzPath},
	} {
		get := field(field(c, probe.name), "httpGet")
		if get == nil {
			t.Errorf("no %s.httpGet", probe.name)
			continue
		}
		if got := str(get, "path"); got != probe.path {
			t.Errorf("%s path %q, want %q", probe.name, got, probe.path)
		}
		port := str(get, "port")
		if named, ok := ports[port]; ok {
			port = named
		}
		if port != metricsPort {
			t.Errorf("%s port %q, but muxd serves its probes on %q (--metrics %s)", probe.name, port, metricsPort, cfg.Metrics)
		}
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, str(get, "path"), nil))
		if rec.Code == http.StatusNotFound {
			t.Errorf("%s path %q: muxd serves no such path", probe.name, str(get, "path"))
		}
	}
	// The pod's grace covers muxd's: shutdown_grace, then a second for
	// clients to take their last answers (mux.AnswerFlush).
	grace, err := strconv.Atoi(str(field(pod, "terminationGracePeriodSeconds"), ""))
	if need := cfg.ShutdownGrace.Duration + mux.AnswerFlush; err != nil || time.Duration(grace)*time.Second <= need {
		t.Errorf("terminationGracePeriodSeconds %d (%v): give muxd more than shutdown_grace and the answers' flush, %v", grace, err, need)
	}

	// The Secret the variables name is the example's, with its key.
	secrets, err := parseYAML(readDeploy(t, "kubernetes/secret.example.yaml"))
	if err != nil {
		t.Fatalf("kubernetes/secret.example.yaml: %v", err)
	}
	for _, e := range list(c, "env") {
		ref := field(field(e, "valueFrom"), "secretKeyRef")
		if s := secrets[0]; str(s, "kind") != "Secret" || str(field(s, "metadata"), "name") != str(ref, "name") || field(field(s, "stringData"), str(ref, "key")) == nil {
			t.Errorf("env %s names Secret %s key %s, which secret.example.yaml does not hold", str(e, "name"), str(ref, "name"), str(ref, "key"))
		}
	}
	if slices.Contains(args, "--upstream") {
		t.Error("the upstream URL belongs in the Secret, not in the arguments (the process list shows them)")
	}
}

// probeHandler is muxd's metrics handler over a server that is not running.
func probeHandler(t *testing.T) http.Handler {
	t.Helper()
	reg := prometheus.NewRegistry()
	logger, _ := newLogger(&Config{}, io.Discard)
	srv, err := mux.New(mux.Config{Upstream: "ws://127.0.0.1:1", Registerer: reg, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	return metricsHandler(reg, srv, new(atomic.Bool))
}
