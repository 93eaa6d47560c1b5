package main

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// firstLine is s up to and including its first newline.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i+1]
	}
	return s
}

// clearOptionEnv unsets (sets empty, which muxd reads as unset) every
// option's variable for the test, so that the shell's cannot interfere.
func clearOptionEnv(t *testing.T) {
	t.Helper()
	typ := reflect.TypeOf(Config{})
	for i := 0; i < typ.NumField(); i++ {
		t.Setenv(envName(typ.Field(i).Tag.Get("toml")), "")
	}
}

// envSamples is, for every option, a value of its variable other than its
// default, and the flags it needs beside it to validate (ipc_group needs
// ipc). TestEnvEveryOption fails for an option missing here.
var envSamples = map[string]struct {
	value string
	with  []string
}{
	"upstream":                   {"ws://env.example:1", nil},
	"upstream_headers":           {"X-Env: 1", nil},
	"max_head_lag":               {"3", nil},
	"head_timeout":               {"2m", nil},
	"failback_after":             {"0s", nil},
	"chain_id":                   {"0x5", nil},
	"upstream_read_limit":        {"1024", nil},
	"ping_interval":              {"0s", nil},
	"ping_timeout":               {"3s", nil},
	"client_ping_interval":       {"0s", nil},
	"reconnect_initial":          {"50ms", nil},
	"reconnect_max":              {"5s", nil},
	"listen":                     {"127.0.0.1:1", nil},
	"ipc":                        {"/run/muxd/env.ipc", nil},
	"ipc_mode":                   {"0660", nil},
	"ipc_group":                  {"eth", []string{"--ipc", "/run/muxd/env.ipc"}},
	"metrics":                    {"127.0.0.1:9100", nil},
	"request_timeout":            {"45s", nil},
	"upstream_wait":              {"1s", nil},
	"http_read_header_timeout":   {"1s", nil},
	"http_read_timeout":          {"2s", nil},
	"http_idle_timeout":          {"3s", nil},
	"max_connections":            {"10", nil},
	"shutdown_grace":             {"1s", nil},
	"log_level":                  {"debug", nil},
	"log_format":                 {"json", nil},
	"allowed_origins":            {"a.example,b.example", nil},
	"allowed_hosts":              {"*", nil},
	"deny_methods":               {"x_*, y_*", nil},
	"retry_methods":              {"eth_call", nil},
	"max_clients":                {"7", nil},
	"max_in_flight":              {"7000", nil},
	"max_held_bytes":             {"1000", nil},
	"max_held_bytes_total":       {"10000", nil},
	"upstream_max_batch":         {"5", nil},
	"max_batch":                  {"6", nil},
	"max_message_bytes":          {"1000", nil},
	"max_subscriptions":          {"2", nil},
	"max_waiting":                {"3", nil},
	"max_upstream_in_flight":     {"32", nil},
	"clients":                    {"bot-a:weight=2,class=bulk", nil},
	"outbound_queue_bytes":       {"4000", nil},
	"outbound_queue_bytes_total": {"40000", nil},
	"slow_consumer_timeout":      {"4s", nil},
	"http_body_bytes":            {"2000", nil},
	"backfill_blocks":            {"0", nil},
	"history_blocks":             {"5000", nil},
	"subscription_gap_notices":   {"true", nil},
	"coalesce":                   {"false", nil},
	"coalesce_methods":           {"eth_call", nil},
	"cache_bytes":                {"0", nil},
}

