package reconnect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/coder/websocket"
)

func fastBackOff() backoff.BackOff { return &fakeBackOff{d: time.Millisecond} }

func TestRunGenerationIncrements(t *testing.T) {
	url := closingServer(t)
	s := New(Config{Dial: WebSocketDialer(url, nil, 0), NewBackOff: fastBackOff, PingInterval: -1})

	gens := make(chan uint64, 16)
	stop := runSupervisor(t, s, func(ctx context.Context, c *Conn) error {
		gens <- c.Gen
		return readUntilError(ctx, c)
	})
	var got []uint64
	for range 3 {
		got = append(got, recv(t, gens))
	}
	if !errors.Is(stop(), context.Canceled) {
		t.Error("Run did not return context.Canceled")
	}
	if want := []uint64{1, 2, 3}; !slices.Equal(got, want) {
		t.Errorf("generations = %v, want %v", got, want)
	}
}

func TestRunRetriesDialFailures(t *testing.T) {
	const failures = 3
	url := newServer(t, nil, func(c *websocket.Conn, _ *http.Request) { c.Read(t.Context()) })
	real := WebSocketDialer(url, nil, 0)
	dialErr := errors.New("connection refused (injected)")
	attempts := 0 // Dial is only called from Run's goroutine
	dial := func(ctx context.Context) (*websocket.Conn, error) {
		if attempts++; attempts <= failures {
			return nil, dialErr
		}
		return real(ctx)
	}

	b := &fakeBackOff{d: time.Millisecond}
	type dialFailure struct {
		err  error
		next time.Duration
	}
	onErr := make(chan dialFailure, 16)
	s := New(Config{
		Dial:        dial,
		NewBackOff:  func() backoff.BackOff { return b },
		OnDialError: func(err error, next time.Duration) { onErr <- dialFailure{err, next} },
	})
	connected := make(chan uint64, 1)
	stop := runSupervisor(t, s, func(ctx context.Context, c *Conn) error {
		connected <- c.Gen
		return readUntilError(ctx, c)
	})

	if gen := recv(t, connected); gen != 1 {
		t.Errorf("first successful connection has Gen %d, want 1", gen)
	}
	stop()
	close(onErr)
	n := 0
	for f := range onErr {
		n++
		if !errors.Is(f.err, dialErr) || f.next != time.Millisecond {
			t.Errorf("OnDialError(%v, %v), want (%v, %v)", f.err, f.next, dialErr, time.Millisecond)
		}
	}
	if n != failures {
		t.Errorf("OnDialError called %d times, want %d", n, failures)
	}
	if want := slices.Repeat([]string{"next"}, failures); !slices.Equal(b.Events(), want) {
		t.Errorf("backoff calls = %v, want %v", b.Events(), want)
	}
}

