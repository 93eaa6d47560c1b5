package reconnect

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/coder/websocket"
)

func TestWebSocketDialerSendsHeaders(t *testing.T) {
	got := make(chan string, 1)
	url := newServer(t, nil, func(c *websocket.Conn, r *http.Request) {
		got <- r.Header.Get("Authorization")
		c.Close(websocket.StatusNormalClosure, "")
	})
	h := http.Header{"Authorization": {"Bearer s3cret"}}
	dial := WebSocketDialer(url, h, 0)
	h.Set("Authorization", "changed after construction")

	c, err := dial(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if v := recv(t, got); v != "Bearer s3cret" {
		t.Errorf("server saw Authorization %q, want %q", v, "Bearer s3cret")
	}
}

func TestWebSocketDialerReadLimit(t *testing.T) {
	msg := bytes.Repeat([]byte("x"), 1<<20)
	url := newServer(t, nil, func(c *websocket.Conn, _ *http.Request) {
		if err := c.Write(t.Context(), websocket.MessageText, msg); err != nil {
			return
		}
		c.Read(t.Context()) // until the client goes away
	})

	tests := []struct {
		name    string
		limit   int64
		wantErr bool
	}{
		{"2MiB", 2 << 20, false},
		{"default", 0, false},
		{"512KiB", 512 << 10, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Cancel the dial ctx before reading: the connection must outlive it,
			// as Supervisor dials with a per-attempt timeout.
			dctx, cancel := context.WithCancel(t.Context())
			c, err := WebSocketDialer(url, nil, tt.limit)(dctx)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseNow()

			_, got, err := c.Read(t.Context())
			if tt.wantErr {
				if err == nil {
					t.Fatalf("read %d bytes with limit %d, want error", len(got), tt.limit)
				}
				if !strings.Contains(err.Error(), "message too big") {
					t.Errorf("read error = %v, want the read limit to be hit", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("read with limit %d: %v", tt.limit, err)
			}
			if len(got) != len(msg) {
				t.Fatalf("read %d bytes, want %d", len(got), len(msg))
			}
		})
	}
}

func TestWebSocketDialerRedactsErrors(t *testing.T) {
	// A loopback port with nothing listening.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	raw := "ws://keyuser:pa55word@" + addr + "/v3/PATHSECRET123?apikey=QUERYSECRET456"
	_, err = WebSocketDialer(raw, nil, 0)(t.Context())
	if err == nil {
		t.Fatal("dial succeeded, want error")
	}
	msg := err.Error()
	t.Log(msg)
	if want := "dial upstream ws://" + addr + "/…: "; !strings.HasPrefix(msg, want) {
		t.Errorf("error %q does not start with %q", msg, want)
	}
	for _, secret := range []string{"keyuser", "pa55word", "PATHSECRET123", "QUERYSECRET456"} {
		if strings.Contains(msg, secret) {
			t.Errorf("error leaks %q: %s", secret, msg)
		}
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("error does not wrap ECONNREFUSED: %v", err)
	}
}
