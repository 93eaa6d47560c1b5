package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/muxd/muxd/internal/testnode"
)

// TestVersionResolve: the -ldflags stamp wins over the go command's build
// info; the VCS stamp gives the revision, "-dirty" for a modified tree;
// with neither, the version is "(devel)" and the revision unknown.
func TestVersionResolve(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev},
			{Key: "vcs.time", Value: "2025-12-07T21:23:00Z"}, {Key: "vcs.modified", Value: modified}}
	}
	for _, tc := range []struct {
		name string
		ld   ldStamp
		bi   *debug.BuildInfo
		want buildInfo
	}{
		{"no build info", ldStamp{}, nil,
			buildInfo{Version: "(devel)"}},
		{"go test or -buildvcs=false", ldStamp{}, &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			buildInfo{Version: "(devel)", GoVersion: "go1.26.8"}},
		{"clean clone", ldStamp{}, &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20251207212300-0123456789ab"}, Settings: vcs("false")},
			buildInfo{Version: "v0.0.0-20251207212300-0123456789ab", Revision: rev, CommitTime: "2025-12-07T21:23:00Z", GoVersion: "go1.26.8"}},
		{"modified clone", ldStamp{}, &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20251207212300-0123456789ab+dirty"}, Settings: vcs("true")},
			buildInfo{Version: "v0.0.0-20251207212300-0123456789ab+dirty", Revision: rev + "-dirty", CommitTime: "2025-12-07T21:23:00Z", GoVersion: "go1.26.8"}},
		{"go install of a tag", ldStamp{}, &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}},
			buildInfo{Version: "v1.2.3", GoVersion: "go1.26.8"}},
		{"release build", ldStamp{"v1.2.3-4-g0123456-dirty", rev + "-dirty", "2025-12-08T10:00:00Z"}, &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			buildInfo{Version: "v1.2.3-4-g0123456-dirty", Revision: rev + "-dirty", BuildDate: "2025-12-08T10:00:00Z", GoVersion: "go1.26.8"}},
		{"release build over a VCS stamp", ldStamp{"v1.2.3", rev, "2025-12-08T10:00:00Z"}, &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-x+dirty"}, Settings: vcs("true")},
			buildInfo{Version: "v1.2.3", Revision: rev, CommitTime: "2025-12-07T21:23:00Z", BuildDate: "2025-12-08T10:00:00Z", GoVersion: "go1.26.8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.want.Platform = runtime.GOOS + "/" + runtime.GOARCH
			if tc.want.GoVersion == "" {
				tc.want.GoVersion = runtime.Version()
			}
			if got := resolveBuild(tc.ld, tc.bi); got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// stampBuild sets the -ldflags variables for one test, as a release build
// would.
func stampBuild(t *testing.T, v, commit, date string) {
	t.Helper()
	old := ldStamp{version, buildCommit, buildDate}
	version, buildCommit, buildDate = v, commit, date
	t.Cleanup(func() { version, buildCommit, buildDate = old.version, old.commit, old.date })
}

// TestVersionOutput: `muxd version` and --version print the version on the
// first line, then commit, build date and Go release where known.
func TestVersionOutput(t *testing.T) {
	stampBuild(t, "v1.2.3-dirty", "0123456789abcdef0123456789abcdef01234567-dirty", "2025-12-08T10:00:00Z")
	want := "muxd v1.2.3-dirty\n" +
		"  commit:      0123456789abcdef0123456789abcdef01234567-dirty\n" +
		"  built:       2025-12-08T10:00:00Z\n" +
		"  go:          " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}, {"check", "--version"}} {
		code, out, errs := runCmd(t, args...)
		if code != 0 || out != want || errs != "" {
			t.Errorf("%v: exit %d, stderr %q, stdout\n%s\nwant\n%s", args, code, errs, out, want)
		}
	}
	stampBuild(t, "", "", "")
	if _, out, _ := runCmd(t, "version"); strings.Contains(out, "built:") || !strings.HasPrefix(out, "muxd ") {
		t.Errorf("unstamped build: %q", out)
	}
}

// TestMetricsBuildInfo: a serving muxd's /metrics (the real handler, on the
// --metrics listener) has muxd_build_info with the labels `muxd version`
// shows, beside the series it always had.
func TestMetricsBuildInfo(t *testing.T) {
	t.Setenv("MUXD_UPSTREAM", "")
	stampBuild(t, "v1.2.3-4-g0123456", "0123456789abcdef0123456789abcdef01234567", "2025-12-08T10:00:00Z")
	node := newFakeNode(t)
	addrs := make(chan net.Addr, 1)
	onListening = func(ws, ipc, metrics net.Addr) { addrs <- metrics }
	t.Cleanup(func() { onListening = nil })
	ctx, cancel := context.WithCancel(context.Background())
	var stderr testnode.LockedBuffer
	done := make(chan int, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		// metrics must be written differently from listen, even for port 0.
		done <- run(ctx, []string{"--upstream", node.URL, "--listen", "127.0.0.1:0", "--metrics", "localhost:0"}, io.Discard, &stderr)
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
	})
	var metricsAddr net.Addr
	select {
	case metricsAddr = <-addrs:
	case code := <-done:
		t.Fatalf("run exited %d before listening: %s", code, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("serve never listened")
	}
	resp, err := http.Get("http://" + metricsAddr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	want := fmt.Sprintf(`muxd_build_info{go_version=%q,revision="0123456789abcdef0123456789abcdef01234567",version="v1.2.3-4-g0123456"} 1`, runtime.Version())
	lines := strings.Split(string(body), "\n")
	found := false
	for _, l := range lines {
		found = found || l == want
	}
	if !found {
		t.Errorf("/metrics lacks the line\n%s\nits muxd_build_info lines: %q", want, grepLines(lines, "muxd_build_info"))
	}
	// The series muxd had before keep their names.
	for _, name := range []string{"muxd_requests_in_flight", "muxd_upstream_connected", "muxd_clients", "go_goroutines", "process_start_time_seconds"} {
		if len(grepLines(lines, name)) == 0 {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if !strings.Contains(stderr.String(), `version=v1.2.3-4-g0123456 revision=0123456789abcdef0123456789abcdef01234567`) {
		t.Errorf("startup log lacks the version and revision:\n%s", stderr.String())
	}
}

// grepLines returns the lines that start with prefix.
func grepLines(lines []string, prefix string) []string {
	var out []string
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}
