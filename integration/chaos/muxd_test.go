package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/muxd/muxd/internal/testnode"
	"github.com/muxd/muxd/mux"
)

// startMuxd runs a muxd built from cfg behind a test HTTP server and
// returns it with its WebSocket URL. stop shuts muxd down (a Shutdown
// failing, or Run not returning within 10s, is its error) and then closes
// the front end; it does so once, however often it is called, and a
// cleanup calls it, dropping the error, if the test has not.
func startMuxd(t *testing.T, cfg mux.Config) (srv *mux.Server, wsURL string, stop func() error) {
	t.Helper()
	srv, err := mux.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- srv.Run(runCtx) }()
	front := httptest.NewServer(srv)
	stop = sync.OnceValue(func() error {
		defer front.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var errs []error
		if err := srv.Shutdown(sctx); err != nil {
			errs = append(errs, fmt.Errorf("Shutdown: %w", err))
		}
		stopRun()
		select {
		case <-runDone:
		case <-time.After(10 * time.Second):
			errs = append(errs, errors.New("Run did not return within 10s of its context being cancelled"))
		}
		return errors.Join(errs...)
	})
	t.Cleanup(func() { stop() })
	return srv, "ws" + strings.TrimPrefix(front.URL, "http"), stop
}

// logOnFailure returns a logger that keeps muxd's records at Info and
// above and prints them in the test's log if the test fails: quiet on
// success, the reasons on a failure (an "upstream lost" record names why
// a connection was dropped).
func logOnFailure(t *testing.T) *slog.Logger {
	t.Helper()
	var buf testnode.LockedBuffer
	// Registered before the muxd it logs for, so it runs after that
	// muxd's own cleanup has stopped it: nothing is logged once it ran.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("muxd's log:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(&buf, nil))
}
