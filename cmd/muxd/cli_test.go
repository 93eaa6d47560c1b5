package main

import (
	"encoding/json"
	"log/slog"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/muxd/muxd/mux"
)

// TestHelp: -h, --help and `muxd help [command]` print on stdout, exit 0,
// list the commands (without a command) and every option with its default.
func TestHelp(t *testing.T) {
	tests := []struct {
		args     []string
		commands bool // lists the commands
		options  bool // lists every option
		want     []string
	}{
		{[]string{"-h"}, true, true, nil},
		{[]string{"--help"}, true, true, nil},
		{[]string{"help"}, true, true, nil},
		{[]string{"help", "serve"}, false, true, []string{"Usage: muxd serve"}},
		{[]string{"help", "check"}, false, true, []string{"Usage: muxd check"}},
		{[]string{"check", "--help"}, false, true, []string{"Usage: muxd check"}},
		{[]string{"serve", "-h"}, false, true, []string{"Usage: muxd serve"}},
		{[]string{"help", "probe"}, false, false, []string{"Usage: muxd probe", "--count N", "default 10s"}},
		{[]string{"probe", "--help"}, false, false, []string{"Usage: muxd probe"}},
		{[]string{"help", "version"}, false, false, []string{"muxd --version"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errs := runCmd(t, tt.args...)
			if code != 0 || errs != "" {
				t.Fatalf("exit %d, stderr %q", code, errs)
			}
			flat := strings.Join(strings.Fields(out), " ") // wrapped lines joined
			for _, c := range []string{"muxd [serve] [OPTIONS]", "muxd help [COMMAND]"} {
				if strings.Contains(out, c) != tt.commands {
					t.Errorf("lists %q: %v, want %v", c, !tt.commands, tt.commands)
				}
			}
			if tt.options {
				for _, want := range []string{
					"--upstream URL", "(required)", "--request-timeout DURATION", "(default 30s)",
					"--upstream-wait DURATION", "(default 10s)", "--listen HOST:PORT", "(default 127.0.0.1:8547)",
					"--max-held-bytes N", "(default 67108864, 64 MiB)", "--config FILE", "--version",
					"Upstream (the nodes):", "--max-head-lag N", "(default 2)", "--head-timeout DURATION", "(default 1m0s)", "--failback-after DURATION", "Listeners (for clients):", "Limits:",
				} {
					if !strings.Contains(flat, want) {
						t.Errorf("help lacks %q", want)
					}
				}
				typ := reflect.TypeOf(Config{})
				for i := 0; i < typ.NumField(); i++ {
					key := typ.Field(i).Tag.Get("toml")
					if !strings.Contains(out, "  "+flagName(key)+" ") {
						t.Errorf("help lacks the flag of %s", key)
					}
				}
			} else if strings.Contains(out, "--max-held-bytes") {
				t.Errorf("options listed, want none:\n%s", out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
		})
	}
	if code, _, errs := runCmd(t, "help", "frobnicate"); code != 2 || !strings.Contains(errs, `unknown command "frobnicate"`) {
		t.Errorf("help frobnicate: exit %d, stderr %q", code, errs)
	}
}

// TestHelpListsEveryOption: each option is in exactly one help group and
// has a line of meaning.
func TestHelpListsEveryOption(t *testing.T) {
	seen := map[string]int{}
	for _, g := range optionGroups {
		for _, o := range g.options {
			seen[o.key]++
		}
	}
	typ := reflect.TypeOf(Config{})
	for i := 0; i < typ.NumField(); i++ {
		key := typ.Field(i).Tag.Get("toml")
		if seen[key] != 1 {
			t.Errorf("option %s is in %d help groups, want 1", key, seen[key])
		}
		if lookupOption(key).help == "" {
			t.Errorf("option %s has no help line", key)
		}
		delete(seen, key)
	}
	for k := range seen {
		t.Errorf("help group lists %s, which is not an option", k)
	}
}

// TestVersion: `muxd version`, `muxd --version` and `muxd check --version`
// print the same line.
func TestVersion(t *testing.T) {
	_, want, _ := runCmd(t, "version")
	if !strings.HasPrefix(want, "muxd ") {
		t.Fatalf("version: %q", want)
	}
	for _, args := range [][]string{{"--version"}, {"-version"}, {"check", "--version"}} {
		code, out, errs := runCmd(t, args...)
		if code != 0 || out != want || errs != "" {
			t.Errorf("%v: exit %d, stdout %q (want %q), stderr %q", args, code, out, want, errs)
		}
	}
	if code, _, _ := runCmd(t, "version", "extra"); code != 2 {
		t.Errorf("version extra: exit %d, want 2", code)
	}
}

// TestRepeatedFlag: a single-valued flag given twice is an error naming
// it; list flags and headers may repeat.
func TestRepeatedFlag(t *testing.T) {
	t.Setenv("MUXD_UPSTREAM", "")
	f := writeFile(t, "a.toml", `upstream = "ws://n:1"`)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"check", "--upstream", "ws://a:1", "--upstream", "ws://b:1", "--max-head-lag", "3", "--max-head-lag", "4"}, "--max-head-lag: given 2 times; give it once"},
		{[]string{"check", "--upstream", "ws://a:1", "--failback-after", "1s", "--failback-after", "0s"}, "--failback-after: given 2 times"},
		{[]string{"check", "--upstream", "ws://a:1", "--request-timeout", "1s", "--request-timeout=2s"}, "--request-timeout: given 2 times"},
		{[]string{"check", "--config", f, "--config", f}, "--config: given 2 times"},
		{[]string{"serve", "--upstream", "ws://a:1", "--listen", "nohost", "--listen", "127.0.0.1:99999"}, "--listen: given 2 times"},
	} {
		code, out, errs := runCmd(t, tt.args...)
		if code != 2 || !strings.Contains(errs, tt.want) || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and %q", tt.args, code, out, errs, tt.want)
		}
	}
	// --upstream is never named as repeated, even beside a flag that is.
	if _, _, errs := runCmd(t, "check", "--upstream", "ws://a:1", "--upstream", "ws://b:1", "--listen", ":1", "--listen", ":2"); strings.Contains(errs, "--upstream:") {
		t.Errorf("repeated --upstream refused: %s", errs)
	}
	cfg, _, err := loadConfig([]string{"--upstream", "ws://a:1", "--deny-methods", "x_*", "--deny-methods", "y_*",
		"--upstream-headers", "A: 1", "--upstream-headers", "B: 2", "--upstream", "ws://b:1"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg.DenyMethods, []string{"x_*", "y_*"}) || len(cfg.UpstreamHeaders) != 2 {
		t.Errorf("repeated list flags: deny %v headers %v", cfg.DenyMethods, cfg.UpstreamHeaders)
	}
	if want := (Upstreams{{URL: "ws://a:1"}, {URL: "ws://b:1"}}); !reflect.DeepEqual(cfg.Upstreams, want) {
		t.Errorf("repeated --upstream: %v, want %v", cfg.Upstreams, want)
	}
}

