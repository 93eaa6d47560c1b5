package mux

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// serveListenForTest serves h's Server on a fresh loopback port through an
// HTTPServer, as muxd serves --listen, and returns it with its address.
func serveListenForTest(t *testing.T, h *harness) (*HTTPServer, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := h.srv.NewHTTPServer()
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	t.Cleanup(func() {
		hs.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return hs, ln.Addr().String()
}

// rawPost is an HTTP/1.1 POST of body, keep-alive.
func rawPost(body string) string {
	return fmt.Sprintf("POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

func dialTCP(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// waitClosedByServer reads (and discards) until the server closes conn,
// failing if that takes longer than testTimeout.
func waitClosedByServer(t *testing.T, conn net.Conn) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(testTimeout))
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server did not close the connection")
	}
}

// readResponse reads one HTTP response from br and its body.
func readResponse(t *testing.T, conn net.Conn, br *bufio.Reader) (*http.Response, []byte) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(testTimeout))
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read response body: %v", err)
	}
	return res, body
}

func limitHits(s *Server, limit string) float64 {
	return counterValue(s.metrics.LimitHits.WithLabelValues(limit))
}

// TestHTTPHalfCloseGetsAnswer: a client that shuts down its sending side
// after its request (net/http then cancels the request's context) still
// gets the answer, whether the node gives it later or muxd at once.
func TestHTTPHalfCloseGetsAnswer(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		held   bool // the node answers only once the half-close has been seen
		wantID string
		code   int
	}{
		{"node answers later", `{"jsonrpc":"2.0","id":1,"method":"hold"}`, true, "1", 0},
		{"batch, node answers later", `[{"jsonrpc":"2.0","id":1,"method":"hold"},{"jsonrpc":"2.0","id":2,"method":"eth_chainId"}]`, true, "", 0},
		{"muxd answers", `{"jsonrpc":"2.0","id":7,"method":"admin_peers"}`, false, "7", -32601},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hold := newHolder("hold")
			h := newHarness(t, harnessOpts{fake: func(f *fakeUpstream) { f.SetHandler(hold.Handle) }})
			hs, addr := serveListenForTest(t, h)
			// Learn when net/http has seen the half-close: it cancels the
			// request's context then.
			cancelled := make(chan struct{})
			var once sync.Once
			hs.hs.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				go func() {
					<-r.Context().Done()
					once.Do(func() { close(cancelled) })
				}()
				h.srv.ServeHTTP(w, r)
			})
			conn := dialTCP(t, addr)
			if _, err := io.WriteString(conn, rawPost(tt.body)); err != nil {
				t.Fatal(err)
			}
			if err := conn.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-cancelled:
			case <-time.After(testTimeout):
				t.Fatal("net/http never saw the half-close")
			}
			if tt.held {
				held := hold.TakeN(t, 1)[0]
				held.Conn.Answer(held.Req)
			}
			res, body := readResponse(t, conn, bufio.NewReader(conn))
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d, body %q", res.StatusCode, body)
			}
			if strings.HasPrefix(string(body), "[") {
				if rs := parseBatch(t, body); len(rs) != 2 {
					t.Fatalf("batch answer %s, want 2 elements", body)
				}
				return
			}
			r := parseResp(t, body)
			if compact(r.ID) != tt.wantID {
				t.Fatalf("answer %q, want id %s", body, tt.wantID)
			}
			if (r.Error == nil) != (tt.code == 0) || (r.Error != nil && r.Error.Code != tt.code) {
				t.Fatalf("answer %s, want code %d", body, tt.code)
			}
		})
	}
}

