package main

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/muxd/muxd/mux"
)

// httpAnswerFlush bounds how long HTTP exchanges may take to write their
// answers once every request has one, before their connections are closed:
// the same bound mux.Server gives a WebSocket or IPC client to take its last
// answers.
const httpAnswerFlush = mux.AnswerFlush

// shutdownClients is the order of a graceful shutdown, after which only the
// upstream (Run's context) and the metrics listener are left:
//
//  1. Stop accepting: the WebSocket/HTTP and IPC listeners close.
//  2. HTTP connections that owe no answer (idle, or still sending a
//     request's headers or body) close at once: nothing is in flight on
//     them, and a stalled client must not hold the shutdown.
//  3. srv.Shutdown lets the requests in flight finish within grace, answers
//     the rest with -32002 (reason "shutdown"), and every request read after
//     that at once, and closes its sessions with 1001 once their answers
//     are written.
//  4. HTTP exchanges get httpAnswerFlush to write those answers; the
//     connections of clients that do not take them are then closed.
//
// It returns what makes the shutdown unclean: a listener that would not
// close. A request answered with -32002 when the grace is over, a
// connection closed with nothing in flight and an HTTP client that does not
// read its answer are how a shutdown is meant to end, not errors.
func shutdownClients(log *slog.Logger, grace time.Duration, srv *mux.Server, httpSrv *mux.HTTPServer, ipc net.Listener) *multierror.Error {
	var errs *multierror.Error
	// httpSrv.Shutdown closes the listener at once, then waits for the
	// connections still open; stopWaiting ends the wait (step 4).
	waitCtx, stopWaiting := context.WithCancel(context.Background())
	defer stopWaiting()
	httpDone := make(chan error, 1)
	go func() { httpDone <- httpSrv.Shutdown(waitCtx) }()
	if ipc != nil {
		errs = multierror.Append(errs, ignoreClosed(ipc.Close()))
	}

	graceCtx, cancelGrace := context.WithTimeout(context.Background(), grace)
	defer cancelGrace()
	errs = multierror.Append(errs, srv.Shutdown(graceCtx))

	flush := time.NewTimer(httpAnswerFlush)
	defer flush.Stop()
	select {
	case err := <-httpDone:
		errs = multierror.Append(errs, ignoreClosed(err))
	case <-flush.C:
		// The error is waitCtx's own: the wait was cut short here.
		stopWaiting()
		<-httpDone
		log.Warn("HTTP clients did not take their answers in time, closing their connections", "after", httpAnswerFlush)
		httpSrv.Close()
	}
	return errs
}
