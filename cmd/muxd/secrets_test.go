package main

import (
	"strings"
	"testing"
)

// secret marks the secret in every input of TestNoSecretInErrors;
// secretWord is one of letters only, which parsers quote whole where they
// stop at a digit.
const (
	secret     = "s3cr3tXYZZY"
	secretWord = "sekretxyzzy"
)

// TestNoSecretInErrors: for a bad input holding a secret (an upstream URL's
// credentials, path or query, a header value, text of a config file),
// neither stdout nor stderr shows it, and the error still names the option
// at fault.
func TestNoSecretInErrors(t *testing.T) {
	file := func(name, content string) string { return writeFile(t, name, content) }
	tests := []struct {
		name string
		env  string // MUXD_UPSTREAM
		args []string
		code int
		want []string // each must appear in stderr
	}{
		// Header flags.
		{name: "header flag with = for :", args: []string{"check", "--upstream", "ws://n:1", "--upstream-headers", "Authorization=Bearer " + secret},
			code: 2, want: []string{"--upstream-headers", `"Authorization=…"`, `"Name: value"`}},
		{name: "header flag that is a bare value", args: []string{"check", "--upstream", "ws://n:1", "--upstream-headers", secret},
			code: 2, want: []string{"--upstream-headers", `"Name: value"`}},
		{name: "header flag that is base64", args: []string{"check", "--upstream", "ws://n:1", "--upstream-headers", secret + "=="},
			code: 2, want: []string{"--upstream-headers"}},
		{name: "header flag value with CR LF", args: []string{"check", "--upstream", "ws://n:1", "--upstream-headers", "Authorization: Bearer " + secret + "\r\nX-Evil: 1"},
			code: 2, want: []string{`upstream_headers: "Authorization"`, "CR or LF"}},
		{name: "header flag name with CR LF", args: []string{"check", "--upstream", "ws://n:1", "--upstream-headers", "X-Key\r\n" + secret + ": v"},
			code: 2, want: []string{"upstream_headers: 1 header name"}},
		{name: "header flag name with a space", args: []string{"check", "--upstream", "ws://n:1", "--upstream-headers", "Bearer " + secret + ": v"},
			code: 2, want: []string{"upstream_headers: 1 header name"}},
		{name: "header value split by the shell", args: []string{"check", "--upstream", "ws://n:1", "--upstream-headers", "Authorization:", "Bearer", secret},
			code: 2, want: []string{"2 unexpected argument"}},

		// The upstream URL, from a flag, the environment or a file.
		{name: "url with credentials and a bad port", args: []string{"check", "--upstream", "wss://user:" + secret + "@node.example:badport/" + secret + "?key=" + secret},
			code: 2, want: []string{"upstream 1 (from --upstream)", "port"}},
		{name: "url whose password parses as a port", args: []string{"check", "--upstream", "wss://user:" + secret + "/x@node.example/"},
			code: 2, want: []string{"upstream 1 (from --upstream)", "port"}},
		{name: "url with a bad escape", args: []string{"check", "--upstream", "wss://node.example/%" + secret},
			code: 2, want: []string{"upstream 1 (from --upstream)", "escape"}},
		{name: "url with a control character", args: []string{"check", "--upstream", "wss://node.example/" + secret + "\n"},
			code: 2, want: []string{"upstream 1 (from --upstream)", "control character"}},
		{name: "url of the wrong scheme", args: []string{"check", "--upstream", "https://user:" + secret + "@node.example/" + secret + "?key=" + secret},
			code: 2, want: []string{"upstream 1 (from --upstream)", "ws:// or wss://", "https://node.example/…"}},
		{name: "url without a host", args: []string{"check", "--upstream", secret + "@node.example"},
			code: 2, want: []string{"upstream 1 (from --upstream)", "has no scheme: did you mean ws://node.example?"}},
		{name: "MUXD_UPSTREAM that is a bare key", env: secret, args: []string{"check"},
			code: 2, want: []string{"upstream 1 (from MUXD_UPSTREAM)", "ws:// or wss://"}},
		{name: "url that is a bare key", args: []string{"check", "--upstream", secretWord},
			code: 2, want: []string{"upstream 1 (from --upstream)", "ws:// or wss://"}},
		{name: "url that is a token with dots", args: []string{"check", "--upstream", "eyJhbGciOi." + secret + ".x9_" + secretWord},
			code: 2, want: []string{"upstream 1 (from --upstream)"}},
		{name: "MUXD_UPSTREAM with a bad port", env: "wss://user:" + secret + "@node.example:x/" + secret, args: []string{"check"},
			code: 2, want: []string{"upstream 1 (from MUXD_UPSTREAM)", "port"}},
		{name: "MUXD_UPSTREAM without a scheme", env: "node.example/" + secret, args: []string{"check"},
			code: 2, want: []string{"upstream 1 (from MUXD_UPSTREAM)"}},
		{name: "upstream in a file", args: []string{"check", "--config", file("up.toml", `upstream = "wss://u:`+secret+`@n:x/"`)},
			code: 2, want: []string{"upstream 1 (from ", "up.toml)"}},

		// Config files.
		{name: "toml: unquoted header value", args: []string{"check", "--upstream", "ws://n:1", "--config", file("h.toml", "[upstream_headers]\nAuthorization = Bearer "+secret+"\n")},
			code: 2, want: []string{"h.toml", "line 2", `"upstream_headers.Authorization"`, "strings need quotes"}},
		{name: "toml: unquoted key", args: []string{"check", "--upstream", "ws://n:1", "--config", file("q.toml", "[upstream_headers]\nX-Api-Key = "+secretWord+"\n")},
			code: 2, want: []string{"q.toml", "line 2", `"upstream_headers.X-Api-Key"`, "strings need quotes"}},
		{name: "toml: unclosed string", args: []string{"check", "--config", file("s.toml", "upstream = \"wss://node.example/"+secret+"\n")},
			code: 2, want: []string{"s.toml", "line 1", `"upstream"`}},
		{name: "toml: text after a value", args: []string{"check", "--config", file("t.toml", "upstream = 'ws://n:1' "+secret+"\n")},
			code: 2, want: []string{"t.toml", "line 1"}},
		{name: "toml: bare word", args: []string{"check", "--config", file("w.toml", "[upstream_headers]\n"+secret+"\n")},
			code: 2, want: []string{"w.toml", "line 2"}},
		{name: "toml: key defined twice", args: []string{"check", "--config", file("d.toml", "[upstream_headers]\n\"Bearer "+secret+"\" = 1\n\"Bearer "+secret+"\" = 2\n")},
			code: 2, want: []string{"d.toml", "line 3", "defined twice"}},
		{name: "toml: headers as a string", args: []string{"check", "--upstream", "ws://n:1", "--config", file("hs.toml", `upstream_headers = "Authorization: Bearer `+secret+`"`)},
			code: 2, want: []string{"hs.toml", "upstream_headers: want a table"}},
		{name: "toml: header value not a string", args: []string{"check", "--upstream", "ws://n:1", "--config", file("ha.toml", "[upstream_headers]\nAuthorization = [\"Bearer "+secret+"\"]\n")},
			code: 2, want: []string{"ha.toml", "upstream_headers: want a table"}},
		{name: "toml: header value with CR LF", args: []string{"check", "--upstream", "ws://n:1", "--config", file("hc.toml", "[upstream_headers]\nAuthorization = \"Bearer "+secret+"\\r\\nX: y\"\n")},
			code: 2, want: []string{`upstream_headers: "Authorization"`}},
		{name: "toml: header name not a token", args: []string{"check", "--upstream", "ws://n:1", "--config", file("hn.toml", "[upstream_headers]\n\"Bearer "+secret+"\" = \"x\"\n")},
			code: 2, want: []string{"upstream_headers: 1 header name"}},
		{name: "toml: upstream a number", args: []string{"check", "--config", file("un.toml", "upstream = 13\n")},
			code: 2, want: []string{"un.toml", "upstream: want a URL string, an array of them, or tables"}},
		{name: "toml: upstream table's url not a string", args: []string{"check", "--config", file("ut.toml", "upstream = [\"ws://n:1\", {url = [\"wss://node.example/"+secret+"\"]}]\n")},
			code: 2, want: []string{"ut.toml", "upstream 2: url: want a string"}},
		{name: "toml: upstream header value not a string", args: []string{"check", "--config", file("uh.toml", "[[upstream]]\nurl = \"wss://node.example/"+secret+"\"\nheaders = {Authorization = [\"Bearer "+secret+"\"]}\n")},
			code: 2, want: []string{"uh.toml", `upstream 1: headers: "Authorization": want a string`}},
		{name: "toml: upstream header name not a token", args: []string{"check", "--config", file("un2.toml", "upstream = [\"ws://n:1\", {url = \"ws://n:2\", headers = {\"Bearer "+secret+"\" = \"x\"}}]\n")},
			code: 2, want: []string{"upstream 2: headers: 1 header name"}},
		{name: "toml: upstream header value with CR LF", args: []string{"check", "--config", file("ucr.toml", "[[upstream]]\nurl = \"ws://n:1\"\nheaders = {Authorization = \"Bearer "+secret+"\\r\\nX: y\"}\n")},
			code: 2, want: []string{`upstream 1: headers: "Authorization": the value holds a control character`}},
		{name: "toml: unknown key in an upstream table", args: []string{"check", "--config", file("uk.toml", "upstream = [{url = \"ws://n:1\", \"wss://node.example/"+secret+"\" = 1}]\n")},
			code: 2, want: []string{"upstream 1: unknown key (not shown)"}},
		{name: "toml: a bad upstream among several", args: []string{"check", "--config", file("ub.toml", "upstream = [\"ws://n:1\", \"wss://user:"+secret+"@node.example:x/"+secret+"\"]\n")},
			code: 2, want: []string{"upstream 2 (from ", "ub.toml)", "port"}},
		{name: "MUXD_UPSTREAM: a bad upstream among several", env: "ws://n:1, wss://node.example:x/" + secret + "?key=" + secret, args: []string{"check"},
			code: 2, want: []string{"upstream 2 (from MUXD_UPSTREAM)", "port"}},
		{name: "the same upstream twice", args: []string{"check", "--upstream", "wss://node.example/" + secret, "--upstream", "ws://n:1", "--upstream", "wss://NODE.example/" + secret},
			code: 2, want: []string{"upstream 3 (from --upstream): wss://NODE.example/… is the same URL as upstream 1"}},
		{name: "several --upstream, one bad", args: []string{"check", "--upstream", "ws://n:1", "--upstream", "https://user:" + secret + "@node.example/" + secret},
			code: 2, want: []string{"upstream 2 (from --upstream)", "https://node.example/…"}},
		{name: "toml: unknown quoted key", args: []string{"check", "--upstream", "ws://n:1", "--config", file("k.toml", "\"wss://node.example/"+secret+"\" = 1\n")},
			code: 2, want: []string{"k.toml", "unknown option"}},

		// The command line itself.
		{name: "url as the command", args: []string{"wss://node.example/" + secret}, code: 2, want: []string{"unknown command"}},
		{name: "bad flag syntax", args: []string{"check", "---upstream=wss://node.example/" + secret}, code: 2, want: []string{"syntax"}},
		{name: "unknown flag with a value", args: []string{"check", "--upstreams=wss://node.example/" + secret}, code: 2, want: []string{"unknown flag -upstreams"}},
		{name: "url given to a number flag", args: []string{"check", "--upstream", "ws://n:1", "--max-clients", "wss://node.example/" + secret}, code: 2, want: []string{"--max-clients", "whole number"}},
		{name: "url given to a duration flag", args: []string{"check", "--upstream", "ws://n:1", "--request-timeout", "wss://node.example/" + secret}, code: 2, want: []string{"--request-timeout", "duration"}},
		{name: "serve reports the same", args: []string{"serve", "--upstream", "wss://user:" + secret + "@node.example:badport/", "--upstream-headers", "Authorization=" + secret},
			code: 2, want: []string{"upstream 1 (from --upstream)", "--upstream-headers"}},

		// muxd probe.
		{name: "probe: url given to --count", args: []string{"probe", "--count", "wss://node.example/" + secret, "ws://127.0.0.1:1"}, code: 2, want: []string{"-count"}},
		{name: "probe: credentials parsed as a scheme", args: []string{"probe", "user" + secret + ":pw@node.example"}, code: 2, want: []string{"no scheme: did you mean ws://node.example or http://node.example?"}},
		{name: "probe: a bare key", args: []string{"probe", secret}, code: 2, want: []string{"probe"}},
		{name: "probe: bad url", args: []string{"probe", "wss://user:" + secret + "@node.example:x/" + secret}, code: 2, want: []string{"bad URL", "port"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("MUXD_UPSTREAM", tt.env)
			code, stdout, stderr := runCmd(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d", code, tt.code)
			}
			if strings.Contains(stdout+stderr, secret) || strings.Contains(stdout+stderr, secretWord) {
				t.Errorf("the secret is shown:\nstdout: %s\nstderr: %s", stdout, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
}

// TestSecretFlagsWarning: serve warns, once and without the value, when an
// upstream URL with a key or an upstream header is given on the command
// line, where every local user can read it; not otherwise.
func TestSecretFlagsWarning(t *testing.T) {
	tests := []struct {
		name string
		env  string
		args []string
		want string // "" when no warning is due
	}{
		{"url with a key in the path", "", []string{"--upstream", "ws://127.0.0.1:1/" + secret}, "flags=[--upstream]"},
		{"url with credentials", "", []string{"--upstream", "ws://user:" + secret + "@127.0.0.1:1"}, "flags=[--upstream]"},
		{"header flag", "", []string{"--upstream", "ws://127.0.0.1:1", "--upstream-headers", "X-Api-Key: " + secret}, "flags=[--upstream-headers]"},
		{"both", "", []string{"--upstream", "ws://127.0.0.1:1/?key=" + secret, "--upstream-headers", "X-Api-Key: " + secret}, "flags=\"[--upstream --upstream-headers]\""},
		{"key in the second of several --upstream", "", []string{"--upstream", "ws://127.0.0.1:1", "--upstream", "ws://127.0.0.1:2/" + secret}, "flags=[--upstream]"},
		{"key in the first of several --upstream", "", []string{"--upstream", "ws://127.0.0.1:1/?key=" + secret, "--upstream", "ws://127.0.0.1:2"}, "flags=[--upstream]"},
		{"keys in two --upstream", "", []string{"--upstream", "ws://u:" + secret + "@127.0.0.1:1", "--upstream", "ws://127.0.0.1:2/" + secret}, "flags=[--upstream]"},
		{"plain url flag", "", []string{"--upstream", "ws://127.0.0.1:1"}, ""},
		{"plain url flags", "", []string{"--upstream", "ws://127.0.0.1:1", "--upstream", "ws://127.0.0.1:2"}, ""},
		{"keys in MUXD_UPSTREAM's list", "ws://127.0.0.1:1/" + secret + ",ws://127.0.0.1:2/" + secret, nil, ""},
		{"key in MUXD_UPSTREAM", "ws://127.0.0.1:1/" + secret, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("MUXD_UPSTREAM", tt.env)
			log := servedLog(t, tt.args...)
			warned := strings.Count(log, "process list")
			switch {
			case tt.want == "" && warned != 0:
				t.Fatalf("warned with nothing secret on the command line:\n%s", log)
			case tt.want != "" && (warned != 1 || !strings.Contains(log, tt.want)):
				t.Fatalf("want one warning naming %s:\n%s", tt.want, log)
			}
		})
	}
}

// servedLog starts muxd serve with args (on a port of its own), stops it,
// and returns what it logged, failing the test if it did not exit 0 or if
// the log holds the secret.
func servedLog(t *testing.T, args ...string) string {
	t.Helper()
	_, stderr, cancel, exit := startServe(t, append(args, "--listen", "127.0.0.1:0")...)
	cancel()
	if code := waitExit(t, exit, stderr); code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	log := stderr.String()
	if strings.Contains(log, secret) {
		t.Fatalf("the secret is in the log:\n%s", log)
	}
	return log
}

// TestPlausibleHost: what a "did you mean ws://…?" may show as a host.
func TestPlausibleHost(t *testing.T) {
	for _, c := range []struct {
		host, port string
		want       bool
	}{
		{"127.0.0.1", "", true},
		{"::1", "8546", true},
		{"fe80::1%eth0", "8546", false}, // a zone could be anything
		{"localhost", "", true},
		{"LocalHost", "8546", true},
		{"node.example", "", true},
		{"node.example.", "", true},
		{"eth-node.internal.example", "", true},
		{"mynode", "8546", true},
		{"proj_geth_1", "8546", true},      // a Compose v1 container name
		{"geth.eth-mainnet", "8546", true}, // a Kubernetes service in a namespace
		{"geth.ns1", "8546", true},
		{"alice", "123456789", false}, // not a port: a user and password, maybe
		{"alice", "0", false},
		{"mynode", "", false}, // one label and no port: could be a key
		{"KEY123SECRETVALUEONLY", "", false},
		{"eyJhbGciOi.eyJzdWIi.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c", "", false},
		{"a.b.c1", "", false}, // the last label is no top-level domain
		{"node.-example.com", "", false},
		{"node..example", "", false},
		{strings.Repeat("a", 64) + ".example", "", false},
		{"", "8546", false},
	} {
		if got := plausibleHost(c.host, c.port); got != c.want {
			t.Errorf("plausibleHost(%q, %q) = %v, want %v", c.host, c.port, got, c.want)
		}
	}
}