// TestHTTPSlowRequestClosed: a connection that does not deliver its
// headers, or its body, within the configured timeout is closed; a body of
// several MiB that arrives in time is served.
func TestHTTPSlowRequestClosed(t *testing.T) {
	big := `{"jsonrpc":"2.0","id":1,"method":"eth_call","params":["` + strings.Repeat("ab", 2<<20) + `"]}`
	tests := []struct {
		name     string
		send     string // what the client sends, and then nothing more
		status   int    // the answer expected before the close; 0 for none
		timedOut float64
	}{
		{"nothing sent", "", 0, 0},
		{"headers unfinished", "POST / HTTP/1.1\r\nHost: localhost\r\n", 0, 0},
		{"body unfinished", rawPost(`{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`)[:110], http.StatusRequestTimeout, 1},
		{"several MiB of body unfinished", rawPost(big)[:3<<20], http.StatusRequestTimeout, 1},
		// net/http drains a small body the handler left unread before it
		// answers: the body's deadline bounds that too.
		{"body unfinished on a refused request", strings.Replace(rawPost(strings.Repeat("x", 100<<10)), "POST", "PUT", 1)[:50<<10], http.StatusMethodNotAllowed, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{cfg: func(c *Config) {
				c.HTTPReadHeaderTimeout = 200 * time.Millisecond
				c.HTTPReadTimeout = 200 * time.Millisecond
				c.HTTPIdleTimeout = time.Hour
			}})
			hs, addr := serveListenForTest(t, h)
			conn := dialTCP(t, addr)
			go io.WriteString(conn, tt.send) // the server may stop reading
			br := bufio.NewReader(conn)
			if tt.status != 0 {
				// The answer may be lost to a reset: the server closes
				// with the client's bytes still arriving. The close and
				// the count are what must happen.
				conn.SetReadDeadline(time.Now().Add(testTimeout))
				res, err := http.ReadResponse(br, nil)
				var ne net.Error
				switch {
				case err == nil && res.StatusCode != tt.status:
					t.Fatalf("status %d, want %d", res.StatusCode, tt.status)
				case errors.As(err, &ne) && ne.Timeout():
					t.Fatal("no answer and no close")
				case err != nil:
					t.Logf("answer lost: %v", err)
				}
			}
			waitClosedByServer(t, conn)
			if got := limitHits(h.srv, "http_read_timeout"); got != tt.timedOut {
				t.Errorf("limit_exceeded{http_read_timeout} = %v, want %v", got, tt.timedOut)
			}
			eventually(t, "the connection to be forgotten", func() bool { return hs.OpenConnections() == 0 })
		})
	}

	t.Run("several MiB of body in time", func(t *testing.T) {
		h := newHarness(t, harnessOpts{cfg: func(c *Config) { c.HTTPReadTimeout = 5 * time.Second }})
		_, addr := serveListenForTest(t, h)
		conn := dialTCP(t, addr)
		go io.WriteString(conn, rawPost(big))
		res, body := readResponse(t, conn, bufio.NewReader(conn))
		if res.StatusCode != http.StatusOK || len(body) < 4<<20 {
			t.Fatalf("status %d, %d bytes of answer", res.StatusCode, len(body))
		}
	})
}

