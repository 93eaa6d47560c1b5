package main

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/muxd/muxd/reconnect"
)

// What muxd may print of what it was given. The upstream URL (userinfo,
// path and query, where providers put API keys), the values of
// upstream_headers and any text near them in a config file may be secrets:
// errors and logs name the option and say what is wrong, and show only
// reconnect.Redact's form of a URL and names that look like names.

// plainWord matches what is shown of a word muxd did not expect (a command,
// a flag, an option or header name): a name, not a value that might be a key.
var plainWord = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,39}$`)

// shownWord returns w quoted when it is a plain word, else a placeholder.
func shownWord(w string) string {
	if plainWord.MatchString(w) {
		return fmt.Sprintf("%q", w)
	}
	return "(not shown)"
}

// shownKey returns a dotted TOML key quoted when each of its parts is a
// plain word, else a placeholder.
func shownKey(k string) string {
	for _, p := range strings.Split(k, ".") {
		if !plainWord.MatchString(p) {
			return "(not shown)"
		}
	}
	return fmt.Sprintf("%q", k)
}

// isTokenByte reports whether b may appear in an HTTP header name (RFC 9110
// token).
func isTokenByte(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0
}

// validHeaderName reports whether name is an HTTP header name.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !isTokenByte(name[i]) {
			return false
		}
	}
	return true
}

// validHeaderValue reports whether v may be sent as a header value: no
// control characters other than tab (so no CR or LF that would start
// another header).
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; (b < ' ' && b != '\t') || b == 0x7f {
			return false
		}
	}
	return true
}

// malformedHeader describes a --upstream-headers value that is not
// "Name: value": its leading name when a name plainly comes first
// ("Authorization=…"), never what follows.
func malformedHeader(v string) string {
	i := strings.IndexFunc(v, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_')
	})
	// Only a name followed by a separator and more text: a value alone
	// ("SECRET", or base64 "c2VjcmV0==") is not shown at all.
	if i > 0 && plainWord.MatchString(v[:i]) && (v[i] == '=' || v[i] == ' ' || v[i] == '\t') &&
		strings.Trim(v[i:], "= \t") != "" {
		return fmt.Sprintf("%q", v[:i+1]+"…")
	}
	return "a value"
}

// errMalformedHeader is what setField reports for a header flag that is
// not "Name: value".
func errMalformedHeader(v string) error {
	return fmt.Errorf(`%s is not "Name: value" (value not shown)`, malformedHeader(v))
}

// urlProblem says what is wrong with an upstream URL that does not parse,
// without quoting it: url.Parse's own errors quote the URL, or parts of it
// that may be credentials.
func urlProblem(raw string) string {
	_, err := url.Parse(raw)
	if err == nil {
		return ""
	}
	msg := err.Error()
	for _, c := range []struct{ in, say string }{
		{"invalid port", "the port is not a number (a password holding / ? # or @ must be %-escaped)"},
		{"invalid userinfo", "the user:password part has characters that need %-escaping"},
		{"invalid URL escape", "a %-escape is not two hex digits"},
		{"in host name", "the host name has a character hosts cannot have"},
		{"control character", "it holds a control character (a CR or LF?)"},
		{"missing protocol scheme", "it has no scheme (ws:// or wss://)"},
		{"first path segment in URL cannot contain colon", "it has no scheme (ws:// or wss://)"},
	} {
		if strings.Contains(msg, c.in) {
			return c.say
		}
	}
	return "it does not parse"
}

// tomlSyntaxError describes a config file that is not valid TOML by
// position and kind only: the TOML parser's messages quote the text they
// stopped at, which may be a secret.
func tomlSyntaxError(file string, err error) error {
	var pe toml.ParseError
	if !errors.As(err, &pe) {
		return fmt.Errorf("%s: not valid TOML (details not shown, they may quote the file)", file)
	}
	where := fmt.Sprintf("line %d, column %d", pe.Position.Line, pe.Position.Col)
	if pe.LastKey != "" {
		where += ", after key " + shownKey(pe.LastKey)
	}
	return fmt.Errorf("%s: %s: %s (the text is not shown: it may hold a secret)", file, where, tomlProblem(pe.Message))
}

// tomlProblem turns a TOML parser message into one that quotes nothing from
// the file.
func tomlProblem(msg string) string {
	for _, c := range []struct{ prefix, say string }{
		{"expected value but found", "expected a value (strings need quotes)"},
		{"strings cannot contain newlines", "a string is not closed on its line"},
		{"unexpected EOF", "the file ends inside a value or table"},
		{"expected '.' or '='", "expected '=' after a key"},
		{"expected a top-level item to end with", "expected the end of the line after a value"},
		{"invalid escape", "a string has an invalid \\ escape"},
		{"Key '", "a key is defined twice, or as two kinds of thing"},
	} {
		if strings.HasPrefix(msg, c.prefix) {
			return c.say
		}
	}
	return "not valid TOML"
}

// urlHasSecrets reports whether raw has a part reconnect.Redact hides:
// userinfo, a path, a query or a fragment.
func urlHasSecrets(raw string) bool {
	u, err := url.Parse(raw)
	return err != nil || u.User != nil || strings.HasSuffix(reconnect.Redact(raw), "/…")
}
