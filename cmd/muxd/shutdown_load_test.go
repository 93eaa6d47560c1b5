package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/muxd/muxd/internal/testnode"
)

// mainChildEnv makes the test binary run muxd's main instead of the tests
// (TestMain): the muxd process of a test that signals a real process, with
// the test's arguments after the binary's name.
const mainChildEnv = "MUXD_TEST_MAIN_CHILD"

// muxdChild is muxd running as a child process (startMuxdChild).
type muxdChild struct {
	cmd  *exec.Cmd
	out  *testnode.LockedBuffer // its stdout and stderr
	done chan struct{}          // closed once it has exited
	err  error                  // how it exited, once done is closed
}

// startMuxdChild runs muxd with args as a child process. At cleanup it is
// sent SIGTERM and, if still running 20 s later, killed.
func startMuxdChild(t *testing.T, args ...string) *muxdChild {
	t.Helper()
	c := &muxdChild{cmd: exec.Command(os.Args[0], args...), out: new(testnode.LockedBuffer), done: make(chan struct{})}
	// A race-enabled binary sleeps a second before exiting (GORACE's
	// atexit_sleep_ms), which an exit time would count; a race found still
	// fails the test, through the exit code.
	c.cmd.Env = append(os.Environ(), mainChildEnv+"=1", "MUXD_UPSTREAM=",
		"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.err = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(20 * time.Second):
			c.cmd.Process.Kill()
			<-c.done
		}
	})
	return c
}

// loadWindow is how many requests a load client keeps unanswered.
const loadWindow = 32

// loadClient sends requests over one session without pause, keeping
// loadWindow of them unanswered, until the session ends; request i has id
// i and params [name, i]. Each answer is recorded against its id.
type loadClient struct {
	name   string
	send   func(b []byte) error
	recv   func() ([]byte, error)
	params func(i int) string // params of request i

	sent    int                  // requests written or tried (ids 0 to sent-1); set by run
	answers map[int][]loadAnswer // by id, in arrival order; the reader's until done
	bad     []string             // answers that match no request sent; the reader's until done
	end     error                // the read error that ended the session; set by the reader
	going   chan struct{}        // closed after loadWarmup answers
	done    chan struct{}        // closed once both loops have returned
	counted int                  // answers so far; the reader's
	seen    map[int]bool         // ids the node received, set by the test after done
}

// loadAnswer is one answer as a load client reads it.
type loadAnswer struct {
	result bool   // the node's echo of the request
	reason string // an error's data.reason
	code   int
}

// loadWarmup is how many answers a client takes before the test sends
// SIGTERM: the load is flowing by then.
const loadWarmup = 50

func newLoadClient(name string, send func([]byte) error, recv func() ([]byte, error)) *loadClient {
	return &loadClient{
		name: name, send: send, recv: recv,
		answers: map[int][]loadAnswer{},
		going:   make(chan struct{}),
		done:    make(chan struct{}),
		params:  func(i int) string { return fmt.Sprintf(`[%q,%d]`, name, i) },
	}
}

// run sends and reads until the session ends.
func (c *loadClient) run() {
	defer close(c.done)
	slots := make(chan struct{}, loadWindow)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for {
			b, err := c.recv()
			if err != nil {
				c.end = err
				return
			}
			c.record(b)
			select { // a slot for each request answered
			case <-slots:
			default:
			}
		}
	}()
	for i := 0; ; i++ {
		select {
		case slots <- struct{}{}:
		case <-readDone:
			c.sent = i
			return
		}
		c.sent = i + 1
		method := "test_load"
		if i == 0 {
			method = "test_hold" // the node never answers it
		}
		req := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, i, method, c.params(i))
		if err := c.send([]byte(req)); err != nil {
			<-readDone
			return
		}
	}
}

