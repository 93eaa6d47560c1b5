// Package anviltest runs muxd in front of anvil, a node that really
// reorganises its chain (anvil_reorg), and checks that subscriptions through
// muxd end exactly where the node's own chain and eth_getLogs say.
//
// anvil comes from npm, pinned in this folder's package.json and
// package-lock.json: `npm ci` here (CI runs it) installs it under
// node_modules. Without it the tests skip locally and fail under CI=true.
package anviltest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/rpc"
)

// PinnedVersion is the anvil version package.json pins.
const PinnedVersion = "1.7.1"

// installHint is the command that installs anvil for these tests.
const installHint = "cd integration/anvil && npm ci"

// anvilBinary returns the anvil binary npm installed for this platform
// (the platform package's binary, not the node wrapper in .bin: one
// process to stop). Missing, it skips the test locally and fails it under
// CI=true.
func anvilBinary(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("getwd: %v", err)
	}
	p := filepath.Join(dir, "node_modules", "@foundry-rs", "anvil-"+runtime.GOOS+"-"+runtime.GOARCH, "bin", "anvil")
	if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
		return p
	}
	msg := fmt.Sprintf("anvil %s not installed (%s): run `%s`", PinnedVersion, p, installHint)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// anvil is one anvil process mining a block every second.
type anvil struct {
	addr string // host:port
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	out  *tailBuffer
}

func (a *anvil) httpURL() string { return "http://" + a.addr }
func (a *anvil) wsURL() string   { return "ws://" + a.addr }

// startAnvil starts anvil on a port it picks itself (--port 0: the port is
// read from the line it prints), mining every second; stopped at cleanup.
func startAnvil(t *testing.T) *anvil {
	t.Helper()
	bin := anvilBinary(t)
	cmd := exec.Command(bin, "--host", "127.0.0.1", "--port", "0", "--block-time", "1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("anvil stdout: %v", err)
	}
	a := &anvil{cmd: cmd, done: make(chan struct{}), out: &tailBuffer{limit: 64 << 10}}
	cmd.Stderr = a.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start anvil: %v", err)
	}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			_, _ = a.out.Write([]byte(line + "\n"))
			if rest, ok := strings.CutPrefix(line, "Listening on "); ok {
				select {
				case listening <- strings.TrimSpace(rest):
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		_ = cmd.Wait()
		close(a.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-a.done
		}
		if t.Failed() {
			t.Logf("anvil output (tail):\n%s", a.out.String())
		}
	})
	select {
	case a.addr = <-listening:
	case <-a.done:
		t.Fatalf("anvil exited before listening:\n%s", a.out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("anvil not listening after 30 s:\n%s", a.out.String())
	}
	return a
}

// tailBuffer keeps the last limit bytes written to it.
type tailBuffer struct {
	mu    sync.Mutex
	b     []byte
	limit int
}

func (w *tailBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if len(w.b) > w.limit {
		w.b = append([]byte(nil), w.b[len(w.b)-w.limit:]...)
	}
	return len(p), nil
}

func (w *tailBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}

// dial connects an rpc.Client, closed at cleanup.
func dial(t *testing.T, url string) *rpc.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := rpc.DialContext(ctx, url)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(c.Close)
	return c
}

// call is c.CallContext with a 10 s bound, failing the test on error.
func call(t *testing.T, c *rpc.Client, result any, method string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.CallContext(ctx, result, method, args...); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
}

func hexNum(t testing.TB, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	if err != nil {
		t.Fatalf("bad quantity %q", s)
	}
	return n
}

// cutProxy forwards TCP connections to a target and can cut the path:
// every proxied connection is closed and new ones are refused until it is
// restored, as when the network between muxd and the node is down.
type cutProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   map[net.Conn]bool
	refuse  bool
	wg      sync.WaitGroup
	stopped bool
	// down records what the node sent through the proxy, connection by
	// connection, for a failure's message.
	down []*tailBuffer
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.refuse || p.stopped {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = true, true
		tap := &tailBuffer{limit: 4 << 20}
		p.down = append(p.down, tap)
		p.wg.Add(2)
		p.mu.Unlock()
		go p.copy(up, up, c)
		go p.copy(io.MultiWriter(c, tap), c, up)
	}
}

