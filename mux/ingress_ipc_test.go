package mux

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// serveIPCForTest serves srv's IPC ingress on a fresh Unix socket and
// returns its path; the listener is closed at cleanup.
func serveIPCForTest(t *testing.T, srv *Server) string {
	t.Helper()
	path := IPCPathForTest(t)
	ServeIPCAtForTest(t, srv, path)
	return path
}

// IPCPathForTest returns a socket path in a fresh directory removed at
// cleanup. t.TempDir is not used: its paths can exceed sun_path's 108
// bytes. Exported, as ServeIPCAtForTest, for ingress_test.go (package
// mux_test).
func IPCPathForTest(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "muxipc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "muxd.ipc")
}

// ServeIPCAtForTest serves srv's IPC ingress on a socket at path; the
// listener is closed at cleanup, and ServeIPC must then return nil.
func ServeIPCAtForTest(t *testing.T, srv *Server, path string) {
	t.Helper()
	ln, err := ListenIPC(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeIPC(ln) }()
	t.Cleanup(func() {
		ln.Close()
		if err := <-done; err != nil {
			t.Errorf("ServeIPC: %v", err)
		}
	})
}

// dialIPCForTest serves srv's IPC ingress on a fresh socket and returns a
// client connection to it, closed at cleanup, with testTimeout as its
// deadline (a guard against a hang).
func dialIPCForTest(t *testing.T, srv *Server) net.Conn {
	t.Helper()
	path := IPCPathForTest(t)
	ServeIPCAtForTest(t, srv, path)
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(testTimeout))
	return conn
}

// readIPCUntilEOF reads newline-separated answers until the server closes
// the stream; it fails the test on any other read error. Call it from the
// test's goroutine; from another, use readIPCLines.
func readIPCUntilEOF(t *testing.T, conn net.Conn) [][]byte {
	t.Helper()
	out, err := readIPCLines(conn)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// readIPCLines reads newline-separated answers until the server closes the
// stream (or testTimeout passes). It reports instead of failing the test, so
// a goroutine can run it and hand the error to the test's goroutine.
func readIPCLines(conn net.Conn) ([][]byte, error) {
	conn.SetReadDeadline(time.Now().Add(testTimeout))
	br := bufio.NewReaderSize(conn, 1<<20)
	var out [][]byte
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && err == nil {
			out = append(out, line[:len(line)-1])
		}
		if errors.Is(err, io.EOF) {
			if len(line) > 0 {
				return out, fmt.Errorf("stream ended inside an answer (%d bytes)", len(line))
			}
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("reading answers after %d: %w", len(out), err)
		}
	}
}

// answerIDs maps each answer (each batch element) to its id, as compact
// JSON, with its error code (0 for a result).
func answerIDs(t *testing.T, answers [][]byte) map[string]int {
	t.Helper()
	ids := map[string]int{}
	add := func(b []byte) {
		r := parseResp(t, b)
		code := 0
		if r.Error != nil {
			code = r.Error.Code
		}
		id := compact(r.ID)
		if _, dup := ids[id]; dup && id != "null" {
			t.Errorf("id %s answered twice", id)
		}
		if id == "null" {
			id = fmt.Sprintf("null#%d", len(ids))
		}
		ids[id] = code
	}
	for _, a := range answers {
		if strings.HasPrefix(string(a), "[") {
			for _, e := range parseBatch(t, a) {
				raw, _ := json.Marshal(e)
				add(raw)
			}
			continue
		}
		add(a)
	}
	return ids
}

// sessionsFinishing reports whether every session has been asked to finish
// (or none is left): the IPC reader has seen its client's EOF.
func (h *harness) sessionsFinishing() bool {
	var cs []*Client
	h.srv.peersMu.RLock()
	for _, c := range h.srv.peers {
		cs = append(cs, c)
	}
	h.srv.peersMu.RUnlock()
	for _, c := range cs {
		c.finishMu.Lock()
		f := c.finishing
		c.finishMu.Unlock()
		if !f {
			return false
		}
	}
	return true
}

