package main

import (
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"sync"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/hashicorp/go-multierror"

	"github.com/muxd/muxd/mux"
)

// restartOnlyOptions are the options a reload (SIGHUP) cannot change:
// the sockets muxd holds, and what the listeners and each client session
// read once when they start. A reload that changes one warns and keeps
// the value muxd runs with. Every other option applies live (see
// docs/DESIGN.md, "Reload").
var restartOnlyOptions = map[string]bool{
	"listen": true, "ipc": true, "ipc_mode": true, "ipc_group": true, "metrics": true,
	"log_format":    true,
	"allowed_hosts": true, "allowed_origins": true,
	"http_read_header_timeout": true, "http_read_timeout": true, "http_idle_timeout": true,
	"http_body_bytes": true, "max_connections": true,
	"max_message_bytes": true, "outbound_queue_bytes": true, "outbound_queue_bytes_total": true,
	"slow_consumer_timeout": true, "client_ping_interval": true,
	"upstream_read_limit": true, "backfill_blocks": true, "max_upstream_in_flight": true, "history_blocks": true,
}

// keepRestartOnly sets every restart-only option of next to its value in
// cur, and returns the names of those that differed, in the order of
// Config's fields.
func keepRestartOnly(next, cur *Config) []string {
	var kept []string
	nv, cv := reflect.ValueOf(next).Elem(), reflect.ValueOf(cur).Elem()
	for i := range nv.NumField() {
		key := nv.Type().Field(i).Tag.Get("toml")
		if !restartOnlyOptions[key] || reflect.DeepEqual(nv.Field(i).Interface(), cv.Field(i).Interface()) {
			continue
		}
		kept = append(kept, key)
		nv.Field(i).Set(cv.Field(i))
	}
	return kept
}

// reloader re-reads the configuration on SIGHUP (systemctl reload) and
// applies it to the running muxd.
type reloader struct {
	log   *slog.Logger
	level *slog.LevelVar // the logger's level, changed by a reload
	srv   *mux.Server
	// load reads the configuration as at start: defaults, the file and
	// the environment read again, the flags given at start over them.
	load func() (*Config, error)

	mu  sync.Mutex
	cur *Config // the configuration in force
}

// current returns the configuration in force.
func (r *reloader) current() *Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// reload reads the configuration again and applies what can change live:
// the upstream list and its headers, the limits, the deny, retry and
// coalesce lists, the cache, timeouts, log_level, shutdown_grace. What
// needs a restart is kept, with a warning. A configuration with any
// problem changes nothing: each problem is logged. It returns whether the
// new configuration was applied. systemd hears RELOADING=1 before and
// READY=1 after.
func (r *reloader) reload() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	daemon.SdNotify(false, daemon.SdNotifyReloading)
	defer daemon.SdNotify(false, daemon.SdNotifyReady)
	r.log.Info("reloading the configuration")
	next, err := r.load()
	if err != nil {
		// Each problem on a line of its own; none quotes a secret (the
		// messages are those muxd check prints).
		var me *multierror.Error
		problems := []error{err}
		if errors.As(err, &me) {
			problems = multierror.Flatten(me).(*multierror.Error).Errors
		}
		for _, p := range problems {
			r.log.Error("reload: configuration problem", "problem", strings.TrimPrefix(p.Error(), ErrConfig.Error()+": "))
		}
		r.log.Error("reload refused: nothing changed", "problems", len(problems))
		return false
	}
	if kept := keepRestartOnly(next, r.cur); len(kept) > 0 {
		r.log.Warn("reload: these options need a restart to change; kept as they were", "options", kept)
	}
	if err := r.srv.Reconfigure(muxConfig(next, r.log, nil)); err != nil {
		r.log.Error("reload refused: nothing changed", "err", err)
		return false
	}
	r.level.Set(logLevel(next.LogLevel))
	r.cur = next
	r.log.Info("configuration reloaded", upstreamLogAttrs(next)...)
	return true
}
