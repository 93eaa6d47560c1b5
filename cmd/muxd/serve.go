package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/hashicorp/go-multierror"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/muxd/muxd/mux"
)

// newLogger returns muxd's logger, and its level, which a reload changes.
func newLogger(cfg *Config, w io.Writer) (*slog.Logger, *slog.LevelVar) {
	level := new(slog.LevelVar)
	level.Set(logLevel(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), level
	}
	return slog.New(slog.NewTextHandler(w, opts)), level
}

// logLevel is log_level (validated before) as a slog.Level.
func logLevel(s string) slog.Level {
	var level slog.Level
	level.UnmarshalText([]byte(strings.ToLower(s)))
	return level
}

// listeners are the sockets muxd serves: inherited from systemd socket
// activation (names "ws" and "ipc") when present, bound otherwise.
type listeners struct {
	ws, ipc, metrics net.Listener
	activated        bool
}

func openListeners(cfg *Config, log *slog.Logger) (*listeners, error) {
	ls := &listeners{}
	named, err := activation.ListenersWithNames()
	if err != nil {
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	if l := named["ws"]; len(l) > 0 {
		ls.ws, ls.activated = l[0], true
	}
	if l := named["ipc"]; len(l) > 0 {
		ls.ipc, ls.activated = l[0], true
	}
	var errs *multierror.Error
	if ls.ws == nil && cfg.Listen != "" {
		if ls.ws, err = net.Listen("tcp", cfg.Listen); err != nil {
			errs = multierror.Append(errs, fmt.Errorf("listen: %w%s", err, inUseHint(err, "listen")))
		}
	}
	if ls.ipc == nil && cfg.IPC != "" {
		// With a group, the socket is created owner-only, given its group,
		// and only then opened to ipc_mode: never more open than asked,
		// not even to muxd's own primary group for an instant.
		mode := cfg.ipcMode()
		if cfg.IPCGroup != "" {
			mode = 0o600
		}
		if ls.ipc, err = mux.ListenIPC(cfg.IPC, mode); err != nil {
			errs = multierror.Append(errs, ipcListenError(cfg.IPC, err))
		} else if cfg.IPCGroup != "" {
			if err := chgrp(cfg.IPC, cfg.IPCGroup); err != nil {
				errs = multierror.Append(errs, err)
			} else if err := os.Chmod(cfg.IPC, cfg.ipcMode()); err != nil {
				errs = multierror.Append(errs, fmt.Errorf("ipc_mode: %w", err))
			}
		}
	}
	if cfg.Metrics != "" {
		if ls.metrics, err = net.Listen("tcp", cfg.Metrics); err != nil {
			errs = multierror.Append(errs, fmt.Errorf("metrics: %w%s", err, inUseHint(err, "metrics")))
		}
	}
	if err := errs.ErrorOrNil(); err != nil {
		ls.close()
		return nil, err
	}
	if ls.activated {
		log.Info("using listeners passed by systemd")
	}
	return ls, nil
}

func (ls *listeners) close() {
	for _, l := range []net.Listener{ls.ws, ls.ipc, ls.metrics} {
		if l != nil {
			l.Close()
		}
	}
}

func chgrp(path, group string) error {
	g, err := user.LookupGroup(group)
	if err != nil {
		return fmt.Errorf("ipc_group: %w", err)
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return fmt.Errorf("ipc_group: gid %q: %w", g.Gid, err)
	}
	if err := os.Chown(path, -1, gid); err != nil {
		return fmt.Errorf("ipc_group: %w", err)
	}
	return nil
}

// serve runs muxd until ctx is done (SIGINT/SIGTERM), then shuts down
// gracefully (shutdownClients): stop accepting, let in-flight requests finish
// within shutdown_grace (the rest get -32002), close clients with 1001 and
// the upstream with 1000. It returns an error only for a real failure, such
// as a listener that failed or would not close.
//
// exposed names the options given as flags whose values may be secrets;
// serve warns that they are visible in the process list.
//
// On SIGHUP it reads the configuration again with load and applies it
// (reloader.reload); load nil: no reloads.
func serve(ctx context.Context, cfg *Config, exposed []string, logOut io.Writer, load func() (*Config, error)) error {
	log, level := newLogger(cfg, logOut)
	if len(exposed) > 0 {
		log.Warn("secrets given as flags can be read by every local user in the process list (/proc/PID/cmdline): "+
			"set the upstream URL in MUXD_UPSTREAM and headers in MUXD_UPSTREAM_HEADERS or the config file (mode 0600) instead", "flags", exposed)
	}
	if unknown := unknownEnv(os.Environ()); len(unknown) > 0 {
		log.Warn("environment variables that are no option's (MUXD_ and a TOML key in capitals) are ignored", "variables", unknown)
	}
	reg := prometheus.NewRegistry()
	build := currentBuild()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		mux.NewBuildInfo(build.Version, build.Revision, build.GoVersion))
	srv, err := mux.New(muxConfig(cfg, log, reg))
	if err != nil {
		return err
	}
	ls, err := openListeners(cfg, log)
	if err != nil {
		return err
	}
	if onListenersOpened != nil {
		onListenersOpened(ls)
	}

	runCtx, stopRun := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		srv.Run(runCtx)
	}()

	httpSrv := srv.NewHTTPServer()
	// draining is set as shutdown begins: /readyz answers 503 from then
	// until exit, so that load balancers stop sending new clients.
	var draining atomic.Bool
	var metricsSrv *http.Server
	serveErr := make(chan error, 3)
	if ls.ws != nil {
		go func() { serveErr <- ignoreClosed(httpSrv.Serve(ls.ws)) }()
		log.Info("listening", "transport", "ws+http", "addr", ls.ws.Addr().String())
	}
	if ls.ipc != nil {
		go func() { serveErr <- srv.ServeIPC(ls.ipc) }()
		log.Info("listening", "transport", "ipc", "path", ls.ipc.Addr().String())
	}
	if ls.metrics != nil {
		metricsSrv = &http.Server{Handler: metricsHandler(reg, srv, &draining), ReadHeaderTimeout: 10 * time.Second}
		go func() { serveErr <- ignoreClosed(metricsSrv.Serve(ls.metrics)) }()
		log.Info("listening", "transport", "metrics", "addr", ls.metrics.Addr().String())
	}
	if onListening != nil {
		onListening(addrOf(ls.ws), addrOf(ls.ipc), addrOf(ls.metrics))
	}
	log.Info("muxd started", append([]any{"version", build.Version, "revision", cmp.Or(build.Revision, "unknown")}, upstreamLogAttrs(cfg)...)...)
	daemon.SdNotify(false, daemon.SdNotifyReady)
	stopWatchdog := startWatchdog(log)

	rl := &reloader{log: log, level: level, srv: srv, load: load, cur: cfg}
	hup := make(chan os.Signal, 1)
	if load != nil {
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	var runErr error
wait:
	for {
		select {
		case <-hup:
			rl.reload()
			if onReloaded != nil {
				onReloaded()
			}
		case <-ctx.Done():
			cfg = rl.current()
			log.Info("shutting down", "grace", cfg.ShutdownGrace.Duration)
			break wait
		case runErr = <-serveErr:
			cfg = rl.current()
			log.Error("listener failed, shutting down", "err", runErr)
			break wait
		}
	}
	draining.Store(true)
	daemon.SdNotify(false, daemon.SdNotifyStopping)
	stopWatchdog()

	errs := shutdownClients(log, cfg.ShutdownGrace.Duration, srv, httpSrv, ls.ipc)
	errs = multierror.Append(errs, runErr)
	if metricsSrv != nil {
		errs = multierror.Append(errs, ignoreClosed(metricsSrv.Close()))
	}
	stopRun()
	wg.Wait()
	if cfg.IPC != "" && !ls.activated {
		os.Remove(cfg.IPC)
	}
	err = errs.ErrorOrNil()
	if err != nil {
		log.Error("shutdown finished with errors", "err", err)
	} else {
		log.Info("shutdown complete")
	}
	return err
}

