// Package gethnode runs a real geth --dev node for tests.
//
// The geth binary is found by [Binary]: $MUXD_GETH, else <repo root>/.bin/geth
// (installed by `make geth`, i.e. scripts/install-geth.sh), else "geth" on $PATH.
// [Require] turns a missing binary into a skip locally and into a failure when
// CI=true.
//
// A [Node] listens on 127.0.0.1 only, on ports picked free at start, with its
// chain in a t.TempDir(). [Node.Stop] and [Node.Restart] let a test take the
// node away and bring it back on the same datadir and the same ports, so a
// client of the old WSURL can reconnect and see the chain continue.
//
// All functions that take a testing.TB call t.Fatal on error, so they must be
// called from the test's own goroutine.
package gethnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/rpc"
)

// PinnedVersion is the geth version the tests are written against. Keep it in
// step with GETH_VERSION in scripts/install-geth.sh.
const PinnedVersion = "1.17.10"

const (
	// EnvBinary names the environment variable that overrides the geth path.
	EnvBinary = "MUXD_GETH"

	readyTimeout = 60 * time.Second // bound on waiting for eth_chainId to answer
	stopGrace    = 10 * time.Second // SIGINT, then SIGKILL after this long
	logLimit     = 1 << 20          // bytes of geth output kept in memory (at least)
	logTailBytes = 8 << 10          // bytes of geth output put into failure messages
)

