package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/hashicorp/go-multierror"

	"github.com/muxd/muxd/core"
	"github.com/muxd/muxd/mux"
	"github.com/muxd/muxd/reconnect"
)

// ErrConfig marks a configuration that cannot be used; muxd exits 2.
var ErrConfig = errors.New("invalid configuration")

// unreadableFileError is a config file that could not be read or is not
// valid TOML: it is reported alone, since every other problem reported with
// it ("upstream: not set"…) would only follow from it.
type unreadableFileError struct{ err error }

func (e *unreadableFileError) Error() string { return e.err.Error() }
func (e *unreadableFileError) Unwrap() error { return e.err }

// Duration is a time.Duration written as "30s" in the config file.
type Duration struct{ time.Duration }

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// Config is the config file, and with the flags applied over it, muxd's
// whole configuration. Every option has one name: the TOML key, and the flag
// with "_" written as "-".
type Config struct {
	Upstreams               Upstreams         `toml:"upstream"`
	UpstreamHeaders         map[string]string `toml:"upstream_headers"`
	MaxHeadLag              int               `toml:"max_head_lag"`
	HeadTimeout             Duration          `toml:"head_timeout"`
	FailbackAfter           Duration          `toml:"failback_after"`
	ChainID                 string            `toml:"chain_id"`
	UpstreamReadLimit       int64             `toml:"upstream_read_limit"`
	PingInterval            Duration          `toml:"ping_interval"`
	PingTimeout             Duration          `toml:"ping_timeout"`
	ClientPingInterval      Duration          `toml:"client_ping_interval"`
	ReconnectInitial        Duration          `toml:"reconnect_initial"`
	ReconnectMax            Duration          `toml:"reconnect_max"`
	Listen                  string            `toml:"listen"`
	IPC                     string            `toml:"ipc"`
	IPCMode                 string            `toml:"ipc_mode"`
	IPCGroup                string            `toml:"ipc_group"`
	Metrics                 string            `toml:"metrics"`
	RequestTimeout          Duration          `toml:"request_timeout"`
	UpstreamWait            Duration          `toml:"upstream_wait"`
	HTTPReadHeaderTimeout   Duration          `toml:"http_read_header_timeout"`
	HTTPReadTimeout         Duration          `toml:"http_read_timeout"`
	HTTPIdleTimeout         Duration          `toml:"http_idle_timeout"`
	MaxConnections          int               `toml:"max_connections"`
	ShutdownGrace           Duration          `toml:"shutdown_grace"`
	LogLevel                string            `toml:"log_level"`
	LogFormat               string            `toml:"log_format"`
	AllowedOrigins          []string          `toml:"allowed_origins"`
	AllowedHosts            []string          `toml:"allowed_hosts"`
	DenyMethods             []string          `toml:"deny_methods"`
	RetryMethods            []string          `toml:"retry_methods"`
	MaxClients              int               `toml:"max_clients"`
	MaxInFlight             int               `toml:"max_in_flight"`
	MaxHeldBytes            int               `toml:"max_held_bytes"`
	MaxHeldBytesTotal       int               `toml:"max_held_bytes_total"`
	UpstreamMaxBatch        int               `toml:"upstream_max_batch"`
	MaxBatch                int               `toml:"max_batch"`
	MaxMessageBytes         int64             `toml:"max_message_bytes"`
	MaxSubscriptions        int               `toml:"max_subscriptions"`
	MaxWaiting              int               `toml:"max_waiting"`
	MaxUpstreamInFlight     int               `toml:"max_upstream_in_flight"`
	Clients                 Clients           `toml:"clients"`
	OutboundQueueBytes      int               `toml:"outbound_queue_bytes"`
	OutboundQueueBytesTotal int               `toml:"outbound_queue_bytes_total"`
	SlowConsumerTimeout     Duration          `toml:"slow_consumer_timeout"`
	HTTPBodyBytes           int64             `toml:"http_body_bytes"`
	BackfillBlocks          int               `toml:"backfill_blocks"`
	HistoryBlocks           int               `toml:"history_blocks"`
	SubscriptionGapNotices  bool              `toml:"subscription_gap_notices"`
	Coalesce                bool              `toml:"coalesce"`
	CoalesceMethods         []string          `toml:"coalesce_methods"`
	CacheBytes              int               `toml:"cache_bytes"`
}