// muxConfig is the mux.Config for cfg.
func muxConfig(cfg *Config, log *slog.Logger, reg prometheus.Registerer) mux.Config {
	mc := mux.Config{
		Upstreams:               cfg.muxUpstreams(),
		MaxHeadLag:              cfg.MaxHeadLag,
		HeadTimeout:             cfg.HeadTimeout.Duration,
		FailbackAfter:           failbackAfter(cfg.FailbackAfter.Duration),
		ChainID:                 cfg.ChainID,
		UpstreamReadLimit:       cfg.UpstreamReadLimit,
		PingInterval:            pingInterval(cfg.PingInterval.Duration),
		PingTimeout:             cfg.PingTimeout.Duration,
		ClientPingInterval:      pingInterval(cfg.ClientPingInterval.Duration),
		ReconnectInitial:        cfg.ReconnectInitial.Duration,
		ReconnectMax:            cfg.ReconnectMax.Duration,
		RequestTimeout:          cfg.RequestTimeout.Duration,
		UpstreamWait:            cfg.UpstreamWait.Duration,
		HTTPReadHeaderTimeout:   cfg.HTTPReadHeaderTimeout.Duration,
		HTTPReadTimeout:         cfg.HTTPReadTimeout.Duration,
		HTTPIdleTimeout:         cfg.HTTPIdleTimeout.Duration,
		MaxConnections:          cfg.MaxConnections,
		BackfillBlocks:          cmp.Or(cfg.BackfillBlocks, -1), // 0 in the config turns it off
		HistoryBlocks:           cmp.Or(cfg.HistoryBlocks, -1),  // 0 in the config refuses fromBlock
		SubscriptionGapNotices:  cfg.SubscriptionGapNotices,
		CoalesceMethods:         cfg.coalesceMethods(),
		CacheBytes:              cmp.Or(cfg.CacheBytes, -1), // 0 in the config turns it off
		RetryMethods:            cfg.RetryMethods,
		DenyMethods:             cfg.DenyMethods,
		MaxBatch:                cfg.MaxBatch,
		MaxInFlight:             cfg.MaxInFlight,
		MaxHeldBytes:            cfg.MaxHeldBytes,
		MaxHeldBytesTotal:       cfg.MaxHeldBytesTotal,
		UpstreamMaxBatch:        cfg.UpstreamMaxBatch,
		MaxMessageBytes:         cfg.MaxMessageBytes,
		OutboundQueueBytes:      cfg.OutboundQueueBytes,
		OutboundQueueBytesTotal: cfg.OutboundQueueBytesTotal,
		SlowConsumerTimeout:     cfg.SlowConsumerTimeout.Duration,
		MaxSubscriptions:        cfg.MaxSubscriptions,
		MaxWaiting:              cfg.MaxWaiting,
		MaxUpstreamInFlight:     cmp.Or(cfg.MaxUpstreamInFlight, -1), // 0 in the config turns it off
		Clients:                 cfg.Clients.classes(),
		MaxClients:              cfg.MaxClients,
		AllowedHosts:            cfg.AllowedHosts,
		MaxHTTPBodyBytes:        cfg.HTTPBodyBytes,
		AllowedOrigins:          cfg.AllowedOrigins,
		Logger:                  log,
		Registerer:              reg,
	}
	return mc
}

