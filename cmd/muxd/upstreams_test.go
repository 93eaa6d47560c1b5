package main

import (
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/muxd/muxd/mux"
)

// wantUp is one upstream as mux should get it: its URL and the
// Authorization header of its handshake ("" for none).
type wantUp struct{ url, auth string }

// muxUps reduces mux.Config.Upstreams to wantUps, failing on any header
// other than Authorization, which the tests below do not set.
func muxUps(t *testing.T, ups []mux.Upstream) []wantUp {
	t.Helper()
	var got []wantUp
	for _, u := range ups {
		for name := range u.Header {
			if name != "Authorization" {
				t.Errorf("upstream %s gets header %s", u.URL, name)
			}
		}
		got = append(got, wantUp{u.URL, u.Header.Get("Authorization")})
	}
	return got
}

// TestUpstreamSources: each form of the upstream option, from each source,
// gives mux the upstreams in order with the right handshake headers; a
// later source replaces the whole list.
func TestUpstreamSources(t *testing.T) {
	file := func(content string) string { return writeFile(t, "u.toml", content) }
	tests := []struct {
		name string
		file string // content of --config, none when ""
		env  string
		args []string
		want []wantUp
	}{
		{name: "one flag", args: []string{"--upstream", "ws://a:1"},
			want: []wantUp{{"ws://a:1", ""}}},
		{name: "repeated flag, in order", args: []string{"--upstream", "ws://b:1", "--upstream", "wss://a.example/KEY", "--upstream", "ws://c:1"},
			want: []wantUp{{"ws://b:1", ""}, {"wss://a.example/KEY", ""}, {"ws://c:1", ""}}},
		{name: "header flag applies to every upstream", args: []string{"--upstream", "ws://a:1", "--upstream-headers", "Authorization: Bearer all", "--upstream", "ws://b:1"},
			want: []wantUp{{"ws://a:1", "Bearer all"}, {"ws://b:1", "Bearer all"}}},
		{name: "file string", file: `upstream = "ws://a:1"`,
			want: []wantUp{{"ws://a:1", ""}}},
		{name: "file array of strings", file: `upstream = ["ws://a:1", "ws://b:1"]`,
			want: []wantUp{{"ws://a:1", ""}, {"ws://b:1", ""}}},
		{name: "file array mixing a table and a string", file: `
upstream = [{url = "wss://a.example/KEY", headers = {Authorization = "Bearer a"}}, "ws://127.0.0.1:8546"]
upstream_headers = {Authorization = "Bearer all"}
`, want: []wantUp{{"wss://a.example/KEY", "Bearer a"}, {"ws://127.0.0.1:8546", "Bearer all"}}},
		{name: "file [[upstream]] tables", file: `
[upstream_headers]
Authorization = "Bearer all"

[[upstream]]
url = "wss://a.example"
headers = {Authorization = "Bearer a"}

[[upstream]]
url = "ws://b:1"

[[upstream]]
url = "ws://c:1"
[upstream.headers]
Authorization = "Bearer c"
`, want: []wantUp{{"wss://a.example", "Bearer a"}, {"ws://b:1", "Bearer all"}, {"ws://c:1", "Bearer c"}}},
		{name: "file single table", file: "[upstream]\nurl = \"ws://a:1\"\nheaders = {Authorization = \"Bearer a\"}\n",
			want: []wantUp{{"ws://a:1", "Bearer a"}}},
		{name: "empty headers table sends none", file: `
upstream = ["ws://a:1", {url = "ws://b:1", headers = {}}]
upstream_headers = {Authorization = "Bearer all"}
`, want: []wantUp{{"ws://a:1", "Bearer all"}, {"ws://b:1", ""}}},
		{name: "header flag does not reach an upstream with its own", file: `upstream = [{url = "ws://a:1", headers = {Authorization = "Bearer a"}}, "ws://b:1"]`,
			args: []string{"--upstream-headers", "Authorization: Bearer flag"},
			want: []wantUp{{"ws://a:1", "Bearer a"}, {"ws://b:1", "Bearer flag"}}},
		{name: "env one", env: "ws://a:1",
			want: []wantUp{{"ws://a:1", ""}}},
		{name: "env list, spaces trimmed", env: " wss://a.example/KEY ,ws://b:1,\tws://c:1 ",
			want: []wantUp{{"wss://a.example/KEY", ""}, {"ws://b:1", ""}, {"ws://c:1", ""}}},
		{name: "env replaces the file's list", file: `upstream = [{url = "ws://f1:1", headers = {Authorization = "Bearer f"}}, "ws://f2:1", "ws://f3:1"]`,
			env: "ws://e:1", want: []wantUp{{"ws://e:1", ""}}},
		{name: "flags replace env and file", file: `upstream = ["ws://f1:1", "ws://f2:1"]`, env: "ws://e1:1,ws://e2:1",
			args: []string{"--upstream", "ws://x:1"}, want: []wantUp{{"ws://x:1", ""}}},
		{name: "flags replace a bad env", env: "ws://e1:1,,", args: []string{"--upstream", "ws://x:1"},
			want: []wantUp{{"ws://x:1", ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("MUXD_UPSTREAM", tt.env)
			args := tt.args
			if tt.file != "" {
				args = append([]string{"--config", file(tt.file)}, args...)
			}
			cfg, _, err := loadConfig(args)
			if err != nil {
				t.Fatal(err)
			}
			mc := muxConfig(cfg, slog.New(slog.DiscardHandler), nil)
			if got := muxUps(t, mc.Upstreams); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("mux gets upstreams %v, want %v", got, tt.want)
			}
		})
	}
}