// Binary returns the geth path from $MUXD_GETH, else <repo root>/.bin/geth if
// it exists, else "geth" (to be looked up on $PATH). The repo root is the
// nearest directory at or above the working directory holding a go.mod.
func Binary() string {
	if p := os.Getenv(EnvBinary); p != "" {
		return p
	}
	if root := repoRoot(); root != "" {
		p := filepath.Join(root, ".bin", "geth")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	return "geth"
}

func repoRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if fi, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && !fi.IsDir() {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// inCI reports whether CI is set to a true value (CI=true, as CI systems do).
func inCI() bool {
	v, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && v
}

var versionCheck struct {
	sync.Mutex
	done map[string]error // resolved path -> result of `geth version`
	out  map[string]string
}

// Require returns the absolute path of a runnable geth (see [Binary]). If
// there is none it fails the test when CI=true (a missing geth is a CI
// failure) and skips it otherwise, saying how to install one.
func Require(t testing.TB) string {
	t.Helper()
	bin := Binary()
	path, err := exec.LookPath(bin)
	if err == nil {
		path, err = filepath.Abs(path)
	}
	if err == nil {
		var out string
		out, err = checkVersion(path)
		if err == nil && !strings.Contains(out, "Version: "+PinnedVersion) {
			report := t.Logf
			if inCI() {
				report = t.Fatalf // CI installs the pinned one; another is a broken setup
			}
			report("gethnode: %s is not geth %s (tests are pinned to it): %s", path, PinnedVersion, firstLine(out, "Version:"))
		}
	}
	if err != nil {
		msg := fmt.Sprintf("gethnode: no usable geth (%s=%q, tried %q): %v; "+
			"install the pinned geth %s with `make geth` (scripts/install-geth.sh puts it in .bin/geth) "+
			"or point %s at a geth binary", EnvBinary, os.Getenv(EnvBinary), bin, err, PinnedVersion, EnvBinary)
		if inCI() {
			t.Fatalf("%s [CI=true: a missing geth is a failure]", msg)
		}
		t.Skip(msg)
	}
	return path
}

// checkVersion runs `geth version` once per binary and caches the outcome.
func checkVersion(path string) (string, error) {
	versionCheck.Lock()
	defer versionCheck.Unlock()
	if err, ok := versionCheck.done[path]; ok {
		return versionCheck.out[path], err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "version").CombinedOutput()
	if err != nil {
		err = fmt.Errorf("%s version: %v: %s", path, err, bytes.TrimSpace(out))
	}
	if versionCheck.done == nil {
		versionCheck.done = map[string]error{}
		versionCheck.out = map[string]string{}
	}
	versionCheck.done[path], versionCheck.out[path] = err, string(out)
	return string(out), err
}

func firstLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return strings.TrimSpace(s)
}

// Node is a running (or stopped) geth --dev node.
type Node struct {
	WSURL   string // ws://127.0.0.1:<WSPort>
	HTTPURL string // http://127.0.0.1:<HTTPPort>
	DataDir string // survives Stop/Restart; removed with the test's TempDir

	WSPort, HTTPPort, AuthRPCPort int

	bin      string
	opts     Options
	identity string // --identity, so the probe knows it reached this geth
	log      *logBuffer

	mu     sync.Mutex
	proc   *process // nil while stopped
	starts int
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // cmd.Wait's result, valid after done
}

// Start starts `geth --dev --dev.period 1` on loopback with HTTP and WS
// (APIs eth,net,web3,txpool) on free ports and a fresh datadir, waits until
// the WS endpoint answers eth_chainId (at most 60 s), and registers a cleanup
// that stops it. On failure it calls t.Fatal with the tail of geth's output.
func Start(t testing.TB) *Node {
	t.Helper()
	return StartWith(t, Options{})
}

// Options change how StartWith starts geth.
type Options struct {
	// OnDemand starts geth with --dev.period 0: a block is sealed only
	// when a transaction is pending, and the testing API
	// (testing_commitBlockV1, which commits a block at once) is on HTTP
	// and WS, so a test can build a long chain in seconds.
	OnDemand bool
}

// StartWith is Start with opts.
func StartWith(t testing.TB, opts Options) *Node {
	t.Helper()
	bin := Require(t)
	n := &Node{bin: bin, log: &logBuffer{}, identity: newIdentity(), opts: opts}
	// t.TempDir registers its removal now; cleanups run last-in first-out, so
	// the stop registered below runs first and geth is gone before its
	// datadir is removed.
	base := t.TempDir()
	// On failure (including Start's and Restart's own) the cleanup logs the
	// tail of geth's output.
	t.Cleanup(func() {
		n.stop(t)
		if t.Failed() {
			t.Logf("gethnode: geth output (tail):\n%s", n.log.tail(logTailBytes))
		}
	})

	// Free ports are picked by listening on :0 and closing again, so another
	// process can grab one before geth binds it. Retry once on that.
	began := time.Now()
	var err error
	for attempt := 1; attempt <= 2; attempt++ {
		if err = n.pickPorts(); err != nil {
			t.Fatalf("gethnode: picking free ports: %v", err)
		}
		n.DataDir = filepath.Join(base, fmt.Sprintf("datadir%d", attempt))
		n.WSURL = fmt.Sprintf("ws://127.0.0.1:%d", n.WSPort)
		n.HTTPURL = fmt.Sprintf("http://127.0.0.1:%d", n.HTTPPort)
		err = n.startAndWait()
		if err == nil || !errors.Is(err, errAddrInUse) {
			break
		}
		t.Logf("gethnode: attempt %d: %v; retrying with new ports", attempt, err)
	}
	if err != nil {
		t.Fatalf("gethnode: starting geth: %v (geth output follows)", err)
	}
	t.Logf("gethnode: geth ready at %s (http %s) after %v", n.WSURL, n.HTTPURL, time.Since(began).Round(time.Millisecond))
	return n
}

// Stop stops geth (SIGINT, SIGKILL after 10 s) and waits for it to exit.
// Stopping a stopped node does nothing.
func (n *Node) Stop(t testing.TB) {
	t.Helper()
	n.stop(t)
}

// Restart starts geth again on the same datadir and the same ports (stopping
// it first if it is running) and waits until it answers. The chain and the
// dev account carry over from the previous run.
func (n *Node) Restart(t testing.TB) {
	t.Helper()
	n.stop(t)
	// The ports are ours to reuse, but something may have bound one in the
	// meantime, or the old sockets may linger a moment; retry briefly.
	began := time.Now()
	deadline := began.Add(5 * time.Second)
	for {
		err := n.startAndWait()
		if err == nil {
			t.Logf("gethnode: geth restarted at %s after %v", n.WSURL, time.Since(began).Round(time.Millisecond))
			return
		}
		if !errors.Is(err, errAddrInUse) || time.Now().After(deadline) {
			t.Fatalf("gethnode: restarting geth: %v (geth output follows)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Running reports whether the geth process is alive. Outside Start and
// Restart, alive means ready.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return false
	}
	select {
	case <-n.proc.done:
		return false
	default:
		return true
	}
}

// Log returns the geth output captured so far, across restarts (at least the
// last 1 MiB of it).
func (n *Node) Log() string { return n.log.tail(2 * logLimit) }

func (n *Node) args() []string {
	period, apis := "1", "eth,net,web3,txpool"
	if n.opts.OnDemand {
		period, apis = "0", apis+",testing"
	}
	return []string{
		"--dev",
		"--dev.period", period,
		"--datadir", n.DataDir,
		"--ipcdisable",
		"--nodiscover",
		"--maxpeers", "0",
		"--port", "0",
		"--authrpc.addr", "127.0.0.1",
		"--authrpc.port", strconv.Itoa(n.AuthRPCPort),
		"--http",
		"--http.addr", "127.0.0.1",
		"--http.port", strconv.Itoa(n.HTTPPort),
		"--http.api", apis,
		"--ws",
		"--ws.addr", "127.0.0.1",
		"--ws.port", strconv.Itoa(n.WSPort),
		"--ws.api", apis,
		"--verbosity", "2",
		"--identity", n.identity,
	}
}

// newIdentity returns a node name unique to this process and call.
func newIdentity() string {
	identSeq.Lock()
	defer identSeq.Unlock()
	identSeq.n++
	return fmt.Sprintf("muxdtest-%d-%d-%d", os.Getpid(), time.Now().UnixNano(), identSeq.n)
}

var identSeq struct {
	sync.Mutex
	n int
}

// childEnv is the test's environment without GETH_* variables: geth reads
// every flag from GETH_<FLAG> too, and the node must get exactly args().
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GETH_") {
			env = append(env, kv)
		}
	}
	return env
}

