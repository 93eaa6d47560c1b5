package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/coder/websocket"

	"github.com/muxd/muxd/internal/testnode"
)

// wsClient is a WebSocket client of muxd that keeps every message it
// reads, in order.
type wsClient struct {
	c       *websocket.Conn
	mu      sync.Mutex
	msgs    []map[string]json.RawMessage
	changed chan struct{} // closed and replaced on each message
}

func dialClient(t *testing.T, addr string) *wsClient {
	t.Helper()
	c, _, err := websocket.Dial(context.Background(), "ws://"+addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	cl := &wsClient{c: c, changed: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			_, b, err := c.Read(context.Background())
			if err != nil {
				return
			}
			var m map[string]json.RawMessage
			json.Unmarshal(b, &m)
			cl.mu.Lock()
			cl.msgs = append(cl.msgs, m)
			close(cl.changed)
			cl.changed = make(chan struct{})
			cl.mu.Unlock()
		}
	}()
	t.Cleanup(func() { c.CloseNow(); <-done })
	return cl
}

// await waits until cond holds of the messages read so far.
func (cl *wsClient) await(t *testing.T, what string, cond func([]map[string]json.RawMessage) bool) {
	t.Helper()
	testnode.Await(t, what, func() (bool, <-chan struct{}) {
		cl.mu.Lock()
		defer cl.mu.Unlock()
		return cond(cl.msgs), cl.changed
	})
}

// call sends a request with id and returns its answer.
func (cl *wsClient) call(t *testing.T, id, method, params string) map[string]json.RawMessage {
	t.Helper()
	cl.send(t, `{"jsonrpc":"2.0","id":`+id+`,"method":"`+method+`","params":`+params+`}`)
	var got map[string]json.RawMessage
	cl.await(t, "the answer "+id, func(ms []map[string]json.RawMessage) bool {
		for _, m := range ms {
			if string(m["id"]) == id {
				got = m
				return true
			}
		}
		return false
	})
	return got
}

func (cl *wsClient) send(t *testing.T, msg string) {
	t.Helper()
	if err := cl.c.Write(context.Background(), websocket.MessageText, []byte(msg)); err != nil {
		t.Fatal(err)
	}
}

// heads returns the block numbers pushed to subscription sub, in order.
func (cl *wsClient) heads(sub string) []string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return headsOf(cl.msgs, sub)
}

// headsOf is heads of the messages msgs.
func headsOf(msgs []map[string]json.RawMessage, sub string) []string {
	var ns []string
	for _, m := range msgs {
		var p struct {
			Subscription json.RawMessage
			Result       struct{ Number string }
		}
		if string(m["method"]) == `"eth_subscription"` && json.Unmarshal(m["params"], &p) == nil && string(p.Subscription) == sub {
			ns = append(ns, p.Result.Number)
		}
	}
	return ns
}

// TestSIGHUPReload is issue #37's reload, end to end: a muxd process
// reading a config file, a WebSocket client holding a newHeads
// subscription. SIGHUPs to the process then:
//
//  1. an invalid file (a bad value, an unknown key, and a new upstream
//     list): every problem is logged, nothing changes: the new upstream
//     is not dialled;
//  2. the upstream list [A] becomes [B], with listen changed (warned and
//     kept: muxd still answers on its address), max_in_flight lowered to
//     1 and log_level warn: the client keeps its subscription id and gets
//     every head once, in order, across the switch; its calls are
//     answered; a second request in flight gets -32005; info lines are no
//     longer logged.
func TestSIGHUPReload(t *testing.T) {
	chain := testnode.NewChain(3)
	a, b := chain.NewNode(t, 10), chain.NewNode(t, 10)
	conf := func(upstream, listen string, inFlight int, extra string) string {
		return fmt.Sprintf("upstream = [%q]\nlisten = %q\nmax_in_flight = %d\nmax_batch = 1\n%s", upstream, listen, inFlight, extra)
	}
	file := writeFile(t, "muxd.toml", conf(a.URL, "127.0.0.1:0", 100, ""))
	child := startMuxdChild(t, "--config", file)
	cmd, out := child.cmd, child.out
	out.WaitFor(t, "transport=ws+http addr=")
	addr := regexp.MustCompile(`transport=ws\+http addr=(\S+)`).FindStringSubmatch(out.String())[1]
	reload := func(content, waitFor string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		out.WaitFor(t, waitFor) // each reload below logs its own
	}

	cl := dialClient(t, addr)
	r := cl.call(t, `"sub"`, "eth_subscribe", `["newHeads"]`)
	sub := string(r["result"])
	if sub == "" {
		t.Fatalf("subscribe: %v", r)
	}
	// The client's, and muxd's own newHeads health subscription.
	a.Conn(t, 1).WaitLiveSubs(t, 2)
	waitHead := func(h uint64) {
		t.Helper()
		cl.await(t, fmt.Sprintf("head %d", h), func(ms []map[string]json.RawMessage) bool {
			hs := headsOf(ms, sub)
			return len(hs) > 0 && hs[len(hs)-1] == fmt.Sprintf("0x%x", h)
		})
	}
	a.Advance()
	b.Advance()
	waitHead(11)

	// 1. Refused.
	reload(conf(b.URL, "127.0.0.1:0", 1, "max_waiting = -1\nbogus_option = 1\n"), "reload refused")
	for _, want := range []string{"max_waiting: must be positive", `unknown option \"bogus_option\"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the refused reload did not log %q:\n%s", want, out.String())
		}
	}
	if b.NumConns() != 0 {
		t.Error("a refused reload dialled the new upstream")
	}

	// 2. Applied.
	holder := testnode.NewHolder("eth_sendRawTransaction")
	b.SetHandler(func(fc *testnode.Conn, r testnode.Req) {
		if r.Method == "eth_sendRawTransaction" {
			holder.Handle(fc, r)
			return
		}
		b.Handle(fc, r)
	})
	t.Cleanup(holder.Release)
	reload(conf(b.URL, "127.0.0.1:1", 1, "log_level = \"warn\"\n"), "need a restart")
	if !strings.Contains(out.String(), "options=[listen]") {
		t.Errorf("the listen change was not warned:\n%s", out.String())
	}
	b.Conn(t, 1).WaitLiveSubs(t, 2)
	for range 3 {
		a.Advance()
		b.Advance()
		waitHead(b.Head())
	}
	var want []string
	for h := uint64(11); h <= b.Head(); h++ {
		want = append(want, fmt.Sprintf("0x%x", h))
	}
	if got := cl.heads(sub); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("heads across the reload: got %v, want %v (each once, in order)", got, want)
	}
	if r := cl.call(t, `"bn"`, "eth_blockNumber", `[]`); string(r["result"]) != fmt.Sprintf(`"0x%x"`, b.Head()) {
		t.Errorf("eth_blockNumber after the reload: %v", r)
	}
	// max_in_flight 1: a second request while one is in flight is refused.
	cl.send(t, `{"jsonrpc":"2.0","id":"tx","method":"eth_sendRawTransaction","params":["0x02"]}`)
	holder.TakeN(t, 1)
	if r := cl.call(t, `"bn2"`, "eth_blockNumber", `[]`); !strings.Contains(string(r["error"]), "-32005") {
		t.Errorf("a second request in flight past max_in_flight 1: %v", r)
	}
	holder.Release()
	if strings.Contains(out.String(), "configuration reloaded") {
		t.Error("an info line was logged after log_level warn")
	}
}