// TestUpstreamHeadersNotShared: upstreams that get upstream_headers each
// get a header of their own, so that mux changing one changes no other.
func TestUpstreamHeadersNotShared(t *testing.T) {
	t.Setenv("MUXD_UPSTREAM", "")
	cfg, _, err := loadConfig([]string{"--upstream", "ws://a:1", "--upstream", "ws://b:1", "--upstream-headers", "X-Key: k"})
	if err != nil {
		t.Fatal(err)
	}
	ups := muxConfig(cfg, nil, nil).Upstreams
	ups[0].Header.Set("X-Key", "changed")
	if ups[1].Header.Get("X-Key") != "k" || cfg.UpstreamHeaders["X-Key"] != "k" {
		t.Fatalf("headers shared between upstreams: %v, %v", ups[1].Header, cfg.UpstreamHeaders)
	}
}

// TestUpstreamErrors: a bad list of upstreams is refused, naming the
// upstream by index and its source, and what to do.
func TestUpstreamErrors(t *testing.T) {
	file := func(content string) string { return writeFile(t, "bad.toml", content) }
	tests := []struct {
		name string
		env  string
		args []string
		want []string // each must appear in stderr
		not  []string // none may appear in stderr
	}{
		{name: "env with an empty item", env: "ws://a:1,,ws://b:1", args: []string{"check"},
			want: []string{"MUXD_UPSTREAM: item 2 of 3 is empty"}, not: []string{"upstream 1", "not set"}},
		{name: "env with a trailing comma", env: "ws://a:1, ", args: []string{"check"},
			want: []string{"MUXD_UPSTREAM: item 2 of 2 is empty"}},
		{name: "env with a bad URL", env: "ws://a:1, ws://b:1, node.example:8546", args: []string{"check"},
			want: []string{"upstream 3 (from MUXD_UPSTREAM): has no scheme: did you mean ws://node.example:8546?"}},
		{name: "bad URL at index 2 of the flags", args: []string{"check", "--upstream", "ws://a:1", "--upstream", "http://127.0.0.1:8545/KEY"},
			want: []string{"upstream 2 (from --upstream): must be a ws:// or wss:// URL, got http://127.0.0.1:8545/…"}, not: []string{"upstream 1", "KEY"}},
		{name: "empty flag", args: []string{"check", "--upstream", "ws://a:1", "--upstream", ""},
			want: []string{"upstream 2 (from --upstream): empty"}},
		{name: "several URLs in one flag", args: []string{"check", "--upstream", "ws://a:1,ws://b:1"},
			want: []string{"upstream 1 (from --upstream): its host holds a comma", "--upstream once for each"}},
		{name: "the same URL twice", args: []string{"check", "--upstream", "ws://a:1", "--upstream", "ws://b:1", "--upstream", "ws://a:1"},
			want: []string{"upstream 3 (from --upstream): ws://a:1 is the same URL as upstream 1; give each node once"}},
		{name: "the same URL twice, scheme and host in other case", args: []string{"check", "--upstream", "wss://a.example/KEY", "--upstream", "WSS://A.Example/KEY"},
			want: []string{"upstream 2 (from --upstream)", "is the same URL as upstream 1"}, not: []string{"KEY"}},
		{name: "the same URL twice in the file", args: []string{"check", "--config", file(`upstream = [{url = "ws://a:1", headers = {X = "1"}}, "ws://a:1"]`)},
			want: []string{"upstream 2 (from ", "bad.toml): ws://a:1 is the same URL as upstream 1"}},
		{name: "file: bad URL at index 2", args: []string{"check", "--config", file(`upstream = ["ws://a:1", "ws://b:99999", "ws://c:1"]`)},
			want: []string{"upstream 2 (from ", "bad.toml): port 99999"}, not: []string{"upstream 1 ", "upstream 3"}},
		{name: "file: empty array", args: []string{"check", "--config", file(`upstream = []`)},
			want: []string{"bad.toml: upstream: the array is empty"}, not: []string{"not set"}},
		{name: "file: element neither string nor table", args: []string{"check", "--config", file(`upstream = ["ws://a:1", 8546]`)},
			want: []string{"bad.toml: upstream 2: want a URL string"}, not: []string{"not set"}},
		{name: "file: table without url", args: []string{"check", "--config", file("[[upstream]]\nurl = \"ws://a:1\"\n[[upstream]]\nheaders = {X = \"1\"}\n")},
			want: []string{"bad.toml: upstream 2: its table has no url"}},
		{name: "file: unknown key in a table", args: []string{"check", "--config", file(`upstream = [{uri = "ws://a:1"}]`)},
			want: []string{`bad.toml: upstream 1: unknown key "uri" in its table (want url, and headers if it has its own)`}},
		{name: "file: headers not a table", args: []string{"check", "--config", file(`upstream = [{url = "ws://a:1", headers = "Authorization: x"}]`)},
			want: []string{"bad.toml: upstream 1: headers: want a table"}},
		{name: "file: several bad tables, each reported once", args: []string{"check", "--config", file("[[upstream]]\nuri = \"ws://a:1\"\n[[upstream]]\nurl = 1\n")},
			want: []string{"2 problems:", "bad.toml: upstream 1: unknown key", "bad.toml: upstream 2: url: want a string"}},
		{name: "file: [[upstreams]]", args: []string{"check", "--config", file("[[upstreams]]\nurl = \"ws://a:1\"\n")},
			want: []string{`unknown option "upstreams" (several upstreams are one option: upstream = [`, "[[upstream]] tables"}},
		{name: "no upstream anywhere", args: []string{"check"},
			want: []string{"upstream: not set"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("MUXD_UPSTREAM", tt.env)
			code, out, stderr := runCmd(t, tt.args...)
			if code != 2 || out != "" {
				t.Fatalf("exit %d, stdout %q, want 2 and nothing; stderr:\n%s", code, out, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(stderr, n) {
					t.Errorf("stderr has %q:\n%s", n, stderr)
				}
			}
		})
	}
}

// TestCheckListsUpstreams: check prints every upstream by index, redacted;
// one alone as before.
func TestCheckListsUpstreams(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  string
		args []string
		want string
	}{
		{"one", "", []string{"--upstream", "wss://node.example/" + secret}, "configuration ok (upstream wss://node.example/…)\n"},
		{"several flags", "", []string{"--upstream", "wss://u:" + secret + "@a.example/" + secret, "--upstream", "ws://127.0.0.1:8546"},
			"configuration ok (upstream 1 wss://a.example/…, upstream 2 ws://127.0.0.1:8546)\n"},
		{"env", "wss://a.example/?key=" + secret + ", ws://b:1 ,ws://c:1", nil,
			"configuration ok (upstream 1 wss://a.example/…, upstream 2 ws://b:1, upstream 3 ws://c:1)\n"},
		{"file tables", "", []string{"--config", writeFile(t, "t.toml", `upstream = [{url = "wss://a.example/`+secret+`", headers = {Authorization = "`+secret+`"}}, "ws://b:1"]`)},
			"configuration ok (upstream 1 wss://a.example/…, upstream 2 ws://b:1)\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("MUXD_UPSTREAM", tt.env)
			code, out, stderr := runCmd(t, append([]string{"check"}, tt.args...)...)
			if code != 0 || firstLine(out) != tt.want {
				t.Fatalf("exit %d, stdout %q, want 0 and %q; stderr %s", code, out, tt.want, stderr)
			}
		})
	}
}

