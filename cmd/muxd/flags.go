package main

import (
	"flag"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-multierror"
)

// flagValues collects what was given on the command line for each option,
// as raw strings, so that flags can be applied over the config file after it
// is read.
type flagValues struct {
	order []string
	vals  map[string][]string
}

type optionFlag struct {
	fv   *flagValues
	name string
}

func (o optionFlag) String() string { return "" }
func (o optionFlag) Set(v string) error {
	if _, ok := o.fv.vals[o.name]; !ok {
		o.fv.order = append(o.fv.order, o.name)
	}
	o.fv.vals[o.name] = append(o.fv.vals[o.name], v)
	return nil
}

// optionHelp is the flag help for each option; the README reference says the
// same at more length.
var optionHelp = map[string]string{
	"upstream":             "node WebSocket URL, ws:// or wss:// (or MUXD_UPSTREAM)",
	"upstream_headers":     `header for the upstream handshake, "Name: value"; repeatable`,
	"upstream_read_limit":  "largest upstream message in bytes",
	"ping_interval":        "upstream keepalive ping interval (0 disables)",
	"ping_timeout":         "upstream keepalive pong timeout",
	"reconnect_initial":    "first delay before redialling the upstream (doubles, jittered)",
	"reconnect_max":        "longest delay between upstream dial attempts",
	"listen":               "WebSocket and HTTP address for clients",
	"ipc":                  "Unix socket path for IPC clients",
	"ipc_mode":             "IPC socket file mode (octal)",
	"ipc_group":            "IPC socket group",
	"metrics":              "address for /metrics, /healthz, /readyz",
	"request_timeout":      "per-request deadline",
	"shutdown_grace":       "how long in-flight requests may finish on shutdown",
	"log_level":            "debug, info, warn or error",
	"log_format":           "text or json",
	"allowed_origins":      "Origin host patterns browsers may connect from (comma-separated)",
	"allowed_hosts":        `Host header values accepted ("*" for any; comma-separated)`,
	"deny_methods":         "refused method globs (comma-separated)",
	"retry_methods":        "methods re-sent after an upstream reconnect (comma-separated)",
	"max_clients":          "concurrent client sessions",
	"max_in_flight":        "requests in flight per client",
	"max_batch":            "elements per batch",
	"max_message_bytes":    "largest client message in bytes",
	"max_subscriptions":    "subscriptions per client",
	"max_waiting":          "requests held while no upstream is connected (all clients)",
	"outbound_queue_bytes": "bytes queued for a client before it is a slow consumer",
	"http_body_bytes":      "largest HTTP request body in bytes",
}

// newFlagSet defines one flag per config option, named after its TOML key
// with "_" written as "-", plus --config.
func newFlagSet(name string) (*flag.FlagSet, *flagValues, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fv := &flagValues{vals: map[string][]string{}}
	t := reflect.TypeOf(Config{})
	for i := 0; i < t.NumField(); i++ {
		key := t.Field(i).Tag.Get("toml")
		fs.Var(optionFlag{fv, key}, strings.ReplaceAll(key, "_", "-"), optionHelp[key])
	}
	file := fs.String("config", "", "TOML config file")
	return fs, fv, file
}

// apply sets the options given as flags over cfg, reporting every bad value.
func (fv *flagValues) apply(cfg *Config) error {
	var errs *multierror.Error
	v := reflect.ValueOf(cfg).Elem()
	t := v.Type()
	for _, name := range fv.order {
		for i := 0; i < t.NumField(); i++ {
			if t.Field(i).Tag.Get("toml") != name {
				continue
			}
			if err := setField(v.Field(i), fv.vals[name]); err != nil {
				errs = multierror.Append(errs, fmt.Errorf("--%s: %w", strings.ReplaceAll(name, "_", "-"), err))
			}
		}
	}
	return errs.ErrorOrNil()
}

func setField(f reflect.Value, vals []string) error {
	last := vals[len(vals)-1]
	switch f.Interface().(type) {
	case Duration:
		d, err := time.ParseDuration(last)
		if err != nil {
			return err
		}
		f.Set(reflect.ValueOf(Duration{d}))
	case string:
		f.SetString(last)
	case int, int64:
		n, err := strconv.ParseInt(last, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not a whole number", last)
		}
		f.SetInt(n)
	case []string:
		var list []string
		for _, v := range vals {
			for _, s := range strings.Split(v, ",") {
				if s = strings.TrimSpace(s); s != "" {
					list = append(list, s)
				}
			}
		}
		if list == nil {
			list = []string{}
		}
		f.Set(reflect.ValueOf(list))
	case map[string]string:
		m := map[string]string{}
		for _, v := range vals {
			name, value, ok := strings.Cut(v, ":")
			if !ok {
				return fmt.Errorf("%q is not \"Name: value\"", v)
			}
			m[strings.TrimSpace(name)] = strings.TrimSpace(value)
		}
		f.Set(reflect.ValueOf(m))
	default:
		return fmt.Errorf("unsupported option type %s", f.Type())
	}
	return nil
}
