package reconnect

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/coder/websocket"
)

// TestHurryCutsThePause: while the caller hurries the supervisor (something
// waits for a connection), a dial comes HurryInterval after the last failed
// attempt, however long the backoff's pause; without it, and after a lost
// connection, the backoff's pace. The early attempts' failures are logged at the backoff's
// pace. In a synctest bubble: the times are exact.
func TestHurryCutsThePause(t *testing.T) {
	const ms = time.Millisecond
	every100From50To950 := func() (hs []time.Duration) {
		for at := 50 * ms; at < time.Second; at += 100 * ms {
			hs = append(hs, at)
		}
		return hs
	}
	tests := []struct {
		name    string
		backoff time.Duration
		// connected: the first dial connects, the connection is lost at
		// 1 s, and the later dials fail; hurryConnected: serve hurries
		// while connected.
		connected, hurryConnected bool
		hurries                   []time.Duration // when the test hurries
		watch                     time.Duration   // attempts seen until then
		want                      []time.Duration // when the dials were made
		warns                     int             // failed dials logged at Warn
	}{
		{name: "no hurry: the backoff's pace", backoff: 10 * time.Second,
			watch: 25 * time.Second, want: []time.Duration{0, 10 * time.Second, 20 * time.Second}, warns: 3},
		{name: "a hurry long after the last attempt dials at once", backoff: 10 * time.Second,
			hurries: []time.Duration{3 * time.Second}, watch: 12 * time.Second, want: []time.Duration{0, 3 * time.Second}, warns: 1},
		{name: "a hurry soon after an attempt dials HurryInterval after it", backoff: 10 * time.Second,
			hurries: []time.Duration{100 * ms}, watch: 5 * time.Second, want: []time.Duration{0, 250 * ms}, warns: 1},
		{name: "hurried all along: a dial every HurryInterval", backoff: 10 * time.Second,
			hurries: every100From50To950(), watch: 5 * time.Second,
			want: []time.Duration{0, 250 * ms, 500 * ms, 750 * ms, time.Second}, warns: 1},
		{name: "a hurry never lengthens a shorter pause", backoff: 100 * ms,
			hurries: []time.Duration{50 * ms}, watch: 350 * ms,
			want: []time.Duration{0, 100 * ms, 200 * ms, 300 * ms}, warns: 4},
		// A node that takes the WebSocket and drops it is not redialled
		// faster for requests waiting: each dial costs it a handshake. A
		// hurry still pending then cuts the pause after a failed dial.
		{name: "a hurry after a loss keeps the backoff's pause", backoff: 10 * time.Second, connected: true,
			hurries: []time.Duration{1100 * ms, 5 * time.Second}, watch: 12 * time.Second, want: []time.Duration{0, 11 * time.Second, 11*time.Second + 250*ms}, warns: 1},
		{name: "a hurry while connected is forgotten at the loss", backoff: 10 * time.Second, connected: true, hurryConnected: true,
			watch: 15 * time.Second, want: []time.Duration{0, 11 * time.Second}, warns: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				node := newPipeNode(func(c *websocket.Conn, _ *http.Request) { c.Read(context.Background()) })
				defer node.stop()
				real := webSocketDialer("ws://node.test/", nil, 0, node.dial)
				start := time.Now()
				var attempts []time.Duration // only Run's goroutine appends, until it returns
				logs := newLogRecorder()
				var s *Supervisor
				s = New(Config{
					Dial: func(ctx context.Context) (*websocket.Conn, error) {
						attempts = append(attempts, time.Since(start))
						if tt.connected && len(attempts) == 1 {
							return real(ctx)
						}
						return nil, errors.New("connection refused (injected)")
					},
					NewBackOff:   func() backoff.BackOff { return &fakeBackOff{d: tt.backoff} },
					PingInterval: -1,
					Logger:       slog.New(logs),
				})
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() {
					done <- s.Run(ctx, func(ctx context.Context, c *Conn) error {
						if tt.hurryConnected {
							s.Hurry()
						}
						time.Sleep(time.Second)
						return errors.New("lost (injected)")
					})
				}()
				for _, at := range tt.hurries {
					time.Sleep(time.Until(start.Add(at)))
					s.Hurry()
				}
				time.Sleep(time.Until(start.Add(tt.watch)))
				cancel()
				<-done
				if !slices.Equal(attempts, tt.want) {
					t.Errorf("dials at %v, want %v", attempts, tt.want)
				}
				warns := 0
				for len(logs.ch) > 0 {
					if r := <-logs.ch; r.Message == "upstream dial failed" && r.Level == slog.LevelWarn {
						warns++
					}
				}
				if warns != tt.warns {
					t.Errorf("%d failed dials logged at Warn, want %d", warns, tt.warns)
				}
			})
		})
	}
}