// TestEnvEveryOption walks every option of Config: its variable, set alone,
// changes the option, exactly as its flag with the same value does, and
// check says it came from the environment.
func TestEnvEveryOption(t *testing.T) {
	typ := reflect.TypeOf(Config{})
	for i := 0; i < typ.NumField(); i++ {
		key := typ.Field(i).Tag.Get("toml")
		sample, ok := envSamples[key]
		if !ok {
			t.Errorf("option %s has no sample value in envSamples: add one", key)
			continue
		}
		t.Run(key, func(t *testing.T) {
			clearOptionEnv(t)
			base := append([]string{}, sample.with...)
			if key != "upstream" {
				base = append(base, "--upstream", "ws://base.example:1")
			}
			before := defaults() // upstream has no default: nil
			if key != "upstream" {
				b, _, err := loadConfig(base)
				if err != nil {
					t.Fatal(err)
				}
				before = *b
			}
			t.Setenv(envName(key), sample.value)
			got, _, from, err := loadConfigFrom(base)
			if err != nil {
				t.Fatalf("%s=%q: %v", envName(key), sample.value, err)
			}
			t.Setenv(envName(key), "")
			want, _, err := loadConfig(append(base, flagName(key), sample.value))
			if err != nil {
				t.Fatalf("%s %q: %v", flagName(key), sample.value, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s=%q gives\n%+v\nthe flag gives\n%+v", envName(key), sample.value, got, want)
			}
			if reflect.DeepEqual(reflect.ValueOf(*got).Field(i).Interface(), reflect.ValueOf(before).Field(i).Interface()) {
				t.Errorf("%s=%q left %s at %v", envName(key), sample.value, key, reflect.ValueOf(*got).Field(i).Interface())
			}
			if from.source(key) != "env" {
				t.Errorf("source of %s is %q, want env", key, from.source(key))
			}
		})
	}
}

// TestEnvPrecedence: defaults < file < environment < flags, for a scalar,
// a list, the headers and the upstreams; a later source replaces a list
// (headers included) as a whole.
func TestEnvPrecedence(t *testing.T) {
	file := writeFile(t, "p.toml", `
upstream = "ws://file.example:1"
request_timeout = "5s"
deny_methods = ["file_*"]
[upstream_headers]
Authorization = "Bearer file"
X-File = "1"
`)
	type want struct {
		upstream string
		timeout  time.Duration
		deny     []string
		headers  map[string]string
		from     map[string]string // option -> source
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want want
	}{
		{"defaults", map[string]string{"MUXD_UPSTREAM": "ws://env.example:2"}, nil,
			want{"ws://env.example:2", 30 * time.Second, defaults().DenyMethods, map[string]string(nil),
				map[string]string{"upstream": "env", "request_timeout": "default", "deny_methods": "default", "upstream_headers": "default"}}},
		{"file", nil, []string{"--config", file},
			want{"ws://file.example:1", 5 * time.Second, []string{"file_*"}, map[string]string{"Authorization": "Bearer file", "X-File": "1"},
				map[string]string{"upstream": "file", "request_timeout": "file", "deny_methods": "file", "upstream_headers": "file"}}},
		{"env over file", map[string]string{"MUXD_UPSTREAM": "ws://env.example:2", "MUXD_REQUEST_TIMEOUT": "6s",
			"MUXD_DENY_METHODS": "env_*,other_*", "MUXD_UPSTREAM_HEADERS": "Authorization: Bearer env"}, []string{"--config", file},
			want{"ws://env.example:2", 6 * time.Second, []string{"env_*", "other_*"}, map[string]string{"Authorization": "Bearer env"},
				map[string]string{"upstream": "env", "request_timeout": "env", "deny_methods": "env", "upstream_headers": "env"}}},
		{"flags over env", map[string]string{"MUXD_UPSTREAM": "ws://env.example:2", "MUXD_REQUEST_TIMEOUT": "6s",
			"MUXD_DENY_METHODS": "env_*", "MUXD_UPSTREAM_HEADERS": "Authorization: Bearer env"},
			[]string{"--config", file, "--upstream", "ws://flag.example:3", "--request-timeout", "7s", "--deny-methods", "flag_*", "--upstream-headers", "X-Flag: 3"},
			want{"ws://flag.example:3", 7 * time.Second, []string{"flag_*"}, map[string]string{"X-Flag": "3"},
				map[string]string{"upstream": "flag", "request_timeout": "flag", "deny_methods": "flag", "upstream_headers": "flag"}}},
		{"env and flags on different options", map[string]string{"MUXD_REQUEST_TIMEOUT": "6s"},
			[]string{"--config", file, "--deny-methods", "flag_*"},
			want{"ws://file.example:1", 6 * time.Second, []string{"flag_*"}, map[string]string{"Authorization": "Bearer file", "X-File": "1"},
				map[string]string{"upstream": "file", "request_timeout": "env", "deny_methods": "flag", "upstream_headers": "file"}}},
		{"a bad variable under a flag is not read", map[string]string{"MUXD_REQUEST_TIMEOUT": "soon", "MUXD_UPSTREAM": "ws://a:1,,"},
			[]string{"--upstream", "ws://flag.example:3", "--request-timeout", "7s"},
			want{"ws://flag.example:3", 7 * time.Second, defaults().DenyMethods, map[string]string(nil),
				map[string]string{"upstream": "flag", "request_timeout": "flag"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearOptionEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			cfg, _, from, err := loadConfigFrom(tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Upstreams) != 1 || cfg.Upstreams[0].URL != tc.want.upstream {
				t.Errorf("upstreams %v, want %s", cfg.Upstreams, tc.want.upstream)
			}
			if cfg.RequestTimeout.Duration != tc.want.timeout {
				t.Errorf("request_timeout %s, want %s", cfg.RequestTimeout.Duration, tc.want.timeout)
			}
			if !reflect.DeepEqual(cfg.DenyMethods, tc.want.deny) {
				t.Errorf("deny_methods %v, want %v", cfg.DenyMethods, tc.want.deny)
			}
			if !reflect.DeepEqual(cfg.UpstreamHeaders, tc.want.headers) {
				t.Errorf("upstream_headers %v, want %v", cfg.UpstreamHeaders, tc.want.headers)
			}
			for k, v := range tc.want.from {
				if from.source(k) != v {
					t.Errorf("%s came from %s, want %s", k, from.source(k), v)
				}
			}
		})
	}
}

// TestEnvUpstreamHeaders: MUXD_UPSTREAM_HEADERS entries are separated by
// newlines, or by a comma when the next "Name: " follows it; any other
// comma is part of a value.
func TestEnvUpstreamHeaders(t *testing.T) {
	for _, tc := range []struct {
		name, env string
		want      map[string]string
	}{
		{"one", "Authorization: Bearer KEY", map[string]string{"Authorization": "Bearer KEY"}},
		{"one a line", "Authorization: Bearer KEY\nX-Api-Key: K2\n", map[string]string{"Authorization": "Bearer KEY", "X-Api-Key": "K2"}},
		{"CRLF lines", "A: 1\r\nB: 2", map[string]string{"A": "1", "B": "2"}},
		{"blank lines", "\nA: 1\n\n  \nB: 2\n", map[string]string{"A": "1", "B": "2"}},
		{"commas", "Authorization: Bearer KEY, X-Api-Key: K2,X-Third: 3", map[string]string{"Authorization": "Bearer KEY", "X-Api-Key": "K2", "X-Third": "3"}},
		{"comma in a value", "Accept: a, b, X-K: 1", map[string]string{"Accept": "a, b", "X-K": "1"}},
		{"URL after a comma is a value", "X-Origins: http://a, http://b", map[string]string{"X-Origins": "http://a, http://b"}},
		{"no space after the colon", "A:1", map[string]string{"A": "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearOptionEnv(t)
			t.Setenv("MUXD_UPSTREAM_HEADERS", tc.env)
			cfg, _, err := loadConfig([]string{"--upstream", "ws://n:1"})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg.UpstreamHeaders, tc.want) {
				t.Errorf("%q: headers %q, want %q", tc.env, cfg.UpstreamHeaders, tc.want)
			}
		})
	}
}

// TestEnvBadValues: bad variables are reported as bad file values are,
// each naming its variable, all at once, exit 2, and no secret value is
// printed.
func TestEnvBadValues(t *testing.T) {
	const secret = "s3cr3tK3y"
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"not a number", map[string]string{"MUXD_MAX_BATCH": "y"}, []string{`MUXD_MAX_BATCH: "y" is not a whole number`}},
		{"not a duration, not shown", map[string]string{"MUXD_REQUEST_TIMEOUT": "wss://node.example/" + secret},
			[]string{"MUXD_REQUEST_TIMEOUT: a value (not shown) is not a duration"}},
		{"not a bool", map[string]string{"MUXD_COALESCE": "maybe"}, []string{`MUXD_COALESCE: "maybe" is not true or false`}},
		{"invalid value names the variable", map[string]string{"MUXD_MAX_WAITING": "0", "MUXD_LOG_LEVEL": "loud"},
			[]string{"max_waiting: must be positive, got 0 (from MUXD_MAX_WAITING)", `log_level: "loud" is not debug, info, warn or error (from MUXD_LOG_LEVEL)`}},
		{"two options' relation", map[string]string{"MUXD_MAX_BATCH": "10", "MUXD_MAX_IN_FLIGHT": "5"},
			[]string{"max_batch (10) is larger than max_in_flight (5)", "(from MUXD_MAX_BATCH)"}},
		{"header not Name: value", map[string]string{"MUXD_UPSTREAM_HEADERS": "Authorization=" + secret},
			[]string{`MUXD_UPSTREAM_HEADERS: entry 1: "Authorization=…" is not "Name: value" (value not shown)`}},
		{"header value alone", map[string]string{"MUXD_UPSTREAM_HEADERS": "X-A: 1\n" + secret},
			[]string{`MUXD_UPSTREAM_HEADERS: entry 2: a value is not "Name: value"`}},
		{"header name not a name", map[string]string{"MUXD_UPSTREAM_HEADERS": "Bearer " + secret + ": x"},
			[]string{"upstream_headers: 1 header name(s) not valid", "(from MUXD_UPSTREAM_HEADERS)"}},
		{"header value with a control character", map[string]string{"MUXD_UPSTREAM_HEADERS": "Authorization: Bearer " + secret + "\x01"},
			[]string{`upstream_headers: "Authorization": the value holds a control character`, "(from MUXD_UPSTREAM_HEADERS)"}},
		{"upstream with a stray comma", map[string]string{"MUXD_UPSTREAM": "wss://node.example/" + secret + ",", "MUXD_MAX_BATCH": "y"},
			[]string{"MUXD_UPSTREAM: item 2 of 2 is empty", "MUXD_MAX_BATCH"}},
		{"upstream URL bad", map[string]string{"MUXD_UPSTREAM": "wss://user:" + secret + "@node.example:x/" + secret},
			[]string{"upstream 1 (from MUXD_UPSTREAM)", "port"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearOptionEnv(t)
			if _, ok := tc.env["MUXD_UPSTREAM"]; !ok {
				t.Setenv("MUXD_UPSTREAM", "ws://n:1")
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			code, out, errs := runCmd(t, "check")
			if code != 2 || out != "" {
				t.Fatalf("exit %d, stdout %q; want 2 and nothing", code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errs)
				}
			}
			if strings.Contains(errs, secret) {
				t.Errorf("stderr shows the secret:\n%s", errs)
			}
		})
	}
}