// TestHTTPIdleKeepAliveClosed: a keep-alive connection idle past
// HTTPIdleTimeout is closed, while a WebSocket session, which net/http no
// longer owns, outlives every one of the HTTP timeouts.
func TestHTTPIdleKeepAliveClosed(t *testing.T) {
	h := newHarness(t, harnessOpts{cfg: func(c *Config) {
		c.HTTPReadHeaderTimeout = 100 * time.Millisecond
		c.HTTPReadTimeout = 100 * time.Millisecond
		c.HTTPIdleTimeout = 200 * time.Millisecond
	}})
	hs, addr := serveListenForTest(t, h)
	ws, err := dialRaw("ws://"+addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	wc := &wsClient{t: t, conn: ws}
	wc.barrier()

	conn := dialTCP(t, addr)
	br := bufio.NewReader(conn)
	for i := range 2 { // the connection is reused, then left idle
		io.WriteString(conn, rawPost(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"eth_chainId"}`, i)))
		if res, body := readResponse(t, conn, br); res.StatusCode != http.StatusOK {
			t.Fatalf("status %d, body %q", res.StatusCode, body)
		}
	}
	waitClosedByServer(t, conn)
	// The idle timeout, longer than both read timeouts, has passed: the
	// WebSocket session must not have been cut by any of them.
	wc.barrier()
	eventually(t, "only the WebSocket connection to be open", func() bool { return hs.OpenConnections() == 1 })
}

// TestHTTPConnectionBound: every connection on the --listen address counts
// toward MaxConnections, WebSocket sessions included. At the bound the
// longest idle keep-alive connection is closed to let a new client in; with
// none idle, a new connection is refused with a 503; both are counted.
func TestHTTPConnectionBound(t *testing.T) {
	const bound = 3
	h := newHarness(t, harnessOpts{cfg: func(c *Config) { c.MaxConnections = bound }})
	hs, addr := serveListenForTest(t, h)

	// Fill the bound with keep-alive connections left idle, one after the
	// other (net/http marks a connection idle only after the client may
	// have read its answer).
	idle := make([]*net.TCPConn, bound)
	for i := range idle {
		idle[i] = dialTCP(t, addr)
		io.WriteString(idle[i], rawPost(`{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`))
		if res, body := readResponse(t, idle[i], bufio.NewReader(idle[i])); res.StatusCode != http.StatusOK {
			t.Fatalf("status %d, body %q", res.StatusCode, body)
		}
		eventually(t, "the keep-alive connection to be idle", func() bool { return hs.idleConnections() == i+1 })
	}

	// Each new WebSocket client takes the place of an idle connection,
	// the oldest first.
	for i := range bound {
		ws, err := dialRaw("ws://"+addr, nil)
		if err != nil {
			t.Fatalf("WebSocket client %d at the bound: %v", i, err)
		}
		t.Cleanup(func() { ws.CloseNow() })
		(&wsClient{t: t, conn: ws}).barrier()
		waitClosedByServer(t, idle[i])
	}
	if got := limitHits(h.srv, "idle_connections"); got != bound {
		t.Errorf("limit_exceeded{idle_connections} = %v, want %d", got, bound)
	}
	if n := hs.OpenConnections(); n != bound {
		t.Errorf("%d connections open, want %d", n, bound)
	}

	// Now nothing is idle: a new connection is refused.
	refused := dialTCP(t, addr)
	res, body := readResponse(t, refused, bufio.NewReader(refused))
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("past the bound: status %d (%q), want 503", res.StatusCode, body)
	}
	waitClosedByServer(t, refused)
	if _, err := dialRaw("ws://"+addr, nil); err == nil {
		t.Error("a WebSocket client past the bound was let in")
	}
	if got := limitHits(h.srv, "connections"); got != 2 {
		t.Errorf("limit_exceeded{connections} = %v, want 2", got)
	}
	if got := counterValue(h.srv.metrics.ListenConnections); got != bound {
		t.Errorf("muxd_listen_connections = %v, want %d", got, bound)
	}
}

// idleConnections is the number of keep-alive connections the server holds
// idle.
func (h *HTTPServer) idleConnections() int {
	h.conns.mu.Lock()
	defer h.conns.mu.Unlock()
	n := 0
	for _, e := range h.conns.conns {
		if e.idle {
			n++
		}
	}
	return n
}

// errListener fails its first Accept with err, then accepts from the
// wrapped listener.
type errListener struct {
	net.Listener
	once sync.Once
	err  error
}

func (l *errListener) Accept() (net.Conn, error) {
	var err error
	l.once.Do(func() { err = l.err })
	if err != nil {
		return nil, err
	}
	return l.Listener.Accept()
}

// TestHTTPOutOfDescriptorsReclaimsIdle: when accept fails for want of file
// descriptors, an idle keep-alive connection is closed so that the next
// accept can succeed.
func TestHTTPOutOfDescriptorsReclaimsIdle(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		reclaimed float64
	}{
		{"EMFILE", &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}, 1},
		{"ENFILE", &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.ENFILE)}, 1},
		{"another error", &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.ECONNABORTED)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMetrics(nil)
			lim := newConnLimiter(10, m, discardLogger())
			server, client := net.Pipe()
			t.Cleanup(func() { server.Close(); client.Close() })
			w, ok := lim.admit(server)
			if !ok {
				t.Fatal("not admitted")
			}
			lim.connState(w, http.StateIdle)
			ln := lim.listener(&errListener{err: tt.err})
			if _, err := ln.Accept(); !errors.Is(err, tt.err) {
				t.Fatalf("Accept: %v, want %v", err, tt.err)
			}
			if got := counterValue(m.LimitHits.WithLabelValues("idle_connections")); got != tt.reclaimed {
				t.Errorf("limit_exceeded{idle_connections} = %v, want %v", got, tt.reclaimed)
			}
			if want := 1 - int(tt.reclaimed); lim.open() != want {
				t.Errorf("%d connections open, want %d", lim.open(), want)
			}
			if tt.reclaimed == 1 {
				client.SetReadDeadline(time.Now().Add(testTimeout))
				if _, err := client.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
					t.Errorf("idle connection not closed: %v", err)
				}
			}
		})
	}
}

// TestHTTPShutdownCutsUnfinishedRequests: Shutdown does not wait for a
// client still sending its request (it would hold the shutdown for the whole
// grace period), but does wait for a request received and waiting for its
// answer, which it gets.
func TestHTTPShutdownCutsUnfinishedRequests(t *testing.T) {
	hold := newHolder("hold")
	h := newHarness(t, harnessOpts{
		cfg: func(c *Config) {
			c.HTTPReadHeaderTimeout = time.Hour
			c.HTTPReadTimeout = time.Hour
		},
		fake: func(f *fakeUpstream) { f.SetHandler(hold.Handle) },
	})
	hs, addr := serveListenForTest(t, h)
	handling := make(chan struct{}, 2)
	hs.hs.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handling <- struct{}{}
		hs.serveHTTP(w, r)
	})

	silent := dialTCP(t, addr)  // sends nothing
	headers := dialTCP(t, addr) // headers unfinished
	body := dialTCP(t, addr)    // body unfinished
	waiting := dialTCP(t, addr) // request sent, answer pending
	io.WriteString(headers, "POST / HTTP/1.1\r\nHost: localhost\r\n")
	io.WriteString(body, rawPost(`{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`)[:110])
	io.WriteString(waiting, rawPost(`{"jsonrpc":"2.0","id":"w","method":"hold"}`))
	held := hold.TakeN(t, 1)[0]
	eventually(t, "four connections", func() bool { return hs.OpenConnections() == 4 })
	for range 2 { // the unfinished body's request is being handled too
		select {
		case <-handling:
		case <-time.After(testTimeout):
			t.Fatal("requests not handled")
		}
	}

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		shut <- hs.Shutdown(ctx)
	}()
	for _, c := range []net.Conn{silent, headers, body} {
		waitClosedByServer(t, c)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with a request waiting for its answer", err)
	default:
	}
	held.Conn.Answer(held.Req)
	res, b := readResponse(t, waiting, bufio.NewReader(waiting))
	if r := parseResp(t, b); res.StatusCode != http.StatusOK || compact(r.ID) != `"w"` || r.Error != nil {
		t.Fatalf("status %d, answer %s", res.StatusCode, b)
	}
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Shutdown did not return")
	}
}

// TestHTTPTooLargeBodyAnswered: a client that sends a body past
// max_http_body_bytes while muxd answers gets the 413 every time, whether
// the body's length is announced (refused before reading) or not (refused
// at the limit), instead of a connection reset that it would take for a
// network failure (as Node's fetch did).
func TestHTTPTooLargeBodyAnswered(t *testing.T) {
	h := newHarness(t, harnessOpts{cfg: func(c *Config) { c.MaxHTTPBodyBytes = 64 << 10 }})
	_, addr := serveListenForTest(t, h)
	body := `{"jsonrpc":"2.0","id":1,"method":"web3_sha3","params":["0x` + strings.Repeat("ab", 1<<20) + `"]}`
	for _, chunked := range []bool{false, true} {
		for i := range 10 {
			var r io.Reader = strings.NewReader(body)
			if chunked {
				r = io.MultiReader(r) // no length: sent chunked
			}
			resp, err := http.Post("http://"+addr, "application/json", r)
			if err != nil {
				t.Fatalf("chunked %v, try %d: %v", chunked, i, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("chunked %v, try %d: status %d, want 413", chunked, i, resp.StatusCode)
			}
		}
	}
}

// TestHTTPAnnouncedTooLargeRefusedAtOnce: a body announced past the limit
// that never comes is refused at once, not once the body's read deadline
// has passed.
func TestHTTPAnnouncedTooLargeRefusedAtOnce(t *testing.T) {
	h := newHarness(t, harnessOpts{cfg: func(c *Config) {
		c.MaxHTTPBodyBytes = 1024
		c.HTTPReadTimeout = time.Hour // a refusal that waited for it would fail the test's guard
	}})
	_, addr := serveListenForTest(t, h)
	conn := dialTCP(t, addr)
	conn.SetDeadline(time.Now().Add(10 * time.Second)) // a guard against a hang
	io.WriteString(conn, "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 99999999999\r\n\r\n{")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no response: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", resp.StatusCode)
	}
}
