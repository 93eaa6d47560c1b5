package reconnect

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func TestKeepaliveDetectsDeadUpstream(t *testing.T) {
	// The server never reads, so it never answers pings.
	url := newServer(t, nil, func(*websocket.Conn, *http.Request) { <-t.Context().Done() })
	logs := newLogRecorder()
	s := New(Config{
		Dial:         WebSocketDialer(url, nil, 0),
		NewBackOff:   fastBackOff,
		PingInterval: 10 * time.Millisecond,
		PingTimeout:  50 * time.Millisecond,
		Logger:       slog.New(logs),
	})
	gens := make(chan uint64, 16)
	runSupervisor(t, s, func(ctx context.Context, c *Conn) error {
		gens <- c.Gen
		return readUntilError(ctx, c)
	})

	if g := recv(t, gens); g != 1 {
		t.Fatalf("first Gen = %d, want 1", g)
	}
	r := logs.next(t, "upstream lost")
	if err, _ := attr(r, "err").Any().(error); !errors.Is(err, ErrPingTimeout) {
		t.Errorf("upstream lost err = %v, want ErrPingTimeout", err)
	}
	if g := recv(t, gens); g != 2 {
		t.Errorf("Gen after keepalive failure = %d, want 2", g)
	}
}

func TestKeepaliveHealthyUpstream(t *testing.T) {
	pings := make(chan struct{}, 64)
	opts := &websocket.AcceptOptions{OnPingReceived: func(context.Context, []byte) bool {
		select {
		case pings <- struct{}{}:
		default:
		}
		return true
	}}
	url := newServer(t, opts, func(c *websocket.Conn, _ *http.Request) { c.Read(t.Context()) })
	s := New(Config{
		Dial:         WebSocketDialer(url, nil, 0),
		NewBackOff:   fastBackOff,
		PingInterval: 5 * time.Millisecond,
		PingTimeout:  5 * time.Second,
	})
	gens := make(chan uint64, 16)
	stop := runSupervisor(t, s, func(ctx context.Context, c *Conn) error {
		gens <- c.Gen
		return readUntilError(ctx, c)
	})

	for range 5 {
		recv(t, pings)
	}
	stop()
	if n := len(gens); n != 1 {
		t.Errorf("served %d connections, want 1 (pongs answered, no reconnect)", n)
	}
}
