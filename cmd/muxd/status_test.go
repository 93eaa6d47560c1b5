package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestStatusEndpoint: /status tells the version, each upstream (by number
// and redacted host: no credentials, path, query or header value), the
// clients by transport, and the subscription keys with their state, a long
// key cut short; shutting down, it says not ready.
func TestStatusEndpoint(t *testing.T) {
	node := newFakeNode(t)
	const secret = "s3cret"
	url := strings.Replace(node.URL, "ws://", "ws://user:"+secret+"-pass@", 1) + "/v3/" + secret + "-key?apikey=" + secret + "-query"
	t.Setenv("MUXD_UPSTREAM", url)
	s := startServed(t, "--listen", "127.0.0.1:0", "--upstream-headers", "Authorization: Bearer "+secret+"-token", "--shutdown-grace", "1h")
	s.waitProbe(t, "/readyz", http.StatusOK, "ready")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	ws, _, err := websocket.Dial(ctx, "ws://"+s.addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	longFilter := `{"address":["0x` + strings.Repeat("ab", 20) + `","0x` + strings.Repeat("cd", 20) + `","0x` + strings.Repeat("ef", 20) + `"]}`
	for _, sub := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}`,
		`{"jsonrpc":"2.0","id":2,"method":"eth_subscribe","params":["logs",` + longFilter + `]}`,
	} {
		if err := ws.Write(ctx, websocket.MessageText, []byte(sub)); err != nil {
			t.Fatal(err)
		}
		if _, msg, err := ws.Read(ctx); err != nil || !strings.Contains(string(msg), `"result":"0x`) {
			t.Fatalf("subscribe: %s %v", msg, err)
		}
	}

	code, body := s.probe(t, "/status")
	if code != http.StatusOK {
		t.Fatalf("/status %d: %s", code, body)
	}
	for _, leak := range []string{secret, "user", "/v3", "apikey", "Bearer"} {
		if strings.Contains(body, leak) {
			t.Errorf("/status shows %q:\n%s", leak, body)
		}
	}
	var doc statusDoc
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("/status is not JSON: %v\n%s", err, body)
	}
	host := strings.TrimPrefix(node.URL, "ws://")
	tests := []struct {
		name      string
		got, want any
	}{
		{"version", doc.Version, currentBuild().Version},
		{"ready", doc.Ready, true},
		{"shutting down", doc.ShuttingDown, false},
		{"upstreams", len(doc.Upstreams), 1},
		{"upstream number", doc.Upstreams[0].Upstream, "1"},
		{"upstream host, redacted", doc.Upstreams[0].Host, "ws://" + host + "/…"},
		{"upstream active", doc.Upstreams[0].Active, true},
		{"upstream connected", doc.Upstreams[0].Connected, true},
		{"upstream healthy", doc.Upstreams[0].Healthy, true},
		{"upstream lag", doc.Upstreams[0].LagBlocks, uint64(0)},
		{"no head yet", doc.Upstreams[0].Head == nil, true},
		{"clients", doc.Clients, map[string]int{"ws": 1, "http": 0, "ipc": 0}},
		{"subscription keys", doc.SubscriptionKeys, 2},
		{"backfills", doc.BackfillsRunning, 0},
	}
	for _, tt := range tests {
		if g, w := jsonOf(tt.got), jsonOf(tt.want); g != w {
			t.Errorf("%s: %s, want %s", tt.name, g, w)
		}
	}
	var sawLogs, sawHeads bool
	for _, k := range doc.Subscriptions {
		if k.State != "live" || k.Clients != 1 {
			t.Errorf("key %q: state %s, %d clients; want live, 1", k.Key, k.State, k.Clients)
		}
		switch {
		case strings.Contains(k.Key, "newHeads"):
			sawHeads = true
		case strings.Contains(k.Key, "logs"):
			sawLogs = true
			if !k.Truncated || len(k.Key) > 120 || k.KeyBytes <= 120 {
				t.Errorf("logs key not cut short: %d bytes shown of %d (truncated %v)", len(k.Key), k.KeyBytes, k.Truncated)
			}
		}
	}
	if !sawHeads || !sawLogs {
		t.Errorf("subscriptions %+v, want the newHeads and the logs key", doc.Subscriptions)
	}

	// Shutting down (a call held keeps muxd there): not ready, and says so.
	answer := postAsync(s.addr, `{"jsonrpc":"2.0","id":7,"method":"slow","params":[]}`)
	node.WaitSeen(t, "slow", 1)
	s.cancel()
	s.waitProbe(t, "/readyz", http.StatusServiceUnavailable, "shutting down")
	_, body = s.probe(t, "/status")
	var during statusDoc
	if err := json.Unmarshal([]byte(body), &during); err != nil {
		t.Fatal(err)
	}
	if during.Ready || !during.ShuttingDown || during.NotReady != "shutting down" {
		t.Errorf("/status during shutdown: ready %v, shutting_down %v, not_ready %q", during.Ready, during.ShuttingDown, during.NotReady)
	}
	node.releaseSlow()
	awaitHTTP(t, answer)
	if code := waitExit(t, s.exit, s.stderr); code != 0 {
		t.Fatalf("run exited %d:\n%s", code, s.stderr)
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