// TestServeLogsUpstreams: the startup log names every upstream by index,
// redacted.
func TestServeLogsUpstreams(t *testing.T) {
	t.Setenv("MUXD_UPSTREAM", "ws://127.0.0.1:1/"+secret+", ws://u:"+secret+"@127.0.0.1:2")
	log := servedLog(t)
	if !strings.Contains(log, "upstream.1=ws://127.0.0.1:1/… upstream.2=ws://127.0.0.1:2") {
		t.Fatalf("the startup log does not list the upstreams:\n%s", log)
	}
}

// TestHealthOptions: max_head_lag, head_timeout and failback_after have
// their defaults, are read from the file and flags, are validated, and
// reach mux as it reads them (failback_after 0, never, is negative there).
func TestHealthOptions(t *testing.T) {
	t.Setenv("MUXD_UPSTREAM", "ws://a:1,ws://b:1")
	f := writeFile(t, "h.toml", "max_head_lag = 5\nhead_timeout = \"2m\"\nfailback_after = \"0s\"\n")
	tests := []struct {
		name      string
		args      []string
		lag       int
		timeout   time.Duration
		failback  time.Duration
		wantError string
		chainID   string
	}{
		{"defaults", nil, 2, 60 * time.Second, 30 * time.Second, "", ""},
		{"file", []string{"--config", f}, 5, 2 * time.Minute, -1, "", ""},
		{"flags over the file", []string{"--config", f, "--max-head-lag", "1", "--head-timeout", "15s", "--failback-after", "5m"}, 1, 15 * time.Second, 5 * time.Minute, "", ""},
		{"failback never", []string{"--failback-after", "0"}, 2, 60 * time.Second, -1, "", ""},
		{"lag zero", []string{"--max-head-lag", "0"}, 0, 0, 0, "max_head_lag: must be at least 1, got 0", ""},
		{"lag negative", []string{"--max-head-lag", "-1"}, 0, 0, 0, "max_head_lag: must be at least 1, got -1", ""},
		{"lag not a number", []string{"--max-head-lag", "two"}, 0, 0, 0, `--max-head-lag: "two" is not a whole number`, ""},
		{"head timeout zero", []string{"--head-timeout", "0s"}, 0, 0, 0, "head_timeout: must be positive, got 0s", ""},
		{"head timeout negative", []string{"--head-timeout", "-5s"}, 0, 0, 0, "head_timeout: must be positive, got -5s", ""},
		{"failback negative", []string{"--failback-after", "-1s"}, 0, 0, 0, "failback_after: must not be negative (0 never fails back), got -1s", ""},
		{"failback not a duration", []string{"--failback-after", "soon"}, 0, 0, 0, `--failback-after: "soon" is not a duration`, ""},
		{"chain id", []string{"--chain-id", "0x539"}, 2, 60 * time.Second, 30 * time.Second, "", "0x539"},
		{"chain id not hex", []string{"--chain-id", "1337"}, 0, 0, 0, `chain_id: want a hex quantity such as 0x1, got "1337"`, ""},
		{"file value of the wrong type", []string{"--config", writeFile(t, "w.toml", "max_head_lag = \"2\"\n")}, 0, 0, 0, "w.toml: max_head_lag:", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _, err := loadConfig(tt.args)
			if tt.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantError) {
					t.Fatalf("err = %v, want %q", err, tt.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			mc := muxConfig(cfg, nil, nil)
			if mc.ChainID != tt.chainID {
				t.Errorf("mux gets chain_id %q, want %q", mc.ChainID, tt.chainID)
			}
			if mc.MaxHeadLag != tt.lag || mc.HeadTimeout != tt.timeout || mc.FailbackAfter != tt.failback {
				t.Errorf("mux gets max_head_lag %d head_timeout %s failback_after %s, want %d %s %s",
					mc.MaxHeadLag, mc.HeadTimeout, mc.FailbackAfter, tt.lag, tt.timeout, tt.failback)
			}
		})
	}
}

// TestMuxConfigUpstreamsCanonical: mux gets each upstream's headers as
// an http.Header with canonical names, as upstream_headers always did.
func TestMuxConfigUpstreamsCanonical(t *testing.T) {
	t.Setenv("MUXD_UPSTREAM", "")
	f := writeFile(t, "c.toml", `upstream = [{url = "ws://a:1", headers = {"x-api-key" = "k1"}}, "ws://b:1"]`+"\n"+`upstream_headers = {"x-api-key" = "k2"}`)
	cfg, _, err := loadConfig([]string{"--config", f})
	if err != nil {
		t.Fatal(err)
	}
	ups := muxConfig(cfg, nil, nil).Upstreams
	want := []http.Header{{"X-Api-Key": {"k1"}}, {"X-Api-Key": {"k2"}}}
	for i, u := range ups {
		if !reflect.DeepEqual(u.Header, want[i]) {
			t.Errorf("upstream %d header %v, want %v", i+1, u.Header, want[i])
		}
	}
}
