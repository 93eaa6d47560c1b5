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
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/rpc"
	"github.com/muxd/muxd/internal/testnode"
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
	out  *testnode.TailBuffer
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
	a := &anvil{cmd: cmd, done: make(chan struct{}), out: &testnode.TailBuffer{Limit: 64 << 10}}
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