// coalesceMethods is the coalesce_methods mux is given: none when
// coalesce is false.
func (c Config) coalesceMethods() []string {
	if !c.Coalesce || c.CoalesceMethods == nil {
		return []string{}
	}
	return c.CoalesceMethods
}

// defaults returns the configuration muxd runs with when nothing is set.
func defaults() Config {
	return Config{
		MaxHeadLag:            mux.DefaultMaxHeadLag,
		HeadTimeout:           Duration{mux.DefaultHeadTimeout},
		FailbackAfter:         Duration{mux.DefaultFailbackAfter},
		UpstreamReadLimit:     reconnect.DefaultReadLimit,
		PingInterval:          Duration{15 * time.Second},
		PingTimeout:           Duration{10 * time.Second},
		ClientPingInterval:    Duration{mux.DefaultClientPingInterval},
		ReconnectInitial:      Duration{reconnect.DefaultBackOffInitial},
		ReconnectMax:          Duration{reconnect.DefaultBackOffMax},
		Listen:                "127.0.0.1:8547",
		IPCMode:               "0600",
		RequestTimeout:        Duration{mux.DefaultRequestTimeout},
		UpstreamWait:          Duration{mux.DefaultUpstreamWait},
		HTTPReadHeaderTimeout: Duration{mux.DefaultHTTPReadHeaderTimeout},
		HTTPReadTimeout:       Duration{mux.DefaultHTTPReadTimeout},
		HTTPIdleTimeout:       Duration{mux.DefaultHTTPIdleTimeout},
		ShutdownGrace:         Duration{10 * time.Second},
		LogLevel:              "info",
		LogFormat:             "text",
		// Copies: the TOML decoder writes into a slice in place when it
		// has room, which would change mux's defaults for everyone.
		AllowedHosts:            slices.Clone(mux.DefaultAllowedHosts),
		DenyMethods:             slices.Clone(mux.DefaultDenyMethods),
		RetryMethods:            slices.Clone(mux.DefaultRetryMethods),
		MaxClients:              mux.DefaultMaxClients,
		MaxInFlight:             mux.DefaultMaxInFlight,
		MaxHeldBytes:            mux.DefaultMaxHeldBytes,
		MaxHeldBytesTotal:       mux.DefaultMaxHeldBytesTotal,
		UpstreamMaxBatch:        mux.DefaultUpstreamMaxBatch,
		MaxBatch:                mux.DefaultMaxBatch,
		MaxMessageBytes:         mux.DefaultMaxMessageBytes,
		MaxSubscriptions:        mux.DefaultMaxSubscriptions,
		MaxWaiting:              mux.DefaultMaxWaiting,
		MaxUpstreamInFlight:     mux.DefaultMaxUpstreamInFlight,
		Clients:                 Clients{},
		OutboundQueueBytes:      mux.DefaultOutboundQueueBytes,
		OutboundQueueBytesTotal: mux.DefaultOutboundQueueBytesTotal,
		SlowConsumerTimeout:     Duration{mux.DefaultSlowConsumerTimeout},
		HTTPBodyBytes:           mux.DefaultMaxHTTPBodyBytes,
		BackfillBlocks:          mux.DefaultBackfillBlocks,
		HistoryBlocks:           mux.DefaultHistoryBlocks,
		Coalesce:                true,
		CoalesceMethods:         slices.Clone(mux.DefaultCoalesceMethods),
		CacheBytes:              mux.DefaultCacheBytes,
	}
}

// secretOptions are the options whose values may be secrets: errors about
// them never quote the value (see secrets.go).
var secretOptions = map[string]string{
	"upstream":         upstreamTOMLForms,
	"upstream_headers": `want a table: a line [upstream_headers], then Name = "value" lines`,
}

// loadFile reads a TOML file over cfg (readFile, without the keys).
func loadFile(cfg *Config, file string) error {
	_, err := readFile(cfg, file)
	return err
}