// TestOnDialReached: a dial reports reaching the node once its connection is
// open, before the outcome (a failure, or serve), and only then: a refused
// connection never reached it.
func TestOnDialReached(t *testing.T) {
	refused := func(t *testing.T) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		return "ws://" + addr
	}
	unavailable := func(t *testing.T) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "node starting", http.StatusServiceUnavailable)
		}))
		t.Cleanup(srv.Close)
		return "ws" + strings.TrimPrefix(srv.URL, "http")
	}
	silent := func(t *testing.T) string { // takes the connection, answers nothing
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var held sync.WaitGroup
		held.Go(func() {
			var conns []net.Conn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				conns = append(conns, c)
			}
		})
		t.Cleanup(func() { l.Close(); held.Wait() })
		return "ws://" + l.Addr().String()
	}
	up := func(t *testing.T) string {
		return newServer(t, nil, func(c *websocket.Conn, _ *http.Request) { c.Read(t.Context()) })
	}
	tests := []struct {
		name string
		node func(t *testing.T) string
		want []string
	}{
		{"refused", refused, []string{"failed"}},
		{"handshake refused", unavailable, []string{"reached", "failed"}},
		{"handshake unanswered", silent, []string{"reached", "failed"}},
		{"connected", up, []string{"reached", "serve"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var (
				mu     sync.Mutex
				events []string
			)
			record := func(ev string) {
				mu.Lock()
				events = append(events, ev)
				mu.Unlock()
			}
			outcome := make(chan struct{}, 1)
			s := New(Config{
				Dial:          WebSocketDialer(tt.node(t), nil, 0),
				NewBackOff:    func() backoff.BackOff { return &fakeBackOff{d: time.Hour} },
				DialTimeout:   300 * time.Millisecond,
				PingInterval:  -1,
				OnDialReached: func() { record("reached") },
				OnDialError:   func(error, time.Duration) { record("failed"); outcome <- struct{}{} },
			})
			stop := runSupervisor(t, s, func(ctx context.Context, c *Conn) error {
				record("serve")
				outcome <- struct{}{}
				return readUntilError(ctx, c)
			})
			recv(t, outcome)
			stop()
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(events, tt.want) {
				t.Errorf("events %v, want %v", events, tt.want)
			}
		})
	}
}

// TestAttemptReportsReachOnce: an attempt reports reaching the node at most
// once, and not at all once it has ended (net/http may open the connection
// after the attempt gave up).
func TestAttemptReportsReachOnce(t *testing.T) {
	tests := []struct {
		name  string
		steps string // r: reach, e: end
		want  int
	}{
		{"reach", "r", 1},
		{"reach twice", "rr", 1},
		{"reach then end", "re", 1},
		{"end then reach", "er", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := 0
			a := &attempt{report: func() { n++ }}
			for _, st := range tt.steps {
				if st == 'r' {
					a.reach()
				} else {
					a.end()
				}
			}
			if n != tt.want {
				t.Errorf("reported %d times, want %d", n, tt.want)
			}
		})
	}
}
