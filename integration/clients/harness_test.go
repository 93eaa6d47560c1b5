// Package clients_test drives muxd, in front of a real geth --dev node, with
// the client libraries people point at it (ethers 5, web3.js 4; pinned in
// package-lock.json, installed by scripts/install-node-deps.sh) and with raw
// JSON-RPC bytes over WebSocket, HTTP and IPC. Where it is useful the same
// thing runs against geth directly first, as the baseline muxd must match.
package clients_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/muxd/muxd/integration/gethnode"
	"github.com/muxd/muxd/internal/muxtest"
	"github.com/muxd/muxd/internal/testnode"
	"github.com/muxd/muxd/mux"
)

const (
	devChainID    = 1337 // geth --dev
	scriptTimeout = 3 * time.Minute
)

// harness is one geth --dev node with an in-process muxd in front of it,
// serving WebSocket and HTTP on a port picked by the kernel and IPC on a
// socket in a temporary directory.
type harness struct {
	node    *gethnode.Node
	srv     *mux.Server
	WSURL   string                 // muxd, WebSocket
	HTTPURL string                 // muxd, HTTP
	IPCPath string                 // muxd, IPC
	log     *testnode.LockedBuffer // muxd's log; printed when the test fails
}

// newHarness starts geth and muxd and waits until muxd's upstream is up.
// Everything is stopped at cleanup: the IPC listener and the HTTP server,
// then muxd, then geth (cleanups run last registered first).
func newHarness(t *testing.T) *harness {
	t.Helper()
	node := gethnode.Start(t)
	h := &harness{node: node, log: &testnode.LockedBuffer{}}
	srv, err := mux.New(mux.Config{
		Upstream: node.WSURL,
		Logger:   slog.New(slog.NewTextHandler(h.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatalf("mux.New: %v", err)
	}
	h.srv = srv
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-runDone:
		case <-time.After(15 * time.Second):
			t.Errorf("mux Server.Run did not return within 15s of cancel")
		}
		if t.Failed() {
			t.Logf("muxd log (tail):\n%s", tail(h.log.String(), 16<<10))
		}
	})

	front := httptest.NewServer(srv)
	t.Cleanup(func() {
		front.CloseClientConnections()
		front.Close()
	})
	h.HTTPURL = front.URL
	h.WSURL = "ws" + strings.TrimPrefix(front.URL, "http")

	h.IPCPath = ipcPath(t)
	ln, err := mux.ListenIPC(h.IPCPath, 0o600)
	if err != nil {
		t.Fatalf("mux.ListenIPC: %v", err)
	}
	ipcDone := make(chan error, 1)
	go func() { ipcDone <- srv.ServeIPC(ln) }()
	t.Cleanup(func() {
		ln.Close()
		if err := <-ipcDone; err != nil {
			t.Errorf("ServeIPC: %v", err)
		}
	})

	muxtest.WaitConnected(t, srv, true, 30*time.Second)
	return h
}

// ipcPath is a socket path in t.TempDir(), or in a shorter temporary
// directory when that one is too long for a Unix socket address (104 bytes
// on some systems, 108 on Linux, the terminating NUL included).
func ipcPath(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "muxd.ipc")
	if len(p) < 100 {
		return p
	}
	dir, err := os.MkdirTemp("", "muxipc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "muxd.ipc")
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// inCI reports whether CI is set to a true value, as gethnode reads it:
// there the Node packages must be installed, and their absence fails.
func inCI() bool {
	v, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && v
}

// missing reports a missing prerequisite: a failure under CI=true (CI
// installs everything, so it is a broken setup), a skip otherwise.
func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if inCI() {
		t.Fatalf("%s [CI=true: a missing prerequisite is a failure]", msg)
	}
	t.Skip(msg)
}

const installHint = "install them with `bash scripts/install-node-deps.sh` from the repository root (`make test` does it)"

// requireNode returns the path of node, once it has checked that every
// dependency package.json pins is installed in node_modules at exactly that
// version (what `npm ci` from package-lock.json leaves).
func requireNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		missing(t, "node (Node.js 20 or newer) not found on $PATH: %v", err)
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	b, err := os.ReadFile("package.json")
	if err != nil {
		t.Fatalf("reading package.json: %v", err)
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		t.Fatalf("package.json: %v", err)
	}
	if len(pkg.Dependencies) == 0 {
		t.Fatal("package.json pins no dependencies")
	}
	for name, want := range pkg.Dependencies {
		var got struct {
			Version string `json:"version"`
		}
		b, err := os.ReadFile(filepath.Join("node_modules", name, "package.json"))
		if err == nil {
			err = json.Unmarshal(b, &got)
		}
		if err != nil {
			missing(t, "npm package %s@%s is not installed in integration/clients/node_modules (%v); %s", name, want, err, installHint)
		}
		if got.Version != want {
			missing(t, "npm package %s is %s in integration/clients/node_modules, package.json pins %s; %s", name, got.Version, want, installHint)
		}
	}
	return node
}

// summary is what every script prints on stdout (lib.js).
type summary struct {
	Script   string            `json:"script"`
	Passed   int               `json:"passed"`
	Failed   int               `json:"failed"`
	Failures []json.RawMessage `json:"failures"`
	Info     map[string]any    `json:"info"`
}

// runScript runs `node script args...` in this directory, killing it after
// scriptTimeout, and fails the test (with the script's whole output) unless
// it exits 0 with a summary of passed checks and no failed ones.
func runScript(t *testing.T, node, script string, args ...string) summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{script}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Should node leave a child holding the pipes, stop waiting for them
	// shortly after it is gone.
	cmd.WaitDelay = 5 * time.Second
	began := time.Now()
	err := cmd.Run()
	took := time.Since(began).Round(time.Millisecond)
	var s summary
	jerr := json.Unmarshal(stdout.Bytes(), &s)
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("node %s %s: killed after %v\nstdout:\n%s\nstderr:\n%s", script, strings.Join(args, " "), scriptTimeout, &stdout, tail(stderr.String(), 16<<10))
	case err != nil && !errors.As(err, &exit):
		t.Fatalf("node %s: %v", script, err)
	case err != nil || jerr != nil || s.Failed != 0 || s.Passed == 0:
		why := fmt.Sprintf("%d checks failed, %d passed", s.Failed, s.Passed)
		if jerr != nil {
			why = fmt.Sprintf("no JSON summary on stdout (%v)", jerr)
		}
		if err != nil {
			why = fmt.Sprintf("%v, %s", err, why)
		}
		t.Fatalf("node %s %s: %s, after %v\nstdout:\n%s\nstderr:\n%s", script, strings.Join(args, " "), why, took, &stdout, tail(stderr.String(), 16<<10))
	}
	info, _ := json.Marshal(s.Info)
	t.Logf("node %s: %d checks passed in %v; %s", script, s.Passed, took, info)
	return s
}
