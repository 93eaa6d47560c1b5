package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/muxd/muxd/internal/testnode"
)

// waitExit waits for run's exit code; a muxd that waits out a long
// shutdown_grace fails the test here instead of hanging it.
func waitExit(t *testing.T, exit <-chan int, log *testnode.LockedBuffer) int {
	t.Helper()
	select {
	case code := <-exit:
		return code
	case <-time.After(20 * time.Second):
		t.Fatalf("run did not return after cancel:\n%s", log)
	}
	return -1
}

// postAsync posts body to muxd and delivers the answer's body.
func postAsync(addr, body string) <-chan httpResult {
	done := make(chan httpResult, 1)
	go func() {
		resp, err := http.Post("http://"+addr+"/", "application/json", strings.NewReader(body))
		if err != nil {
			done <- httpResult{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		done <- httpResult{string(b), err}
	}()
	return done
}

type httpResult struct {
	body string
	err  error
}

func awaitHTTP(t *testing.T, done <-chan httpResult) httpResult {
	t.Helper()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("HTTP client lost its answer: %v", r.err)
		}
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("HTTP client got no answer")
	}
	return httpResult{}
}

// TestShutdownHTTPHeldPastGrace: an HTTP request whose upstream answer is
// still held when shutdown_grace ends gets -32002 (reason "shutdown"), and
// muxd exits 0: a request answered by muxd itself is a clean shutdown.
func TestShutdownHTTPHeldPastGrace(t *testing.T) {
	t.Setenv("MUXD_UPSTREAM", "")
	node := newFakeNode(t)
	addr, stderr, cancel, exit := startServe(t, "--upstream", node.URL, "--listen", "127.0.0.1:0", "--shutdown-grace", "200ms")
	answer := postAsync(addr, `{"jsonrpc":"2.0","id":7,"method":"slow","params":[2]}`)
	node.WaitSeen(t, "slow", 1)
	cancel() // the node never answers "slow"

	r := awaitHTTP(t, answer)
	if want := `{"jsonrpc":"2.0","id":7,"error":{"code":-32002,"message":"upstream unavailable","data":{"reason":"shutdown"}}}`; r.body != want {
		t.Fatalf("HTTP answer %s, want %s", r.body, want)
	}
	if code := waitExit(t, exit, stderr); code != 0 {
		t.Fatalf("run exited %d, want 0:\n%s", code, stderr)
	}
}

