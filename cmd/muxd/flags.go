package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"reflect"
	"regexp"
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
	"upstream":                 "node WebSocket URL, ws:// or wss:// (or MUXD_UPSTREAM)",
	"upstream_headers":         `header for the upstream handshake, "Name: value"; repeatable`,
	"upstream_read_limit":      "largest upstream message in bytes",
	"ping_interval":            "upstream keepalive ping interval (0 disables)",
	"ping_timeout":             "upstream keepalive pong timeout",
	"reconnect_initial":        "first delay before redialling the upstream (doubles, jittered)",
	"reconnect_max":            "longest delay between upstream dial attempts",
	"listen":                   "WebSocket and HTTP address for clients",
	"ipc":                      "Unix socket path for IPC clients",
	"ipc_mode":                 "IPC socket file mode (octal)",
	"ipc_group":                "IPC socket group",
	"metrics":                  "address for /metrics, /healthz, /readyz",
	"request_timeout":          "per-request deadline",
	"http_read_header_timeout": "an HTTP request's headers must arrive within this",
	"http_read_timeout":        "an HTTP request's body must arrive within this (408 past it)",
	"http_idle_timeout":        "an idle keep-alive HTTP connection is closed after this",
	"max_connections":          "connections open on --listen, WebSocket included (0: max_clients)",
	"shutdown_grace":           "how long in-flight requests may finish on shutdown",
	"log_level":                "debug, info, warn or error",
	"log_format":               "text or json",
	"allowed_origins":          "Origin host patterns browsers may connect from (comma-separated)",
	"allowed_hosts":            `Host header values accepted ("*" for any; comma-separated)`,
	"deny_methods":             "refused method patterns, * any run, ? one character, case ignored (comma-separated)",
	"retry_methods":            "methods re-sent after an upstream reconnect (comma-separated)",
	"max_clients":              "concurrent client sessions",
	"max_in_flight":            "requests in flight per client",
	"max_held_bytes":           "bytes of one client's requests held in flight or waiting (-32005 past it)",
	"upstream_max_batch":       "most elements in one array sent to the node (geth's --rpc.batch-request-limit)",
	"max_batch":                "elements per batch",
	"max_message_bytes":        "largest client message in bytes",
	"max_subscriptions":        "subscriptions per client",
	"max_waiting":              "requests held while no upstream is connected (all clients)",
	"outbound_queue_bytes":     "bytes queued for a client before it is a slow consumer",
	"http_body_bytes":          "largest HTTP request body in bytes",
	"backfill_blocks":          "most blocks of heads and logs a subscriber is sent after a reconnect or a head jump (0: off)",
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
			return fmt.Errorf("%s is not a duration like 30s", shownValue(last))
		}
		f.Set(reflect.ValueOf(Duration{d}))
	case string:
		f.SetString(last)
	case int, int64:
		n, err := strconv.ParseInt(last, 10, 64)
		if err != nil {
			return fmt.Errorf("%s is not a whole number", shownValue(last))
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
				return errMalformedHeader(v)
			}
			m[strings.TrimSpace(name)] = strings.TrimSpace(value)
		}
		f.Set(reflect.ValueOf(m))
	default:
		return fmt.Errorf("unsupported option type %s", f.Type())
	}
	return nil
}

// parseFlags parses args with fs. The usage goes to stderr for -h and for
// a bad flag; the error returned quotes nothing typed except a plain flag
// name, since the flag package's own errors ("bad flag syntax: …",
// "invalid value … for flag …") print what may be a secret.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	show := fs.Usage
	fs.Usage = func() {
		fs.SetOutput(stderr)
		show()
		fs.SetOutput(io.Discard)
	}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return flagError(err)
}

// flagValueError matches the flag package's errors for a value its flag
// refused; the name is a defined flag's.
var flagValueError = regexp.MustCompile(`^invalid (?:boolean )?value .* for (?:flag )?-([A-Za-z0-9_-]+): `)

// flagError restates an error of the flag package without the text typed.
func flagError(err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		if plainWord.MatchString(name) {
			return fmt.Errorf("unknown flag -%s", name)
		}
		return errors.New("unknown flag (not shown)")
	}
	if strings.HasPrefix(msg, "flag needs an argument: -") {
		return err // the name is a defined flag's
	}
	if m := flagValueError.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("-%s: bad value (not shown)", m[1])
	}
	return errors.New("bad command-line syntax (the argument is not shown)")
}

// shownValue returns a flag value quoted for an error when it is short and
// plain (a number, a duration, a word), else a placeholder: a value that
// looks like a URL or a key may be a secret given to the wrong flag.
func shownValue(v string) string {
	if plainValue.MatchString(v) {
		return fmt.Sprintf("%q", v)
	}
	return "a value (not shown)"
}

var plainValue = regexp.MustCompile(`^[A-Za-z0-9._+-]{0,32}$`)

// exposedSecrets lists the options given as flags whose values may be
// secrets: an upstream URL with userinfo, a path or a query, and
// upstream_headers. Other local users can read them in the process list.
func (fv *flagValues) exposedSecrets() []string {
	var names []string
	if v := fv.vals["upstream"]; len(v) > 0 && urlHasSecrets(v[len(v)-1]) {
		names = append(names, "--upstream")
	}
	if len(fv.vals["upstream_headers"]) > 0 {
		names = append(names, "--upstream-headers")
	}
	return names
}