// readFile reads a TOML file over cfg and returns the options it gives.
// Unknown keys are errors: a typo must not silently leave a default in
// force. Every bad option is reported, not just the first; options that
// fail to decode keep their previous value. Errors give positions and key
// names, never text of the file, which may hold secrets.
func readFile(cfg *Config, file string) ([]string, error) {
	var raw map[string]toml.Primitive
	md, err := toml.DecodeFile(file, &raw)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, &unreadableFileError{tomlSyntaxError(file, err)}
		}
		return nil, &unreadableFileError{err}
	}
	fields := map[string]reflect.Value{}
	v := reflect.ValueOf(cfg).Elem()
	for i := 0; i < v.NumField(); i++ {
		fields[v.Type().Field(i).Tag.Get("toml")] = v.Field(i)
	}
	var errs *multierror.Error
	var keys []string
	seen := map[string]bool{}
	for _, k := range md.Keys() {
		// An array of tables ([[upstream]]) lists its key once per table.
		if len(k) != 1 || seen[k[0]] {
			continue
		}
		seen[k[0]] = true
		f, ok := fields[k[0]]
		if !ok {
			hint := ""
			if k[0] == "upstreams" {
				hint = ` (several upstreams are one option: upstream = ["ws://…", "ws://…"], or [[upstream]] tables)`
			}
			errs = multierror.Append(errs, fmt.Errorf("%s: unknown option %s%s", file, shownKey(k[0]), hint))
			continue
		}
		keys = append(keys, k[0])
		if u, ok := f.Addr().Interface().(toml.Unmarshaler); ok {
			// Decoded here rather than by PrimitiveDecode, whose error
			// would hide this one's: it is written to show no value.
			var v any
			if err := md.PrimitiveDecode(raw[k[0]], &v); err != nil {
				errs = multierror.Append(errs, fmt.Errorf("%s: %s: %s", file, k[0], secretOptions[k[0]]))
			} else if err := u.UnmarshalTOML(v); err != nil {
				each := []error{err}
				if j, ok := err.(interface{ Unwrap() []error }); ok {
					each = j.Unwrap()
				}
				for _, e := range each {
					errs = multierror.Append(errs, fmt.Errorf("%s: %w", file, e))
				}
			}
			continue
		}
		// The decoder leaves a map alone, without an error, when the
		// file gives it a string or an array.
		wrongType := f.Kind() == reflect.Map && md.Type(k[0]) != "Hash"
		if !wrongType {
			err = md.PrimitiveDecode(raw[k[0]], f.Addr().Interface())
		}
		switch want, secret := secretOptions[k[0]]; {
		case (wrongType || err != nil) && secret:
			errs = multierror.Append(errs, fmt.Errorf("%s: %s: %s (value not shown)", file, k[0], want))
		case wrongType:
			errs = multierror.Append(errs, fmt.Errorf("%s: %s: want a table", file, k[0]))
		case err != nil:
			errs = multierror.Append(errs, fmt.Errorf("%s: %s: %w", file, k[0], err))
		}
	}
	return keys, errs.ErrorOrNil()
}