// record files one answer.
func (c *loadClient) record(b []byte) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Result *struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		} `json:"result"`
		Error *struct {
			Code int `json:"code"`
			Data struct {
				Reason string `json:"reason"`
			} `json:"data"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &m) != nil {
		c.bad = append(c.bad, string(b))
		return
	}
	id, err := strconv.Atoi(string(m.ID))
	var a loadAnswer
	switch {
	case err != nil:
		c.bad = append(c.bad, string(b))
		return
	case m.Result != nil:
		if m.Result.Method != "test_load" || string(m.Result.Params) != c.params(id) {
			c.bad = append(c.bad, string(b))
			return
		}
		a.result = true
	case m.Error != nil:
		a.code, a.reason = m.Error.Code, m.Error.Data.Reason
	}
	c.answers[id] = append(c.answers[id], a)
	c.counted++
	if c.counted == loadWarmup {
		close(c.going)
	}
}

// check reports what breaks the promise: every request muxd read has
// exactly one answer, the node's result or -32002 "shutdown". muxd reads a
// session in order and answers all it read before closing it, so the
// answered requests are the first ones sent; those after them were sent
// while the session closed, never read (a WebSocket peer may not write
// after its close frame, and nothing answers bytes that reach a closed
// socket): they never reached the node, and are at most loadWindow.
func (c *loadClient) check(t *testing.T) {
	t.Helper()
	for _, b := range c.bad {
		t.Errorf("%s: answer matching no request sent: %.300s", c.name, b)
	}
	answered, shutdownErrs := 0, 0
	var tail []int // ids with no answer
	for i := 0; i < c.sent; i++ {
		as := c.answers[i]
		switch {
		case len(as) > 1:
			t.Errorf("%s: request %d answered %d times: %+v", c.name, i, len(as), as)
		case len(as) == 1 && !as[0].result && (as[0].code != -32002 || as[0].reason != "shutdown"):
			t.Errorf("%s: request %d answered %+v, want its result or -32002 shutdown", c.name, i, as[0])
		case len(as) == 1 && !as[0].result:
			shutdownErrs++
		}
		if len(as) == 0 {
			tail = append(tail, i)
			if c.seen[i] {
				t.Errorf("%s: request %d reached the node and its session closed without its answer", c.name, i)
			}
		} else {
			answered++
			if len(tail) > 0 {
				t.Errorf("%s: request %d answered after request %d was not", c.name, i, tail[0])
			}
		}
	}
	for id := range c.answers {
		if id < 0 || id >= c.sent {
			t.Errorf("%s: answer for id %d, never sent", c.name, id)
		}
	}
	if len(tail) > loadWindow {
		t.Errorf("%s: %d requests unanswered at the close, more than the %d a client can have outstanding", c.name, len(tail), loadWindow)
	}
	t.Logf("%s: %d sent, %d answered (%d with -32002 shutdown), %d sent after the session closed; ended by %v",
		c.name, c.sent, answered, shutdownErrs, len(tail), c.end)
}

// TestSIGTERMUnderLoad: a muxd process gets SIGTERM while WebSocket and IPC
// clients send without pause, several requests in flight each, through the
// whole shutdown_grace and after it. Every request muxd reads gets exactly
// one answer, the node's result or -32002 (reason "shutdown"): none reaches
// the node without its answer reaching its client. WebSocket sessions close
// with 1001 after their last answer, and muxd exits 0 within the grace and
// its one second for the last answers.
func TestSIGTERMUnderLoad(t *testing.T) {
	const grace = time.Second
	node := testnode.New(t)
	// Each answer comes 1 to 5 ms after its request, as a node's do, in
	// no set order: under load the node always has some in hand.
	node.SetHandler(func(fc *testnode.Conn, r testnode.Req) {
		if r.Method != "test_hold" {
			time.AfterFunc(time.Millisecond+rand.N(4*time.Millisecond), func() { fc.Answer(r) })
		}
	})
	dir, err := os.MkdirTemp("", "muxd-load") // t.TempDir can pass sun_path's 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ipcPath := filepath.Join(dir, "muxd.ipc")

	child := startMuxdChild(t, "--upstream", node.URL, "--listen", "127.0.0.1:0", "--ipc", ipcPath,
		"--shutdown-grace", grace.String())
	cmd, out := child.cmd, child.out
	out.WaitFor(t, "transport=ipc")
	out.WaitFor(t, "transport=ws+http addr=")
	addr := regexp.MustCompile(`transport=ws\+http addr=(\S+)`).FindStringSubmatch(out.String())[1]

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	var clients []*loadClient
	for i := range 2 {
		ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ws.CloseNow() })
		clients = append(clients, newLoadClient(fmt.Sprintf("ws%d", i),
			func(b []byte) error { return ws.Write(ctx, websocket.MessageText, b) },
			func() ([]byte, error) {
				_, b, err := ws.Read(ctx)
				return b, err
			}))
	}
	for i := range 2 {
		conn, err := net.Dial("unix", ipcPath)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		conn.SetDeadline(time.Now().Add(60 * time.Second))
		br := bufio.NewReader(conn)
		clients = append(clients, newLoadClient(fmt.Sprintf("ipc%d", i),
			func(b []byte) error { _, err := conn.Write(append(b, '\n')); return err },
			func() ([]byte, error) { return br.ReadBytes('\n') }))
	}
	for _, c := range clients {
		go c.run()
	}
	for _, c := range clients {
		select {
		case <-c.going:
		case <-c.done:
			t.Fatalf("%s ended before the load was flowing: %v\n%s", c.name, c.end, out)
		case <-time.After(testnode.Timeout):
			t.Fatalf("%s: no load flowing\n%s", c.name, out)
		}
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	termAt := time.Now()
	var exitErr error
	select {
	case <-child.done:
		exitErr = child.err
	case <-time.After(testnode.Timeout):
		t.Fatalf("muxd did not exit on SIGTERM\n%s", out)
	}
	took := time.Since(termAt)
	for _, c := range clients {
		select {
		case <-c.done:
		case <-time.After(testnode.Timeout):
			t.Fatalf("%s still running after muxd exited", c.name)
		}
	}

	if exitErr != nil {
		t.Errorf("muxd exited with %v, want 0\n%s", exitErr, out)
	}
	// The bound is grace + 1 s; the slack only keeps a loaded machine
	// from failing the test, which is here to catch a shutdown that hangs.
	if limit := grace + time.Second + 4*time.Second; took > limit {
		t.Errorf("muxd exited %v after SIGTERM, want within %v", took, limit)
	}
	t.Logf("muxd exited %v after SIGTERM (grace %v)", took, grace)

	seen := map[string]map[int]bool{}
	for _, r := range node.Received() {
		var p []json.RawMessage
		if !strings.HasPrefix(r.Method, "test_") || json.Unmarshal(r.Params, &p) != nil || len(p) != 2 {
			continue
		}
		var name string
		var i int
		if json.Unmarshal(p[0], &name) != nil || json.Unmarshal(p[1], &i) != nil {
			continue
		}
		if seen[name] == nil {
			seen[name] = map[int]bool{}
		}
		if seen[name][i] {
			t.Errorf("%s: request %d reached the node twice", name, i)
		}
		seen[name][i] = true
	}
	for _, c := range clients {
		c.seen = seen[c.name]
		c.check(t)
		if a := c.answers[0]; len(a) != 1 || a[0].reason != "shutdown" {
			t.Errorf("%s: the request the node holds answered %+v, want -32002 shutdown", c.name, a)
		}
		switch {
		case strings.HasPrefix(c.name, "ws"):
			if websocket.CloseStatus(c.end) != websocket.StatusGoingAway {
				t.Errorf("%s: session ended by %v, want close 1001", c.name, c.end)
			}
		// A Unix socket closed with bytes unread (requests sent while it
		// closed) resets its peer once the peer has read what was written.
		case !errors.Is(c.end, io.EOF) && !errors.Is(c.end, syscall.ECONNRESET):
			t.Errorf("%s: session ended by %v, want the stream closed", c.name, c.end)
		}
	}
	// The node holds each client's first request: the grace runs to its
	// end with the load on.
	if !strings.Contains(out.String(), "shutdown grace over") {
		t.Error("the grace did not run to its end")
	}
	if t.Failed() {
		t.Logf("muxd's log:\n%s", out)
	}
}