// inUseHint says what to do when a TCP listen failed because the address is
// taken.
func inUseHint(err error, option string) string {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Sprintf(" (something else listens there: stop it, or give muxd another --%s)", option)
	}
	return ""
}

// onListening, when set (by tests), is called once serve has bound its
// listeners, with their addresses (nil for one not in use).
var onListening func(ws, ipc, metrics net.Addr)

// onReloaded, when set (by tests), is called after each reload.
var onReloaded func()

// onListenersOpened, when set (by tests), is called with the listeners as
// soon as they are open, before anything serves on them; it may replace
// them.
var onListenersOpened func(*listeners)

func addrOf(l net.Listener) net.Addr {
	if l == nil {
		return nil
	}
	return l.Addr()
}

// failbackAfter is failback_after as mux reads it: 0 in the config means
// never, which mux spells negative.
func failbackAfter(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

func pingInterval(d time.Duration) time.Duration {
	if d == 0 {
		return -1 // 0 in the config disables keepalive; reconnect treats <0 so
	}
	return d
}

func ignoreClosed(err error) error {
	if err == nil || errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// metricsHandler serves /metrics, /healthz (the process is up, whatever
// the upstreams do), /readyz (an upstream is active and one is healthy,
// and shutdown has not begun: draining; 503 otherwise, with the reason as
// the body) and /status (statusHandler).
func metricsHandler(reg *prometheus.Registry, srv *mux.Server, draining *atomic.Bool) http.Handler {
	m := http.NewServeMux()
	m.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m.HandleFunc(healthzPath, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	m.Handle(statusPath, statusHandler(srv, draining))
	m.HandleFunc(readyzPath, func(w http.ResponseWriter, r *http.Request) {
		if draining.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		if ok, why := srv.Readiness(); !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ready\n")
	})
	return m
}

// The probe paths of the metrics listener (deploy/kubernetes uses them).
const (
	healthzPath = "/healthz"
	readyzPath  = "/readyz"
)

// startWatchdog sends WATCHDOG=1 at half the interval systemd asks for
// (WatchdogSec), and returns a function that stops it.
func startWatchdog(log *slog.Logger) func() {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil || interval <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(interval / 2)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				daemon.SdNotify(false, daemon.SdNotifyWatchdog)
			}
		}
	}()
	log.Info("systemd watchdog enabled", "interval", interval)
	return func() { close(done) }
}