// TestCheckSources: check prints every option once with where its value
// came from and the value; upstream URLs redacted, header values never.
func TestCheckSources(t *testing.T) {
	const secret = "s3cr3tK3y"
	clearOptionEnv(t)
	file := writeFile(t, "s.toml", `
max_batch = 7
reconnect_initial = "3s"
upstream = [{url = "wss://a.example/`+secret+`", headers = {Authorization = "`+secret+`"}}, "ws://b.example:1"]
`)
	t.Setenv("MUXD_MAX_IN_FLIGHT", "70")
	t.Setenv("MUXD_DENY_METHODS", "x_*,y_*")
	t.Setenv("MUXD_UPSTREAM_HEADERS", "X-Api-Key: "+secret+", Authorization: Bearer "+secret)
	code, out, errs := runCmd(t, "check", "--config", file, "--request-timeout", "9s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if strings.Contains(out+errs, secret) {
		t.Fatalf("a secret in the output:\n%s%s", out, errs)
	}
	rows := map[string][2]string{} // option -> source, value
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) < 2 || strings.Join(strings.Fields(lines[1]), " ") != "OPTION FROM VALUE" {
		t.Fatalf("no table header:\n%s", out)
	}
	for _, l := range lines[2:] {
		f := strings.Fields(l)
		if len(f) < 3 {
			t.Fatalf("row %q has no value", l)
		}
		if _, dup := rows[f[0]]; dup {
			t.Errorf("option %s listed twice", f[0])
		}
		rows[f[0]] = [2]string{f[1], strings.Join(f[2:], " ")}
	}
	typ := reflect.TypeOf(Config{})
	for i := 0; i < typ.NumField(); i++ {
		if _, ok := rows[typ.Field(i).Tag.Get("toml")]; !ok {
			t.Errorf("option %s not listed", typ.Field(i).Tag.Get("toml"))
		}
	}
	for key, want := range map[string][2]string{
		"upstream":          {"file", "wss://a.example/… (own headers: Authorization), ws://b.example:1"},
		"upstream_headers":  {"env", "Authorization, X-Api-Key (values not shown)"},
		"max_batch":         {"file", "7"},
		"max_in_flight":     {"env", "70"},
		"deny_methods":      {"env", "x_*,y_*"},
		"request_timeout":   {"flag", "9s"},
		"reconnect_initial": {"file", "3s"},
		"reconnect_max":     {"default", "3s (follows reconnect_initial)"},
		"max_clients":       {"default", "10000"},
		"chain_id":          {"default", "none"},
		"coalesce":          {"default", "true"},
	} {
		if rows[key] != want {
			t.Errorf("row %s: %q, want %q", key, rows[key], want)
		}
	}
}