// problems lists every problem with c, nil when there is none.
// upstreamFrom says where c.Upstreams came from ("--upstream",
// "MUXD_UPSTREAM", the file's name), for errors about it.
func (c *Config) problems(upstreamFrom string) *multierror.Error {
	var errs *multierror.Error
	add := func(format string, args ...any) { errs = multierror.Append(errs, fmt.Errorf(format, args...)) }
	for _, p := range c.upstreamProblems(upstreamFrom) {
		add("%s", p)
	}
	for _, p := range headerProblems(c.UpstreamHeaders) {
		add("upstream_headers: %s", p)
	}
	if c.MaxHeadLag < 1 {
		// mux reads 0 as its default: a lag of 0 cannot be asked for,
		// and would make every node whose head comes a moment late
		// unhealthy.
		add("max_head_lag: must be at least 1, got %d", c.MaxHeadLag)
	}
	if c.HeadTimeout.Duration <= 0 {
		add("head_timeout: must be positive, got %s", c.HeadTimeout.Duration)
	}
	if c.FailbackAfter.Duration < 0 {
		add("failback_after: must not be negative (0 never fails back), got %s", c.FailbackAfter.Duration)
	}
	if c.ChainID != "" && !validChainID(c.ChainID) {
		add("chain_id: want a hex quantity such as 0x1, got %q", c.ChainID)
	}
	if c.Listen == "" && c.IPC == "" {
		add("listen, ipc: at least one must be set")
	}
	for _, a := range []struct{ name, addr string }{{"listen", c.Listen}, {"metrics", c.Metrics}} {
		if a.addr == "" {
			continue
		}
		if p := listenAddrProblem(a.addr); p != "" {
			add("%s: %s", a.name, p)
		}
	}
	if c.Metrics != "" && c.Metrics == c.Listen {
		add("metrics: must differ from listen (%s)", c.Listen)
	}
	if m, err := strconv.ParseUint(c.IPCMode, 8, 32); err != nil || m > 0o777 {
		add("ipc_mode: %q is not an octal file mode like 0600", c.IPCMode)
	}
	if c.IPCGroup != "" && c.IPC == "" {
		add("ipc_group: set without ipc")
	}
	for _, d := range []struct {
		name string
		d    Duration
	}{{"request_timeout", c.RequestTimeout}, {"upstream_wait", c.UpstreamWait}, {"ping_timeout", c.PingTimeout}, {"shutdown_grace", c.ShutdownGrace},
		{"reconnect_initial", c.ReconnectInitial}, {"reconnect_max", c.ReconnectMax},
		{"http_read_header_timeout", c.HTTPReadHeaderTimeout}, {"http_read_timeout", c.HTTPReadTimeout},
		{"http_idle_timeout", c.HTTPIdleTimeout}, {"slow_consumer_timeout", c.SlowConsumerTimeout}} {
		if d.d.Duration <= 0 {
			add("%s: must be positive, got %s", d.name, d.d.Duration)
		}
	}
	if c.ReconnectInitial.Duration > c.ReconnectMax.Duration {
		add("reconnect_initial (%s) is longer than reconnect_max (%s)", c.ReconnectInitial.Duration, c.ReconnectMax.Duration)
	}
	if c.BackfillBlocks < 0 {
		add("backfill_blocks: must not be negative (0 turns backfill off), got %d", c.BackfillBlocks)
	}
	if c.HistoryBlocks < 0 {
		add("history_blocks: must not be negative (0 refuses every fromBlock subscription), got %d", c.HistoryBlocks)
	}
	if c.CacheBytes < 0 {
		add("cache_bytes: must not be negative (0 turns the cache off), got %d", c.CacheBytes)
	}
	c.Clients.validate(add)
	if c.MaxUpstreamInFlight < 0 {
		add("max_upstream_in_flight: must not be negative (0 turns the bound off), got %d", c.MaxUpstreamInFlight)
	}
	if c.MaxConnections < 0 {
		add("max_connections: must not be negative (0 means max_clients), got %d", c.MaxConnections)
	}
	if c.ClientPingInterval.Duration < 0 {
		add("client_ping_interval: must not be negative (0 disables client pings)")
	}
	if c.PingInterval.Duration < 0 {
		add("ping_interval: must not be negative (0 disables keepalive)")
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		add("log_level: %q is not debug, info, warn or error", c.LogLevel)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		add("log_format: %q is not text or json", c.LogFormat)
	}
	for _, p := range c.DenyMethods {
		if err := core.CheckDenyPattern(p); err != nil {
			add("deny_methods: %v", err)
		}
	}
	for _, n := range []struct {
		name string
		v    int64
	}{
		{"upstream_read_limit", c.UpstreamReadLimit}, {"max_clients", int64(c.MaxClients)},
		{"max_in_flight", int64(c.MaxInFlight)}, {"max_batch", int64(c.MaxBatch)},
		{"max_message_bytes", c.MaxMessageBytes}, {"max_subscriptions", int64(c.MaxSubscriptions)},
		{"outbound_queue_bytes", int64(c.OutboundQueueBytes)}, {"outbound_queue_bytes_total", int64(c.OutboundQueueBytesTotal)},
		{"http_body_bytes", c.HTTPBodyBytes},
		{"max_waiting", int64(c.MaxWaiting)}, {"max_held_bytes", int64(c.MaxHeldBytes)},
		{"max_held_bytes_total", int64(c.MaxHeldBytesTotal)},
		{"upstream_max_batch", int64(c.UpstreamMaxBatch)},
	} {
		if n.v <= 0 {
			add("%s: must be positive, got %d", n.name, n.v)
		}
	}
	if c.MaxBatch > c.MaxInFlight {
		add("max_batch (%d) is larger than max_in_flight (%d): a full batch would always be partly refused with -32005", c.MaxBatch, c.MaxInFlight)
	}
	return errs
}

// header returns upstream_headers as an http.Header.
func (c *Config) header() http.Header { return toHeader(c.UpstreamHeaders) }

// ipcMode is the parsed ipc_mode (validated before).
func (c *Config) ipcMode() os.FileMode {
	m, _ := strconv.ParseUint(c.IPCMode, 8, 32)
	return os.FileMode(m)
}

// validChainID reports whether s is a hex quantity ("0x" and hex digits).
func validChainID(s string) bool {
	if len(s) < 3 || (s[:2] != "0x" && s[:2] != "0X") {
		return false
	}
	for _, c := range s[2:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}
