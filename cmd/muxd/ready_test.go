package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/muxd/muxd/internal/testnode"
)

// served is a muxd started by startServed: its addresses, its log, and how
// to stop it.
type served struct {
	addr, metrics string
	stderr        *testnode.LockedBuffer
	cancel        context.CancelFunc
	exit          <-chan int
}

// startServed runs muxd with args and --metrics on a port of its own, and
// returns once it listens.
func startServed(t *testing.T, args ...string) served {
	t.Helper()
	type addrs struct{ ws, metrics net.Addr }
	got := make(chan addrs, 1)
	onListening = func(ws, ipc, metrics net.Addr) { got <- addrs{ws, metrics} }
	t.Cleanup(func() { onListening = nil })
	ctx, cancel := context.WithCancel(context.Background())
	stderr := &testnode.LockedBuffer{}
	exit := make(chan int, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		exit <- run(ctx, append(args, "--metrics", "localhost:0"), io.Discard, stderr)
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
	})
	select {
	case a := <-got:
		s := served{metrics: a.metrics.String(), stderr: stderr, cancel: cancel, exit: exit}
		if a.ws != nil {
			s.addr = a.ws.String()
		}
		return s
	case code := <-exit:
		t.Fatalf("run exited %d before listening: %s", code, stderr)
	case <-time.After(10 * time.Second):
		t.Fatal("serve never listened")
	}
	return served{}
}

// probe GETs path on muxd's metrics listener and returns the status and
// the body.
func (s served) probe(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.metrics + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// waitProbe waits until path answers status with a body containing body.
// Readiness changes with time and offers no event, so this polls.
func (s served) waitProbe(t *testing.T, path string, status int, body string) {
	t.Helper()
	testnode.Poll(t, path+" "+http.StatusText(status)+" "+body, func() bool {
		code, b := s.probe(t, path)
		return code == status && strings.Contains(b, body)
	})
}

// TestReadiness: /readyz follows the upstream and its heads, and answers
// 503 from the start of shutdown until exit; /healthz answers 200 all the
// while, whatever the upstream does.
func TestReadiness(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, node *fakeNode)
	}{
		{"no upstream connected", func(t *testing.T, node *fakeNode) {
			node.Refuse(true)
			s := startServed(t, "--upstream", node.URL, "--listen", "127.0.0.1:0")
			s.waitProbe(t, "/readyz", http.StatusServiceUnavailable, "no upstream connected")
			if code, _ := s.probe(t, "/healthz"); code != http.StatusOK {
				t.Fatalf("/healthz %d with the upstream down, want 200", code)
			}
		}},
		{"heads stop and come back", func(t *testing.T, node *fakeNode) {
			chain := testnode.NewChain(0)
			s := startServed(t, "--upstream", node.URL, "--listen", "127.0.0.1:0", "--head-timeout", "1s")
			// muxd's own newHeads subscription: no client subscribes.
			conn := node.Conn(t, 1)
			conn.WaitLiveSubs(t, 1)
			// The node pushes no head: once head_timeout has passed
			// since the connection, muxd is not ready.
			s.waitProbe(t, "/readyz", http.StatusServiceUnavailable, "no new head")
			if code, _ := s.probe(t, "/healthz"); code != http.StatusOK {
				t.Fatalf("/healthz %d with the upstream stalled, want 200", code)
			}
			conn.PushAll(t, string(chain.Block(1).HeaderJSON()))
			s.waitProbe(t, "/readyz", http.StatusOK, "ready")
			// And no head after it: not ready again.
			s.waitProbe(t, "/readyz", http.StatusServiceUnavailable, "no new head")
		}},
		{"shutdown drains", func(t *testing.T, node *fakeNode) {
			s := startServed(t, "--upstream", node.URL, "--listen", "127.0.0.1:0", "--shutdown-grace", "1h")
			s.waitProbe(t, "/readyz", http.StatusOK, "ready")
			answer := postAsync(s.addr, `{"jsonrpc":"2.0","id":7,"method":"slow","params":[]}`)
			node.WaitSeen(t, "slow", 1)
			s.cancel() // SIGTERM: the held call keeps muxd in its shutdown
			s.waitProbe(t, "/readyz", http.StatusServiceUnavailable, "shutting down")
			if code, _ := s.probe(t, "/healthz"); code != http.StatusOK {
				t.Fatalf("/healthz %d during shutdown, want 200", code)
			}
			node.releaseSlow()
			awaitHTTP(t, answer)
			if code := waitExit(t, s.exit, s.stderr); code != 0 {
				t.Fatalf("run exited %d, want 0:\n%s", code, s.stderr)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("MUXD_UPSTREAM", "")
			tt.run(t, newFakeNode(t))
		})
	}
}