// TestIPCHalfCloseGetsEveryAnswer: a client that sends its requests and then
// shuts down its sending side (socat, nc -N) is still owed an answer to each,
// whether the node answers it later, muxd answers it at once, it is part of a
// batch, or it is never answered and times out; then the stream ends.
func TestIPCHalfCloseGetsEveryAnswer(t *testing.T) {
	big := strings.Repeat("ab", 3<<20) // a 6 MiB parameter, echoed back
	tests := []struct {
		name    string
		timeout time.Duration // request_timeout
		send    []string
		held    int            // requests the node holds until the client has half-closed
		want    map[string]int // id -> error code (0: a result)
	}{
		{
			name:    "held, own answers, batch, large",
			timeout: 10 * time.Second,
			send: []string{
				`{"jsonrpc":"2.0","id":1,"method":"hold","params":[]}`,
				`{"jsonrpc":"2.0","id":2,"method":"hold","params":["` + big + `"]}`,
				`{"jsonrpc":"2.0","id":"x","method":"eth_chainId"}`,
				`{"jsonrpc":"1.0","id":3,"method":"eth_chainId"}`,
				`{"jsonrpc":"2.0","id":4,"method":"admin_peers"}`,
				`{"jsonrpc":"2.0","method":"hold"}`,
				`[{"jsonrpc":"2.0","id":10,"method":"hold"},{"jsonrpc":"2.0","id":11,"method":"eth_blockNumber"},{"jsonrpc":"2.0","id":12,"method":"eth_getBalance","params":["` + big + `"]}]`,
			},
			held: 3, // 1, 2, 10 (the notification is not answered)
			want: map[string]int{"1": 0, "2": 0, `"x"`: 0, "3": -32600, "4": -32601, "10": 0, "11": 0, "12": 0},
		},
		{
			name:    "never answered: times out",
			timeout: 300 * time.Millisecond,
			send: []string{
				`{"jsonrpc":"2.0","id":1,"method":"never"}`,
				`[{"jsonrpc":"2.0","id":2,"method":"never"},{"jsonrpc":"2.0","id":3,"method":"eth_chainId"}]`,
				`{"jsonrpc":"2.0","id":4,"method":"x","params":1}`,
			},
			want: map[string]int{"1": -32002, "2": -32002, "3": 0, "4": -32600},
		},
		{
			name:    "only muxd's own answers",
			timeout: 10 * time.Second,
			send: []string{
				`{"jsonrpc":"2.0","id":1,"method":"admin_peers"}`,
				`[]`,
				`{"jsonrpc":"2.0","id":2}`,
			},
			want: map[string]int{"1": -32601, "null#1": -32600, "2": -32600},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var held []fakeReq
			var heldConn *fakeConn
			h := newHarness(t, harnessOpts{
				cfg: func(c *Config) { c.RequestTimeout = tt.timeout },
				fake: func(f *fakeUpstream) {
					f.SetHandler(func(fc *fakeConn, r fakeReq) {
						switch r.Method {
						case "never":
						case "hold":
							if r.IsNotification() {
								return
							}
							mu.Lock()
							held, heldConn = append(held, r), fc
							mu.Unlock()
						default:
							fc.Answer(r)
						}
					})
				},
			})
			path := serveIPCForTest(t, h.srv)
			conn, err := net.Dial("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			// Write from a goroutine: muxd answers while the client
			// sends, and the answers are larger than a socket buffer.
			wrote := make(chan error, 1)
			go func() {
				var err error
				for _, m := range tt.send {
					if _, err = io.WriteString(conn, m+"\n"); err != nil {
						break
					}
				}
				if err == nil {
					err = conn.(*net.UnixConn).CloseWrite()
				}
				wrote <- err
			}()
			type readResult struct {
				answers [][]byte
				err     error
			}
			read := make(chan readResult, 1)
			go func() {
				a, err := readIPCLines(conn)
				read <- readResult{a, err}
			}()
			if err := <-wrote; err != nil {
				t.Fatalf("send: %v", err)
			}
			if tt.held > 0 {
				h.fake.Wait(t, "the held requests", func() bool {
					mu.Lock()
					defer mu.Unlock()
					return len(held) >= tt.held
				})
				// The session has seen the client's EOF by now or is
				// about to: the node answers only after it.
				eventually(t, "the client's EOF to be read", h.sessionsFinishing)
				mu.Lock()
				for _, r := range held {
					heldConn.Answer(r)
				}
				mu.Unlock()
			}
			r := <-read
			if r.err != nil {
				t.Fatal(r.err)
			}
			got := answerIDs(t, r.answers)
			if len(got) != len(tt.want) {
				t.Errorf("got %d answers %v, want %d %v", len(got), got, len(tt.want), tt.want)
			}
			for id, code := range tt.want {
				if c, ok := got[id]; !ok {
					t.Errorf("no answer for id %s", id)
				} else if c != code {
					t.Errorf("id %s: code %d, want %d", id, c, code)
				}
			}
			eventually(t, "the session to end", func() bool { return len(h.clientIDs()) == 0 })
		})
	}
}

// TestIPCHalfCloseReleasesSubscriptions: a half-closed client cannot
// unsubscribe, so once it has been given every answer owed its session ends
// and its subscription is released upstream.
func TestIPCHalfCloseReleasesSubscriptions(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	path := serveIPCForTest(t, h.srv)
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, `{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}`+"\n"); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	answers := readIPCUntilEOF(t, conn)
	if len(answers) == 0 {
		t.Fatal("no answer to eth_subscribe")
	}
	if r := parseResp(t, answers[0]); r.Error != nil || compact(r.ID) != "1" {
		t.Fatalf("eth_subscribe answered %s", answers[0])
	}
	fc := h.fake.Conn(t, 1)
	h.fake.Wait(t, "the subscription to be released upstream", func() bool { return len(fc.LiveSubs()) == 0 && len(fc.Unsubs()) == 1 })
}