func (n *Node) pickPorts() error {
	// Hold all three listeners at once so the ports are distinct.
	var ports [3]int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	n.WSPort, n.HTTPPort, n.AuthRPCPort = ports[0], ports[1], ports[2]
	return nil
}

var errAddrInUse = errors.New("address already in use")

// startAndWait launches geth and waits until the WS endpoint answers
// eth_chainId, geth exits, or readyTimeout passes.
func (n *Node) startAndWait() error {
	n.mu.Lock()
	if n.proc != nil {
		n.mu.Unlock()
		return errors.New("geth is already running")
	}
	n.starts++
	fmt.Fprintf(n.log, "=== gethnode: start #%d: %s %s\n", n.starts, n.bin, strings.Join(n.args(), " "))
	mark := n.log.total()

	cmd := exec.Command(n.bin, n.args()...)
	cmd.Stdout = n.log
	cmd.Stderr = n.log
	cmd.Dir = n.DataDir
	cmd.Env = childEnv()
	if err := os.MkdirAll(n.DataDir, 0o700); err != nil {
		n.mu.Unlock()
		return err
	}
	if err := cmd.Start(); err != nil {
		n.mu.Unlock()
		return err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	n.proc = p
	n.mu.Unlock()

	err := waitReady(p, n.WSURL, n.identity)
	if err == nil {
		return nil
	}
	// Not ready: make sure it is gone before reporting.
	n.stopProc(p)
	n.mu.Lock()
	if n.proc == p {
		n.proc = nil
	}
	n.mu.Unlock()
	if strings.Contains(n.log.since(mark), "address already in use") {
		return fmt.Errorf("%w: %v", errAddrInUse, err)
	}
	return err
}

func waitReady(p *process, wsURL, identity string) error {
	deadline := time.Now().Add(readyTimeout)
	delay := 20 * time.Millisecond
	var lastErr error
	for {
		select {
		case <-p.done:
			return fmt.Errorf("geth exited before it was ready: %v", p.err)
		default:
		}
		lastErr = probe(p, wsURL, identity)
		if lastErr == nil {
			return nil
		}
		if time.Now().Add(delay).After(deadline) {
			return fmt.Errorf("geth not ready after %v: eth_chainId on %s: %v", readyTimeout, wsURL, lastErr)
		}
		select {
		case <-p.done:
			return fmt.Errorf("geth exited before it was ready: %v (last probe: %v)", p.err, lastErr)
		case <-time.After(delay):
		}
		delay = min(delay*2, 500*time.Millisecond)
	}
}

// probe checks that wsURL is served by this geth (web3_clientVersion carries
// our --identity: a free port picked for us may have been taken by another
// test's geth) and that it answers eth_chainId. It gives up after 3 s (the
// websocket handshake does not heed context cancellation, only the deadline)
// and, where it can, as soon as p exits.
func probe(p *process, wsURL, identity string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	c, err := rpc.DialContext(ctx, wsURL)
	if err != nil {
		return err
	}
	defer c.Close()
	var version string
	if err := c.CallContext(ctx, &version, "web3_clientVersion"); err != nil {
		return err
	}
	if !strings.Contains(version, "/"+identity+"/") {
		return fmt.Errorf("%s is served by another node (%s)", wsURL, version)
	}
	var id string
	if err := c.CallContext(ctx, &id, "eth_chainId"); err != nil {
		return err
	}
	if id == "" {
		return errors.New("empty eth_chainId result")
	}
	return nil
}

func (n *Node) stop(t testing.TB) {
	t.Helper()
	n.mu.Lock()
	p := n.proc
	n.proc = nil
	n.mu.Unlock()
	if p == nil {
		return
	}
	if killed := n.stopProc(p); killed {
		t.Logf("gethnode: geth did not exit within %v of SIGINT; killed it", stopGrace)
	}
}

// stopProc sends SIGINT, waits up to stopGrace, then kills; it returns
// whether the kill was needed. It always waits for the process to exit.
func (n *Node) stopProc(p *process) (killed bool) {
	select {
	case <-p.done:
		return false
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	timer := time.NewTimer(stopGrace)
	defer timer.Stop()
	select {
	case <-p.done:
		return false
	case <-timer.C:
		_ = p.cmd.Process.Kill()
		<-p.done
		return true
	}
}

// logBuffer is a concurrency-safe writer keeping the last logLimit bytes
// (up to twice that between trims).
type logBuffer struct {
	mu      sync.Mutex
	buf     []byte
	dropped int64 // bytes discarded from the front
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	// Trim to the last logLimit bytes once twice that has piled up, so the
	// copying is amortised.
	if len(b.buf) > 2*logLimit {
		over := len(b.buf) - logLimit
		b.buf = append(b.buf[:0], b.buf[over:]...)
		b.dropped += int64(over)
	}
	return len(p), nil
}

// total is the number of bytes ever written.
func (b *logBuffer) total() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropped + int64(len(b.buf))
}

// since returns what was written after total() returned mark (as far as kept).
func (b *logBuffer) since(mark int64) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	off := max(mark-b.dropped, 0)
	if off > int64(len(b.buf)) {
		return ""
	}
	return string(b.buf[off:])
}

func (b *logBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf
	if len(s) > n {
		s = s[len(s)-n:]
		if i := bytes.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	return string(s)
}