// TestEnvUnknownVariable: a MUXD_ variable that is no option's (a typo)
// is noted by check, without failing it; the repository's own tool
// variables are not.
func TestEnvUnknownVariable(t *testing.T) {
	clearOptionEnv(t)
	t.Setenv("MUXD_UPSTREAM", "ws://n:1")
	t.Setenv("MUXD_REQEUST_TIMEOUT", "1s")
	t.Setenv("MUXD_GETH", "/bin/true")
	t.Setenv("MUXD_TEST_LISTEN", "x")
	code, _, errs := runCmd(t, "check")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(errs, "note: MUXD_REQEUST_TIMEOUT is set but is no option's variable") {
		t.Errorf("no note about MUXD_REQEUST_TIMEOUT:\n%s", errs)
	}
	if strings.Contains(errs, "MUXD_GETH") || strings.Contains(errs, "MUXD_TEST_LISTEN") {
		t.Errorf("a tool variable is noted:\n%s", errs)
	}
}

// TestHelpEnvNames: the help gives every option's variable beside its flag.
func TestHelpEnvNames(t *testing.T) {
	_, out, _ := runCmd(t, "help")
	typ := reflect.TypeOf(Config{})
	for i := 0; i < typ.NumField(); i++ {
		key := typ.Field(i).Tag.Get("toml")
		found := false
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			found = found || len(f) >= 2 && f[0] == flagName(key) && f[len(f)-1] == envName(key)
		}
		if !found {
			t.Errorf("help has no line with %s and %s", flagName(key), envName(key))
		}
	}
}
