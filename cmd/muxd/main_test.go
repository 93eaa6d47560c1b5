package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/muxd/muxd/internal/testnode"
)

// fakeNode is the shared fake node, holding "slow" requests until
// releaseSlow.
type fakeNode struct {
	*testnode.Node
	slow *testnode.Holder
}

func newFakeNode(t *testing.T) *fakeNode {
	t.Helper()
	n := &fakeNode{Node: testnode.New(t), slow: testnode.NewHolder("slow")}
	n.SetHandler(n.slow.Handle)
	return n
}

// releaseSlow lets the node answer the "slow" requests it holds, and any
// later ones at once.
func (n *fakeNode) releaseSlow() { n.slow.Release() }

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb testnode.LockedBuffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestRunVersion(t *testing.T) {
	code, out, _ := runCmd(t, "version")
	if code != 0 || !strings.HasPrefix(out, "muxd ") {
		t.Fatalf("version: code %d, output %q", code, out)
	}
}

func TestRunConfigErrors(t *testing.T) {
	t.Setenv("MUXD_UPSTREAM", "")
	many := writeFile(t, "many.toml", `
upstream = "ws://node.example:8546"
request_timeout = "soon"
bogus_key = 1
listen = "nohost"
log_level = "loud"
`)
	syntax := writeFile(t, "syntax.toml", "upstream = \n")
	tests := []struct {
		name string
		args []string
		want []string // each must appear in stderr
	}{
		{"several problems at once", []string{"check", "--config", many},
			[]string{"request_timeout", `unknown option "bogus_key"`, `listen: "nohost"`, `log_level: "loud"`}},
		{"same for serve", []string{"--config", many},
			[]string{"request_timeout", "bogus_key", "nohost", "loud"}},
		{"no upstream", []string{"check"}, []string{"upstream: not set"}},
		{"syntax error", []string{"check", "--config", syntax}, []string{"syntax.toml"}},
		{"missing file", []string{"check", "--config", filepath.Join(t.TempDir(), "nope.toml")}, []string{"nope.toml"}},
		{"bad flag value", []string{"check", "--upstream", "ws://n:1", "--request-timeout", "x", "--max-batch", "y", "--log-format", "xml"},
			[]string{"--request-timeout", "--max-batch", "log_format"}},
		{"unknown flag", []string{"check", "--nope"}, []string{"nope"}},
		{"stray argument", []string{"check", "--upstream", "ws://n:1", "extra"}, []string{"1 unexpected argument"}},
		{"unknown command", []string{"frobnicate"}, []string{`unknown command "frobnicate"`}},
		{"not a websocket url", []string{"check", "--upstream", "https://n.example"}, []string{"ws:// or wss://"}},
		{"batch larger than in-flight", []string{"check", "--upstream", "ws://n:1", "--max-batch", "10", "--max-in-flight", "5"}, []string{"max_batch"}},
		{"reconnect backoff upside down", []string{"check", "--upstream", "ws://n:1", "--reconnect-initial", "20s", "--reconnect-max", "1s"}, []string{"reconnect_initial (20s) is longer than reconnect_max (1s)"}},
		{"reconnect backoff not positive", []string{"check", "--upstream", "ws://n:1", "--reconnect-initial", "0s"}, []string{"reconnect_initial: must be positive"}},
		{"waiting bound not positive", []string{"check", "--upstream", "ws://n:1", "--max-waiting", "0"}, []string{"max_waiting: must be positive"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCmd(t, tt.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
}

func TestRunCheck(t *testing.T) {
	t.Setenv("MUXD_UPSTREAM", "")
	good := writeFile(t, "good.toml", `
upstream = "ws://node.example:8546"
listen = "127.0.0.1:9999"
request_timeout = "5s"
deny_methods = ["debug_*"]
`)
	code, out, stderr := runCmd(t, "check", "--config", good)
	if code != 0 {
		t.Fatalf("check: exit %d: %s", code, stderr)
	}
	if want := "configuration ok (upstream ws://node.example:8546)\n"; firstLine(out) != want {
		t.Fatalf("check output %q, want it to start with %q", out, want)
	}
	if code, _, _ := runCmd(t, "--help"); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	// reconnect_max left at its default (2 s) follows a longer
	// reconnect_initial rather than refusing it.
	if code, _, stderr := runCmd(t, "check", "--upstream", "ws://n:1", "--reconnect-initial", "3s"); code != 0 {
		t.Fatalf("check with reconnect_initial 3s only: exit %d: %s", code, stderr)
	}
}

// TestConfigNoAliasedDefaults: a list in one config file must not leak into
// the defaults of the next load (the TOML decoder writes into slices in place).
func TestConfigNoAliasedDefaults(t *testing.T) {
	f := writeFile(t, "deny.toml", `deny_methods = ["x_*"]`+"\n"+`allowed_hosts = ["a"]`)
	cfg := defaults()
	if err := loadFile(&cfg, f); err != nil {
		t.Fatal(err)
	}
	d := defaults()
	if d.DenyMethods[0] != "admin_*" || d.AllowedHosts[0] != "localhost" {
		t.Fatalf("defaults changed by a config file: deny %v hosts %v", d.DenyMethods, d.AllowedHosts)
	}
}

func TestConfigPrecedence(t *testing.T) {
	file := writeFile(t, "m.toml", `
upstream = "ws://file.example:1"
request_timeout = "5s"
max_batch = 7
[upstream_headers]
Authorization = "Bearer file"
X-Extra = "1"
`)
	tests := []struct {
		name       string
		env        string
		args       []string
		upstream   string
		timeout    time.Duration
		maxBatch   int
		authHeader string
		extra      string
	}{
		{"file only", "", []string{"--config", file}, "ws://file.example:1", 5 * time.Second, 7, "Bearer file", "1"},
		{"flag overrides file", "", []string{"--config", file, "--request-timeout", "7s", "--max-batch", "9"}, "ws://file.example:1", 7 * time.Second, 9, "Bearer file", "1"},
		{"env overrides file", "ws://env.example:2", []string{"--config", file}, "ws://env.example:2", 5 * time.Second, 7, "Bearer file", "1"},
		{"flag overrides env", "ws://env.example:2", []string{"--config", file, "--upstream", "ws://flag.example:3"}, "ws://flag.example:3", 5 * time.Second, 7, "Bearer file", "1"},
		{"env without file", "ws://env.example:2", nil, "ws://env.example:2", 30 * time.Second, 1000, "", ""},
		{"header flag replaces file headers", "", []string{"--config", file, "--upstream-headers", "Authorization: Bearer x"}, "ws://file.example:1", 5 * time.Second, 7, "Bearer x", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("MUXD_UPSTREAM", tt.env)
			cfg, _, err := loadConfig(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			h := cfg.header()
			if len(cfg.Upstreams) != 1 || cfg.Upstreams[0].URL != tt.upstream || cfg.RequestTimeout.Duration != tt.timeout || cfg.MaxBatch != tt.maxBatch ||
				h.Get("Authorization") != tt.authHeader || h.Get("X-Extra") != tt.extra {
				t.Fatalf("got upstreams %v timeout %s batch %d headers %v", cfg.Upstreams, cfg.RequestTimeout, cfg.MaxBatch, h)
			}
		})
	}
}

func TestCheckRedactsUpstream(t *testing.T) {
	const secret = "s3cr3t"
	tests := []struct {
		name string
		env  string
		args []string
		code int
	}{
		{"check prints redacted", "", []string{"check", "--upstream", "wss://user:" + secret + "@node.example/v3/" + secret}, 0},
		{"env upstream redacted", "wss://node.example/" + secret + "?key=" + secret, []string{"check"}, 0},
		{"error redacted", "", []string{"check", "--upstream", "https://user:" + secret + "@node.example/" + secret, "--log-level", "x"}, 2},
		{"headers not printed", "", []string{"check", "--upstream", "ws://n.example:1", "--upstream-headers", "Authorization: Bearer " + secret, "--upstream-headers", "bad header: " + secret}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("MUXD_UPSTREAM", tt.env)
			code, out, stderr := runCmd(t, tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d: %s", code, tt.code, stderr)
			}
			if strings.Contains(out+stderr, secret) {
				t.Fatalf("secret in output:\n%s%s", out, stderr)
			}
			if tt.code == 0 && !strings.Contains(out, "wss://node.example/…") {
				t.Fatalf("check output %q not redacted as expected", out)
			}
		})
	}
}

var exampleOption = regexp.MustCompile(`(?m)^# ([a-z_]+) = (.*)$`)

// TestExampleConfig keeps configs/muxd.example.toml complete and right:
// every option appears, with its default, and the file validates.
func TestExampleConfig(t *testing.T) {
	const example = "../../configs/muxd.example.toml"
	data, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("MUXD_UPSTREAM", "")
	if _, _, err := loadConfig([]string{"--config", example}); err == nil || !strings.Contains(err.Error(), "upstream: not set") {
		t.Fatalf("example without upstream: %v", err)
	}
	t.Setenv("MUXD_UPSTREAM", "ws://127.0.0.1:8546")
	cfg, _, err := loadConfig([]string{"--config", example})
	if err != nil {
		t.Fatalf("example config does not validate: %v", err)
	}
	documented := map[string]bool{}
	for _, m := range exampleOption.FindAllStringSubmatch(string(data), -1) {
		documented[m[1]] = true
	}
	typ := reflect.TypeOf(Config{})
	for i := 0; i < typ.NumField(); i++ {
		if tag := typ.Field(i).Tag.Get("toml"); !documented[tag] {
			t.Errorf("option %s is not in %s (as a line \"# %s = default\")", tag, example, tag)
		}
	}
	if len(documented) != typ.NumField() {
		t.Errorf("%s documents %d options, Config has %d", example, len(documented), typ.NumField())
	}

	// Uncommented, the file must give exactly the defaults (upstream and
	// its headers are examples, not defaults).
	uncommented := exampleOption.ReplaceAllString(string(data), "$1 = $2")
	f := writeFile(t, "uncommented.toml", uncommented)
	got, _, err := loadConfig([]string{"--config", f})
	if err != nil {
		t.Fatalf("uncommented example: %v", err)
	}
	want := defaults()
	want.Upstreams, want.UpstreamHeaders = got.Upstreams, got.UpstreamHeaders
	for i := 0; i < typ.NumField(); i++ {
		g, w := reflect.ValueOf(*got).Field(i), reflect.ValueOf(want).Field(i)
		if g.Kind() == reflect.Slice && g.Len() == 0 && w.Len() == 0 {
			continue
		}
		if !reflect.DeepEqual(g.Interface(), w.Interface()) {
			t.Errorf("example shows %s = %v, default is %v", typ.Field(i).Tag.Get("toml"), g.Interface(), w.Interface())
		}
	}
	_ = cfg
}

// startServe runs muxd's serve with args until the returned cancel is called;
// it returns the bound WebSocket/HTTP address and a channel with run's exit
// code.
func startServe(t *testing.T, args ...string) (addr string, stderr *testnode.LockedBuffer, cancel context.CancelFunc, exit <-chan int) {
	t.Helper()
	addrs := make(chan net.Addr, 1)
	onListening = func(ws, ipc, metrics net.Addr) { addrs <- ws }
	t.Cleanup(func() { onListening = nil })
	ctx, cancel := context.WithCancel(context.Background())
	stderr = &testnode.LockedBuffer{}
	done := make(chan int, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		done <- run(ctx, args, io.Discard, stderr)
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
	})
	select {
	case a := <-addrs:
		return a.String(), stderr, cancel, done
	case code := <-done:
		t.Fatalf("run exited %d before listening: %s", code, stderr)
	case <-time.After(10 * time.Second):
		t.Fatal("serve never listened")
	}
	return "", nil, nil, nil
}

// TestServeGracefulShutdown: with a request in flight on HTTP and on
// WebSocket, cancelling run's context lets both be answered; the WebSocket
// is then closed with 1001 and run returns 0.
func TestServeGracefulShutdown(t *testing.T) {
	t.Setenv("MUXD_UPSTREAM", "")
	node := newFakeNode(t)
	addr, stderr, cancel, exit := startServe(t, "--upstream", node.URL, "--listen", "127.0.0.1:0",
		"--upstream-headers", "Authorization: Bearer hidden-token", "--shutdown-grace", "10s", "--log-level", "debug")

	if a := node.Conn(t, 1).Header.Get("Authorization"); a != "Bearer hidden-token" {
		t.Fatalf("upstream got Authorization %q", a)
	}

	// Bounds the client's reads, so that a lost answer fails the test
	// instead of hanging it.
	ctx, cancelReads := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancelReads)
	ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":"w","method":"slow","params":[1]}`)); err != nil {
		t.Fatal(err)
	}
	node.WaitSeen(t, "slow", 1)

	httpDone := postAsync(addr, `{"jsonrpc":"2.0","id":7,"method":"slow","params":[2]}`)
	node.WaitSeen(t, "slow", 2)
	cancel()
	// Both requests are still in flight once the shutdown has begun (its
	// log line is the only sign of that); the node answers them during the
	// grace period.
	stderr.WaitFor(t, `msg="shutting down"`)
	node.releaseSlow()

	_, msg, err := ws.Read(ctx)
	if err != nil {
		t.Fatalf("websocket client lost its in-flight answer: %v", err)
	}
	if want := `{"jsonrpc":"2.0","id":"w","result":{"method":"slow","params":[1]}}`; string(msg) != want {
		t.Fatalf("websocket answer %s, want %s", msg, want)
	}
	if _, _, err := ws.Read(ctx); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("websocket closed with %v, want close 1001 (going away)", err)
	}
	var r httpResult
	select {
	case r = <-httpDone:
	case <-ctx.Done():
		t.Fatal("HTTP client got no answer")
	}
	if r.err != nil {
		t.Fatalf("HTTP client lost its in-flight answer: %v", r.err)
	}
	if want := `{"jsonrpc":"2.0","id":7,"result":{"method":"slow","params":[2]}}`; r.body != want {
		t.Fatalf("HTTP answer %s, want %s", r.body, want)
	}
	select {
	case code := <-exit:
		if code != 0 {
			t.Fatalf("run exited %d after graceful shutdown: %s", code, stderr)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	if strings.Contains(stderr.String(), "hidden-token") {
		t.Fatalf("upstream header in the log:\n%s", stderr)
	}
}

func TestServeListenError(t *testing.T) {
	t.Setenv("MUXD_UPSTREAM", "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var errb testnode.LockedBuffer
	code := run(context.Background(), []string{"--upstream", "ws://127.0.0.1:1", "--listen", ln.Addr().String()}, io.Discard, &errb)
	if code != 1 || !strings.Contains(errb.String(), "listen") {
		t.Fatalf("exit %d, stderr %s; want 1 and a listen error", code, errb.String())
	}
}

const activationChildEnv = "MUXD_TEST_ACTIVATION_CHILD"

// TestSocketActivation passes a listening socket to a muxd process as
// systemd does (fd 3, LISTEN_FDS=1, LISTEN_FDNAMES=ws) and checks that muxd
// serves on it instead of binding its --listen address, and exits 0 on
// SIGTERM.
func TestSocketActivation(t *testing.T) {
	node := newFakeNode(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // the child's copy, fd 3, stays open

	// A --listen address that is taken: muxd would fail if it tried to bind it.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(),
		activationChildEnv+"=1",
		"MUXD_TEST_UPSTREAM="+node.URL,
		"MUXD_TEST_LISTEN="+busy.Addr().String(),
		"LISTEN_FDS=1",
		"LISTEN_FDNAMES=ws",
	)
	cmd.ExtraFiles = []*os.File{f}
	var out testnode.LockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-waited
	})

	resp, err := http.Post("http://"+addr+"/", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`))
	if err != nil {
		t.Fatalf("request through the inherited socket: %v\n%s", err, out.String())
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `{"jsonrpc":"2.0","id":1,"result":{"method":"eth_chainId","params":null}}`; string(body) != want {
		t.Fatalf("answer %s, want %s", body, want)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		waited <- err
		if err != nil {
			t.Fatalf("muxd child: %v\n%s", err, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("muxd child did not exit on SIGTERM\n%s", out.String())
	}
	if !strings.Contains(out.String(), "using listeners passed by systemd") {
		t.Fatalf("child did not report socket activation:\n%s", out.String())
	}
}

// TestMain lets the test binary double as the muxd process of
// TestSocketActivation: with activationChildEnv set it runs muxd on the
// inherited listener and exits with muxd's code instead of running tests;
// with mainChildEnv set it is muxd itself (main, its arguments after the
// binary's name), for TestSIGTERMUnderLoad.
func TestMain(m *testing.M) {
	if os.Getenv(activationChildEnv) == "1" {
		os.Exit(socketActivationChild())
	}
	if os.Getenv(mainChildEnv) == "1" {
		main() // exits with muxd's code
	}
	os.Exit(m.Run())
}

func socketActivationChild() int {
	// systemd sets LISTEN_PID to the service's pid, known only now.
	os.Setenv("LISTEN_PID", strconv.Itoa(os.Getpid()))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	return run(ctx, []string{"--upstream", os.Getenv("MUXD_TEST_UPSTREAM"), "--listen", os.Getenv("MUXD_TEST_LISTEN")}, os.Stderr, os.Stderr)
}
