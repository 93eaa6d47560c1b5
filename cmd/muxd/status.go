package main

import (
	"encoding/json"
	"net/http"
	"sync/atomic"

	"github.com/muxd/muxd/mux"
)

// statusPath is where the metrics listener serves statusHandler.
const statusPath = "/status"

// statusDoc is what /status answers: muxd's version and whether it is
// shutting down, then mux.Server's snapshot (upstreams redacted,
// subscription keys cut short).
type statusDoc struct {
	Version      string `json:"version"`
	ShuttingDown bool   `json:"shutting_down"`
	mux.Status
}

// statusHandler serves srv's status as JSON; draining is set once shutdown
// has begun, when muxd is not ready whatever its upstreams.
func statusHandler(srv *mux.Server, draining *atomic.Bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		doc := statusDoc{Version: currentBuild().Version, ShuttingDown: draining.Load(), Status: srv.Status()}
		if doc.ShuttingDown {
			doc.Ready, doc.NotReady = false, "shutting down"
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(doc)
	})
}