// TestAddressErrors: bad upstream URLs, ports and listen addresses are
// refused by check, naming what was given (the URL redacted) and what is
// accepted.
func TestAddressErrors(t *testing.T) {
	t.Setenv("MUXD_UPSTREAM", "")
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"upstream port out of range", []string{"--upstream", "ws://127.0.0.1:99999"},
			[]string{"port 99999 is not a port number from 1 to 65535", "got ws://127.0.0.1:99999"}},
		{"upstream port zero", []string{"--upstream", "wss://node.example:0/KEY"},
			[]string{"port 0 is not a port number", "got wss://node.example:0/…"}},
		{"upstream without a scheme", []string{"--upstream", "127.0.0.1:8546"},
			[]string{"has no scheme: did you mean ws://127.0.0.1:8546?"}},
		{"upstream host:port parsed as a scheme", []string{"--upstream", "localhost:8546"},
			[]string{"has no scheme: did you mean ws://localhost:8546?"}},
		{"upstream over http", []string{"--upstream", "http://127.0.0.1:8545/KEY"},
			[]string{"got http://127.0.0.1:8545/…", "not its WebSocket one"}},
		{"upstream without a host name", []string{"--upstream", "ws://:8546"},
			[]string{"has no host name, got ws://:8546"}},
		{"listen port out of range", []string{"--upstream", "ws://n:1", "--listen", "127.0.0.1:99999"},
			[]string{`listen: "127.0.0.1:99999": port "99999" is not a number from 0 to 65535`}},
		{"listen port not a number", []string{"--upstream", "ws://n:1", "--listen", "127.0.0.1:http"},
			[]string{`listen: "127.0.0.1:http": port "http"`}},
		{"listen without a port", []string{"--upstream", "ws://n:1", "--listen", "127.0.0.1"},
			[]string{`listen: "127.0.0.1" is not host:port, as in 127.0.0.1:8547`}},
		{"listen host not a host", []string{"--upstream", "ws://n:1", "--listen", "my_host!:8547"},
			[]string{`host "my_host!" is neither an IP address nor a host name`}},
		{"metrics port out of range", []string{"--upstream", "ws://n:1", "--metrics", ":70000"},
			[]string{`metrics: ":70000": port "70000"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errs := runCmd(t, append([]string{"check"}, tt.args...)...)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr %q", code, errs)
			}
			for _, w := range tt.want {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errs)
				}
			}
			if strings.Contains(errs, "KEY") || strings.Contains(errs, "<invalid url>") {
				t.Errorf("stderr shows the URL's path or hides it entirely:\n%s", errs)
			}
		})
	}
	for _, ok := range []string{"127.0.0.1:0", ":8547", "[::1]:8547", "localhost:8547"} {
		if code, _, errs := runCmd(t, "check", "--upstream", "ws://n:1", "--listen", ok); code != 0 {
			t.Errorf("listen %s refused: %s", ok, errs)
		}
	}
}

// TestTOMLSyntaxErrorAlone: a file that is not TOML is reported by line,
// and alone: no "upstream: not set" that only follows from it.
func TestTOMLSyntaxErrorAlone(t *testing.T) {
	t.Setenv("MUXD_UPSTREAM", "")
	f := writeFile(t, "bad.toml", "listen = \"127.0.0.1:8547\"\nupstream = \n")
	code, _, errs := runCmd(t, "check", "--config", f, "--log-level", "loud")
	if code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if !strings.Contains(errs, "bad.toml: line 2") || !strings.Contains(errs, "strings need quotes") {
		t.Errorf("stderr lacks the file, line and problem:\n%s", errs)
	}
	for _, not := range []string{"upstream: not set", "log_level", "problems"} {
		if strings.Contains(errs, not) {
			t.Errorf("stderr has %q besides the syntax error:\n%s", not, errs)
		}
	}
	code, _, errs = runCmd(t, "check", "--config", filepath.Join(t.TempDir(), "missing.toml"))
	if code != 2 || !strings.Contains(errs, "missing.toml") || strings.Contains(errs, "upstream: not set") {
		t.Errorf("missing file: exit %d, stderr:\n%s", code, errs)
	}
}

// TestIPCDirectory: check notes an IPC directory that does not exist (exit
// 0: under systemd it is made at start), and serve's bind error says what
// to do.
func TestIPCDirectory(t *testing.T) {
	t.Setenv("MUXD_UPSTREAM", "")
	path := filepath.Join(t.TempDir(), "nodir", "muxd.ipc")
	code, _, errs := runCmd(t, "check", "--upstream", "ws://n:1", "--ipc", path)
	if code != 0 || !strings.Contains(errs, "note: ipc: directory "+filepath.Dir(path)+" does not exist") {
		t.Errorf("check: exit %d, stderr %q", code, errs)
	}
	code, _, errs = runCmd(t, "serve", "--upstream", "ws://127.0.0.1:1", "--listen", "", "--ipc", path)
	if code != 1 || !strings.Contains(errs, "does not exist: create it") {
		t.Errorf("serve: exit %d, stderr %q", code, errs)
	}
}

// TestUpstreamWaitOption: upstream_wait is read from the file and the flag,
// validated, and handed to mux.
func TestUpstreamWaitOption(t *testing.T) {
	t.Setenv("MUXD_UPSTREAM", "ws://n:1")
	f := writeFile(t, "w.toml", `upstream_wait = "2s"`)
	for _, tt := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 10 * time.Second},
		{[]string{"--config", f}, 2 * time.Second},
		{[]string{"--config", f, "--upstream-wait", "250ms"}, 250 * time.Millisecond},
	} {
		cfg, _, err := loadConfig(tt.args)
		if err != nil {
			t.Fatal(err)
		}
		if got := muxConfig(cfg, nil, nil).UpstreamWait; got != tt.want {
			t.Errorf("%v: mux.Config.UpstreamWait %s, want %s", tt.args, got, tt.want)
		}
	}
	for _, bad := range []string{"0s", "-1s", "soon"} {
		code, _, errs := runCmd(t, "check", "--upstream-wait", bad)
		if code != 2 || !strings.Contains(errs, "upstream-wait") && !strings.Contains(errs, "upstream_wait") {
			t.Errorf("--upstream-wait %s: exit %d, stderr %q", bad, code, errs)
		}
	}
}

// TestUpstreamWaitServe: with the node down, a request through muxd gets
// -32002 with the reason "no upstream connected" after upstream_wait,
// long before request_timeout.
func TestUpstreamWaitServe(t *testing.T) {
	t.Setenv("MUXD_UPSTREAM", "")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "ws://" + l.Addr().String()
	l.Close() // nothing listens there now
	addr, _, _, _ := startServe(t, "--upstream", down, "--listen", "127.0.0.1:0",
		"--upstream-wait", "100ms", "--request-timeout", "10m", "--reconnect-max", "50ms", "--reconnect-initial", "10ms")
	done := postAsync(addr, `{"jsonrpc":"2.0","id":7,"method":"eth_chainId"}`)
	var r httpResult
	select {
	case r = <-done:
	case <-time.After(time.Minute): // far below request_timeout (10m)
		t.Fatal("no answer within a minute: the request waits for request_timeout, not upstream_wait")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	var resp struct {
		ID    json.RawMessage
		Error struct {
			Code    int
			Message string
			Data    struct{ Reason string }
		}
	}
	if err := json.Unmarshal([]byte(r.body), &resp); err != nil {
		t.Fatalf("answer %q: %v", r.body, err)
	}
	if string(resp.ID) != "7" || resp.Error.Code != -32002 || resp.Error.Message != "upstream unavailable" || resp.Error.Data.Reason != "no upstream connected" {
		t.Fatalf("answer %s, want -32002 upstream unavailable, reason no upstream connected", r.body)
	}
}

// TestProbeUnreachable: a probe of a closed port says once that the
// endpoint cannot be reached (no table of failed rows, no claim about
// order) and exits 1.
func TestProbeUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := l.Addr().String()
	l.Close()
	for _, u := range []string{"http://" + host, "ws://" + host} {
		code, out, errs := runProbeCmd(t, u)
		if code != 1 || out != "" || !strings.Contains(errs, "cannot reach "+u) || strings.Count(errs, "\n") != 1 {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 1 and one line 'cannot reach'", u, code, out, errs)
		}
	}
	code, _, errs := runProbeCmd(t, host)
	if code != 2 || !strings.Contains(errs, "did you mean ws://"+host+" or http://"+host+"?") {
		t.Errorf("probe %s: exit %d, stderr %q", host, code, errs)
	}
}

// TestProbeBatchUnanswered: a batch that gets no array back is not
// reported as "reordered".
func TestProbeBatchUnanswered(t *testing.T) {
	var b strings.Builder
	printReport(&b, ProbeReport{Endpoint: "x", BatchAnswered: false})
	if !strings.Contains(b.String(), "batch returned in request order: unknown") || strings.Contains(b.String(), "reordered") {
		t.Errorf("report for an unanswered batch:\n%s", b.String())
	}
}

// TestCoalesceCacheOptions: coalesce, coalesce_methods and cache_bytes
// reach mux as it reads them: off is an empty list and a negative size.
func TestCoalesceCacheOptions(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		methods   []string
		cache     int
		wantError string
	}{
		{"defaults", nil, mux.DefaultCoalesceMethods, mux.DefaultCacheBytes, ""},
		{"off", []string{"--coalesce", "false", "--cache-bytes", "0"}, []string{}, -1, ""},
		{"own list", []string{"--coalesce-methods", "eth_chainId,eth_call", "--cache-bytes", "1024"}, []string{"eth_chainId", "eth_call"}, 1024, ""},
		{"off wins over a list", []string{"--coalesce=false", "--coalesce-methods", "eth_call"}, []string{}, mux.DefaultCacheBytes, ""},
		{"bad bool", []string{"--coalesce", "maybe"}, nil, 0, "not true or false"},
		{"negative cache", []string{"--cache-bytes", "-1"}, nil, 0, "cache_bytes: must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, err := loadConfig(append([]string{"--upstream", "ws://a:1"}, tc.args...))
			if tc.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantError) {
					t.Fatalf("err = %v, want %q", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			mc := muxConfig(cfg, slog.New(slog.DiscardHandler), nil)
			if !reflect.DeepEqual(mc.CoalesceMethods, tc.methods) || mc.CacheBytes != tc.cache {
				t.Errorf("mux gets coalesce_methods %v cache_bytes %d, want %v %d", mc.CoalesceMethods, mc.CacheBytes, tc.methods, tc.cache)
			}
		})
	}
}