// TestShutdownClosesIncompleteHTTPRequests: a connection that has not
// delivered a whole request (headers or body cut short, then silence) has
// nothing in flight. Shutdown closes it at once, while a request that was
// delivered still gets its answer during the grace period, and muxd exits 0
// without waiting out shutdown_grace (an hour here).
func TestShutdownClosesIncompleteHTTPRequests(t *testing.T) {
	tests := []struct {
		name string
		// stall writes a request cut short to conn, read through br, and
		// returns once muxd is known to be reading it.
		stall func(t *testing.T, conn net.Conn, br *bufio.Reader)
	}{
		{"half a body", func(t *testing.T, conn net.Conn, br *bufio.Reader) {
			// Expect: 100-continue makes the handler's first body read
			// visible: muxd answers "100 Continue" only then.
			io.WriteString(conn, "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"+
				"Content-Length: 100\r\nExpect: 100-continue\r\n\r\n")
			status, err := br.ReadString('\n')
			if err != nil || !strings.Contains(status, "100 Continue") {
				t.Fatalf("no 100 Continue: %q %v", status, err)
			}
			if _, err := br.ReadString('\n'); err != nil { // the blank line after it
				t.Fatal(err)
			}
			io.WriteString(conn, `{"jsonrpc":"2.0","id":1,`)
		}},
		{"headers cut short", func(t *testing.T, conn net.Conn, br *bufio.Reader) {
			io.WriteString(conn, "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
		}},
		{"idle keep-alive", func(t *testing.T, conn net.Conn, br *bufio.Reader) {
			io.WriteString(conn, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("MUXD_UPSTREAM", "")
			node := newFakeNode(t)
			addr, stderr, cancel, exit := startServe(t, "--upstream", node.URL, "--listen", "127.0.0.1:0", "--shutdown-grace", "1h")
			answer := postAsync(addr, `{"jsonrpc":"2.0","id":7,"method":"slow","params":[2]}`)
			node.WaitSeen(t, "slow", 1)

			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			br := bufio.NewReader(conn)
			tt.stall(t, conn, br)

			cancel()
			stderr.WaitFor(t, `msg="shutting down"`)
			// The stalled connection is closed while the delivered
			// request is still held: muxd reads EOF or a reset, never
			// the deadline set here.
			conn.SetReadDeadline(time.Now().Add(15 * time.Second))
			_, err = io.Copy(io.Discard, br)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("stalled connection still open during the grace period:\n%s", stderr)
			}

			node.releaseSlow()
			r := awaitHTTP(t, answer)
			if want := `{"jsonrpc":"2.0","id":7,"result":{"method":"slow","params":[2]}}`; r.body != want {
				t.Fatalf("HTTP answer %s, want %s", r.body, want)
			}
			if code := waitExit(t, exit, stderr); code != 0 {
				t.Fatalf("run exited %d, want 0:\n%s", code, stderr)
			}
		})
	}
}

// failingListener is the WebSocket/HTTP listener of
// TestShutdownGenuineFailureExits1: once acceptFails is closed, its next
// Accept fails for good, and its Close fails when closeFails is set.
type failingListener struct {
	net.Listener
	acceptFails chan struct{}
	closeFails  bool
}

var errListenerBroke = errors.New("listener broke")

func (l *failingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	select {
	case <-l.acceptFails:
		if c != nil {
			c.Close()
		}
		return nil, errListenerBroke
	default:
	}
	return c, err
}

func (l *failingListener) Close() error {
	err := l.Listener.Close()
	if l.closeFails {
		return errListenerBroke
	}
	return err
}

// TestShutdownGenuineFailureExits1: a listener that fails while muxd runs,
// or will not close at shutdown, still makes muxd exit 1 with the error.
func TestShutdownGenuineFailureExits1(t *testing.T) {
	tests := []struct {
		name       string
		closeFails bool
		stop       func(t *testing.T, addr string, cancel func(), l *failingListener)
	}{
		{"accept fails while running", false, func(t *testing.T, addr string, _ func(), l *failingListener) {
			close(l.acceptFails)
			if c, err := net.Dial("tcp", addr); err == nil { // wakes Accept
				c.Close()
			}
		}},
		{"close fails on SIGTERM", true, func(t *testing.T, addr string, cancel func(), _ *failingListener) {
			// Once muxd has answered, it serves on the listener (a
			// shutdown before that would never close it).
			resp, err := http.Get("http://" + addr + "/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			cancel()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("MUXD_UPSTREAM", "")
			node := newFakeNode(t)
			var fl *failingListener
			onListenersOpened = func(ls *listeners) {
				fl = &failingListener{Listener: ls.ws, acceptFails: make(chan struct{}), closeFails: tt.closeFails}
				ls.ws = fl
			}
			t.Cleanup(func() { onListenersOpened = nil })
			addr, stderr, cancel, exit := startServe(t, "--upstream", node.URL, "--listen", "127.0.0.1:0", "--shutdown-grace", "1h")
			tt.stop(t, addr, cancel, fl)
			if code := waitExit(t, exit, stderr); code != 1 {
				t.Fatalf("run exited %d, want 1:\n%s", code, stderr)
			}
			if !strings.Contains(stderr.String(), errListenerBroke.Error()) {
				t.Fatalf("the failure is not reported:\n%s", stderr)
			}
		})
	}
}

// TestShutdownHTTPSlowReader: an HTTP client that does not read its 12 MiB
// answer (more than the sockets buffer) cannot hold the shutdown: its
// connection is closed after httpAnswerFlush and muxd exits 0, without
// waiting out shutdown_grace (an hour here).
func TestShutdownHTTPSlowReader(t *testing.T) {
	t.Setenv("MUXD_UPSTREAM", "")
	node := newFakeNode(t)
	addr, stderr, cancel, exit := startServe(t, "--upstream", node.URL, "--listen", "127.0.0.1:0", "--shutdown-grace", "1h",
		"--http-body-bytes", "67108864", "--max-message-bytes", "67108864")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	body := `{"jsonrpc":"2.0","id":1,"method":"big","params":["` + strings.Repeat("x", 12<<20) + `"]}`
	go io.WriteString(conn, "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"+
		"Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	node.WaitSeen(t, "big", 1)
	cancel()
	if code := waitExit(t, exit, stderr); code != 0 {
		t.Fatalf("run exited %d, want 0:\n%s", code, stderr)
	}
	// The answer was cut short: the connection ends before 12 MiB arrive.
	conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	n, err := io.Copy(io.Discard, conn)
	if errors.Is(err, os.ErrDeadlineExceeded) || n >= 12<<20 {
		t.Fatalf("read %d bytes, then %v; want the connection closed before the whole answer", n, err)
	}
}
