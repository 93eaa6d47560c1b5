package mux

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/muxd/muxd/internal/testnode"
)

// waitActive waits until upstream i is the active one.
func waitActive(t *testing.T, srv *Server, i int) {
	t.Helper()
	testnode.Await(t, fmt.Sprintf("upstream %d active", i), func() (bool, <-chan struct{}) {
		_, ch := srv.Connected()
		return srv.Active() == i, ch
	})
}

func TestFailoverSmoke(t *testing.T) {
	nodes := []*testnode.Node{testnode.New(t), testnode.New(t)}
	for i, n := range nodes {
		n.SetHandler(func(fc *testnode.Conn, r testnode.Req) {
			switch r.Method {
			case "eth_chainId":
				fc.Send(testnode.ResultFrame(r.ID, `"0x1"`))
			case "web3_clientVersion":
				fc.Send(testnode.ResultFrame(r.ID, fmt.Sprintf(`"node%d"`, i)))
			default:
				fc.Answer(r)
			}
		})
	}
	nodes[1].Refuse(true)
	srv, err := New(Config{
		Upstreams:      []Upstream{{URL: nodes[0].URL}, {URL: nodes[1].URL}},
		RequestTimeout: 10 * time.Second,
		PingInterval:   -1,
		Logger:         testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewUnstartedServer(http.HandlerFunc(srv.ServeWebSocket))
	front.Listener.Close()
	front.Listener = ln
	front.Start()
	t.Cleanup(front.Close)
	waitActive(t, srv, 0)
	nodes[1].Refuse(false)
	nodes[1].Conn(t, 1).WaitReqs(t, 2) // its health requests

	c, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(front.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	ask := func() string {
		t.Helper()
		if err := c.Write(context.Background(), websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":7,"method":"web3_clientVersion"}`)); err != nil {
			t.Fatal(err)
		}
		_, b, err := c.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := ask(); !strings.Contains(got, "node0") {
		t.Fatalf("got %s", got)
	}
	nodes[0].Refuse(true)
	nodes[0].Conn(t, 1).Drop()
	waitActive(t, srv, 1)
	if got := ask(); !strings.Contains(got, "node1") {
		t.Fatalf("got %s", got)
	}
}
