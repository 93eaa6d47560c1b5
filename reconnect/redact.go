package reconnect

import (
	"net/url"
	"strings"
)

// invalidURL is what [Redact] returns for a URL it cannot safely reduce.
const invalidURL = "<invalid url>"

// Redact returns rawURL in a form that is safe to log: scheme://host[:port] only.
// Userinfo is dropped, and if the URL has a path (other than "/"), a query or a
// fragment, they are replaced by the marker "/…", e.g. "wss://mainnet.example.com/…".
// A URL that does not parse or has no scheme or host yields "<invalid url>".
//
// Redact is a pure function and safe for concurrent use.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return invalidURL
	}
	out := u.Scheme + "://" + u.Host
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		out += "/…"
	}
	return out
}

// Scrubber returns a Replacer that rewrites, in error text, every spelling of
// rawURL that libraries print (any ws/wss/http/https scheme, the password
// masked or not, quoted) to Redact(rawURL), and any leftover secret part of
// it (userinfo, path, query, fragment) to "…". Use it on errors from code
// that quotes the URL it was given.
func Scrubber(rawURL string) *strings.Replacer { return urlScrubber(rawURL) }
