package reconnect

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// testTimeout bounds every wait in the tests so a bug fails instead of hanging.
const testTimeout = 10 * time.Second

// newServer starts a loopback WebSocket server whose handler runs h for every accepted
// connection (the connection is CloseNow'd when h returns) and returns its ws:// URL.
// Handlers should return once t.Context() is done.
func newServer(t *testing.T, opts *websocket.AcceptOptions, h func(c *websocket.Conn, r *http.Request)) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, opts)
		if err != nil {
			return
		}
		defer c.CloseNow()
		h(c, r)
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

// closingServer accepts and immediately closes every connection.
func closingServer(t *testing.T) string {
	return newServer(t, nil, func(c *websocket.Conn, _ *http.Request) {
		c.Close(websocket.StatusGoingAway, "bye")
	})
}

// readUntilError is a serve function body: it reads until the connection fails.
func readUntilError(ctx context.Context, c *Conn) error {
	for {
		if _, _, err := c.Read(ctx); err != nil {
			return err
		}
	}
}

// runSupervisor starts s.Run in the background and returns a function that cancels it
// and returns Run's result.
func runSupervisor(t *testing.T, s *Supervisor, serve func(context.Context, *Conn) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, serve) }()
	var once sync.Once
	var result error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case result = <-done:
			case <-time.After(testTimeout):
				t.Fatal("Run did not return after cancel")
			}
		})
		return result
	}
	t.Cleanup(func() { stop() })
	return stop
}

func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testTimeout):
		t.Fatal("timed out waiting for event")
		panic("unreachable")
	}
}

// fakeBackOff returns a fixed delay and records the calls made to it.
type fakeBackOff struct {
	mu     sync.Mutex
	d      time.Duration
	events []string
}

func (b *fakeBackOff) NextBackOff() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events = append(b.events, "next")
	return b.d
}

func (b *fakeBackOff) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events = append(b.events, "reset")
}

func (b *fakeBackOff) Events() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.events...)
}

// logRecorder is a slog.Handler that forwards every record to a channel.
type logRecorder struct{ ch chan slog.Record }

func newLogRecorder() *logRecorder { return &logRecorder{ch: make(chan slog.Record, 1024)} }

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecorder) WithGroup(string) slog.Handler            { return h }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.ch <- r.Clone():
	default:
	}
	return nil
}

// next returns the next record with message msg, skipping others.
func (h *logRecorder) next(t *testing.T, msg string) slog.Record {
	t.Helper()
	for {
		if r := recv(t, h.ch); r.Message == msg {
			return r
		}
	}
}

func attr(r slog.Record, key string) slog.Value {
	var v slog.Value
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}
