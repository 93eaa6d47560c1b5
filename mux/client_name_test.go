package mux

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/muxd/muxd/core"
	"github.com/muxd/muxd/internal/testnode"
)

func TestClientName(t *testing.T) {
	rows := []struct {
		path, header, want string
	}{
		{"/", "", ""},
		{"", "", ""},
		{"/bot-a", "", "bot-a"},
		{"/bot-a/", "", "bot-a"},
		{"//bot-a", "", "bot-a"},
		{"/Bot_1.v2", "", "Bot_1.v2"},
		{"/ws/v1", "", ""}, // two segments: no name
		{"/bot a", "", ""}, // a space (decoded from %20)
		{"/bøt", "", ""},   // not ASCII
		{"/" + strings.Repeat("a", 64), "", strings.Repeat("a", 64)},
		{"/" + strings.Repeat("a", 65), "", ""},
		{"/bot-a", "indexer", "indexer"}, // the header wins
		{"/bot-a", " indexer ", "indexer"},
		{"/bot-a", "in dexer", ""}, // a bad header is no name, not the path's
		{"/", "bot-b", "bot-b"},
	}
	for _, row := range rows {
		r := &http.Request{URL: &url.URL{Path: row.path}, Header: http.Header{}}
		if row.header != "" {
			r.Header.Set(ClientNameHeader, row.header)
		}
		if got := ClientName(r); got != row.want {
			t.Errorf("path %q header %q: name %q, want %q", row.path, row.header, got, row.want)
		}
	}
}

// FuzzClientName: whatever a client sends, a name is "" or valid, never
// longer than the bound, and a valid name round-trips through the path.
func FuzzClientName(f *testing.F) {
	for _, s := range []string{"/", "/bot-a", "/a/b", "/%00", "/" + strings.Repeat("x", 70)} {
		f.Add(s, "")
		f.Add("/", s)
	}
	f.Fuzz(func(t *testing.T, path, header string) {
		r := &http.Request{URL: &url.URL{Path: path}, Header: http.Header{}}
		if header != "" {
			r.Header.Set(ClientNameHeader, header)
		}
		name := ClientName(r)
		if name == "" {
			return
		}
		if ValidClientName(name) != name || len(name) > maxClientName {
			t.Fatalf("ClientName(%q, %q) = %q, not a valid name", path, header, name)
		}
		again := &http.Request{URL: &url.URL{Path: "/" + name}, Header: http.Header{}}
		if ClientName(again) != name {
			t.Fatalf("name %q does not round-trip through the path", name)
		}
	})
}

// TestNamedClientsEndToEnd: WebSocket sessions named by their URL's path
// or the X-Muxd-Client header share their configured name's limits; an
// unconfigured name is unnamed; the per-name series count each name and
// "default".
func TestNamedClientsEndToEnd(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, harnessOpts{
		cfg: func(c *Config) {
			c.Registerer = reg
			c.Clients = map[string]core.ClientClass{"bot": {MaxInFlight: 1}}
		},
		fake: func(f *fakeUpstream) {
			f.SetHandler(func(fc *fakeConn, r fakeReq) {
				if r.Method != "hold" {
					fc.Answer(r)
				}
			})
		},
	})
	dialAs := func(path, header string) *wsClient {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		opts := &websocket.DialOptions{HTTPHeader: http.Header{}}
		if header != "" {
			opts.HTTPHeader.Set(ClientNameHeader, header)
		}
		c, _, err := websocket.Dial(ctx, h.URL+path, opts)
		if err != nil {
			t.Fatalf("dial %s: %v", path, err)
		}
		t.Cleanup(func() { c.CloseNow() })
		return &wsClient{t: t, conn: c}
	}
	byPath := dialAs("/bot", "")
	byHeader := dialAs("/", "bot")
	other := dialAs("/someone-else", "")
	byPath.send(`{"jsonrpc":"2.0","id":1,"method":"hold"}`)
	eventually(t, "the held call in flight", func() bool { return h.stats().Pending == 1 })
	wantError(t, parseResp(t, byHeader.call(`{"jsonrpc":"2.0","id":2,"method":"eth_chainId"}`)), "2", -32005, "limit exceeded")
	if r := parseResp(t, other.call(`{"jsonrpc":"2.0","id":3,"method":"eth_chainId"}`)); r.Error != nil {
		t.Fatalf("an unconfigured name is limited as the configured one: %+v", r.Error)
	}
	for _, s := range []struct {
		name, client string
		want         float64
	}{
		{"muxd_client_sessions", "bot", 2},
		{"muxd_client_sessions", "default", 1},
		{"muxd_client_in_flight", "bot", 1},
		{"muxd_client_in_flight", "default", 0},
		{"muxd_limit_exceeded_total", "", 1},
	} {
		labels := map[string]string{"client": s.client}
		if s.client == "" {
			labels = map[string]string{"limit": "client_in_flight"}
		}
		got, ok := testnode.Series(t, reg, s.name, labels)
		if !ok {
			t.Fatalf("no series %s%v", s.name, labels)
		}
		if got != s.want {
			t.Errorf("%s%v = %v, want %v", s.name, labels, got, s.want)
		}
	}
	if _, ok := testnode.Series(t, reg, "muxd_client_sessions", map[string]string{"client": "someone-else"}); ok {
		t.Error("a name not configured has a series of its own")
	}
}