func TestRunResetsBackoffAfterHealthyConnection(t *testing.T) {
	tests := []struct {
		name         string
		healthyAfter time.Duration
		retired      bool     // serve reports the connection retired (ErrRetired)
		want         []string // backoff calls after losing two connections
	}{
		{"healthy", time.Nanosecond, false, []string{"reset", "next", "reset", "next"}},
		{"short-lived", time.Hour, false, []string{"next", "next"}},
		{"short-lived but retired on purpose", time.Hour, true, []string{"reset", "next", "reset", "next"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := closingServer(t)
			b := &fakeBackOff{d: time.Millisecond}
			s := New(Config{
				Dial:         WebSocketDialer(url, nil, 0),
				NewBackOff:   func() backoff.BackOff { return b },
				HealthyAfter: tt.healthyAfter,
				PingInterval: -1,
			})
			third := make(chan struct{})
			stop := runSupervisor(t, s, func(ctx context.Context, c *Conn) error {
				if c.Gen == 3 {
					close(third)
					<-ctx.Done() // stay up until Run is stopped
					return ctx.Err()
				}
				err := readUntilError(ctx, c)
				if tt.retired {
					err = fmt.Errorf("%w: %w", ErrRetired, err)
				}
				return err
			})
			recv(t, third)
			stop()
			if got := b.Events(); !slices.Equal(got, tt.want) {
				t.Errorf("backoff calls = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRunShutdownClosesConn(t *testing.T) {
	type closeInfo struct {
		code   websocket.StatusCode
		reason string
	}
	closed := make(chan closeInfo, 1)
	url := newServer(t, nil, func(c *websocket.Conn, _ *http.Request) {
		for {
			if _, _, err := c.Read(t.Context()); err != nil {
				var ce websocket.CloseError
				errors.As(err, &ce)
				closed <- closeInfo{ce.Code, ce.Reason}
				return
			}
		}
	})
	s := New(Config{Dial: WebSocketDialer(url, nil, 0), NewBackOff: fastBackOff})

	serving := make(chan struct{})
	serveReturned := make(chan error, 1)
	stop := runSupervisor(t, s, func(ctx context.Context, c *Conn) error {
		close(serving)
		err := readUntilError(ctx, c)
		serveReturned <- err
		return err
	})
	recv(t, serving)
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("Run returned %v, want context.Canceled", err)
	}
	select {
	case <-serveReturned: // serve returned before Run did
	default:
		t.Error("Run returned while serve was still running")
	}
	if got, want := recv(t, closed), (closeInfo{websocket.StatusNormalClosure, "shutdown"}); got != want {
		t.Errorf("server saw close %+v, want %+v", got, want)
	}
}

func TestRunCancelledWhileDialling(t *testing.T) {
	failed := make(chan struct{}, 16)
	s := New(Config{
		Dial: func(ctx context.Context) (*websocket.Conn, error) {
			return nil, errors.New("down")
		},
		NewBackOff:  func() backoff.BackOff { return &fakeBackOff{d: time.Hour} },
		OnDialError: func(error, time.Duration) { failed <- struct{}{} },
	})
	stop := runSupervisor(t, s, func(ctx context.Context, c *Conn) error {
		t.Error("serve called without a connection")
		return nil
	})
	recv(t, failed)
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("Run returned %v, want context.Canceled", err)
	}
}

func TestRunGivesUpWhenBackoffStops(t *testing.T) {
	dialErr := errors.New("down")
	var next time.Duration
	s := New(Config{
		Dial:        func(context.Context) (*websocket.Conn, error) { return nil, dialErr },
		NewBackOff:  func() backoff.BackOff { return &backoff.StopBackOff{} },
		OnDialError: func(_ error, n time.Duration) { next = n },
		Logger:      slog.New(slog.DiscardHandler),
	})
	err := s.Run(t.Context(), func(context.Context, *Conn) error { return nil })
	if !errors.Is(err, dialErr) {
		t.Errorf("Run returned %v, want it to wrap %v", err, dialErr)
	}
	if next != backoff.Stop {
		t.Errorf("OnDialError got next=%v, want backoff.Stop", next)
	}
}

func TestRunLogs(t *testing.T) {
	url := closingServer(t)
	logs := newLogRecorder()
	s := New(Config{
		Dial:         WebSocketDialer(url, nil, 0),
		NewBackOff:   fastBackOff,
		PingInterval: -1,
		Logger:       slog.New(logs),
	})
	runSupervisor(t, s, readUntilError)

	r := logs.next(t, "upstream connected")
	if g := attr(r, "gen"); g.Uint64() != 1 {
		t.Errorf("upstream connected gen = %v, want 1", g)
	}
	r = logs.next(t, "upstream lost")
	if g := attr(r, "gen"); g.Uint64() != 1 {
		t.Errorf("upstream lost gen = %v, want 1", g)
	}
	if err, _ := attr(r, "err").Any().(error); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Errorf("upstream lost err = %v, want the server's close frame", err)
	}
	if attr(r, "lived").Kind() != slog.KindDuration {
		t.Errorf("upstream lost has no lived duration")
	}
}