// copy copies src to w until either side ends, then closes both src and
// its peer.
func (p *cutProxy) copy(w io.Writer, peer, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(w, src)
	src.Close()
	peer.Close()
	p.mu.Lock()
	delete(p.conns, src)
	delete(p.conns, peer)
	p.mu.Unlock()
}

// downMessages returns the text messages the node sent through the proxy
// (WebSocket frames from a server are not masked), connection by
// connection.
func (p *cutProxy) downMessages() [][]string {
	p.mu.Lock()
	taps := slices.Clone(p.down)
	p.mu.Unlock()
	var out [][]string
	for _, tap := range taps {
		b := []byte(tap.String())
		if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
			b = b[i+4:] // past the upgrade response
		}
		var msgs []string
		for len(b) >= 2 {
			n, hdr := uint64(b[1]&0x7f), 2
			switch n {
			case 126:
				if len(b) < 4 {
					break
				}
				n, hdr = uint64(binary.BigEndian.Uint16(b[2:4])), 4
			case 127:
				if len(b) < 10 {
					break
				}
				n, hdr = binary.BigEndian.Uint64(b[2:10]), 10
			}
			if uint64(len(b)-hdr) < n {
				break
			}
			if b[0]&0x0f == 1 || b[0]&0x0f == 0 {
				msgs = append(msgs, string(b[hdr:hdr+int(n)]))
			}
			b = b[hdr+int(n):]
		}
		out = append(out, msgs)
	}
	return out
}

// cut closes every proxied connection and refuses new ones until restore.
func (p *cutProxy) cut() {
	p.mu.Lock()
	p.refuse = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

// restore ends a cut.
func (p *cutProxy) restore() {
	p.mu.Lock()
	p.refuse = false
	p.mu.Unlock()
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) close() {
	p.mu.Lock()
	p.stopped = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

// logContract's runtime emits LOG1 with topic calldata[0:32] and no data:
//
//	PUSH1 0 CALLDATALOAD PUSH1 0 PUSH1 0 LOG1 STOP
//
// Its init code copies those 9 bytes to memory and returns them.
const logContract = "0x6009600c60003960096000f3" + "60003560006000a100"

// topic returns the 32-byte topic i, as calldata for logContract.
func topic(i uint64) string { return fmt.Sprintf("0x%064x", i) }

// deploy deploys logContract from account from and returns its address
// once mined.
func deploy(t *testing.T, c *rpc.Client, from string) string {
	t.Helper()
	var tx string
	call(t, c, &tx, "eth_sendTransaction", map[string]any{"from": from, "data": logContract, "gas": "0x30000"})
	for range 30 {
		var rcpt struct {
			ContractAddress string `json:"contractAddress"`
		}
		call(t, c, &rcpt, "eth_getTransactionReceipt", tx)
		if rcpt.ContractAddress != "" {
			return strings.ToLower(rcpt.ContractAddress)
		}
		waitNextBlock(t, c)
	}
	t.Fatalf("deploy transaction %s not mined", tx)
	return ""
}

// waitNextBlock waits, on a newHeads subscription of c, for the next
// block.
func waitNextBlock(t *testing.T, c *rpc.Client) {
	t.Helper()
	ch := make(chan json.RawMessage, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := c.EthSubscribe(ctx, ch, "newHeads")
	if err != nil {
		t.Fatalf("eth_subscribe newHeads: %v", err)
	}
	defer sub.Unsubscribe()
	select {
	case <-ch:
	case err := <-sub.Err():
		t.Fatalf("newHeads: %v", err)
	case <-ctx.Done():
		t.Fatal("no block within 30 s")
	}
}
