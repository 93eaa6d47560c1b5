package main

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/muxd/muxd/mux"
	"github.com/muxd/muxd/reconnect"
)

// The upstream option: the nodes muxd may use, most preferred first. It is
// given as --upstream (repeated, one URL each), MUXD_UPSTREAM (URLs
// separated by commas), or in the file as a string, an array, or tables
// that give an upstream its own handshake headers:
//
//	upstream = "ws://127.0.0.1:8546"
//	upstream = ["wss://a.example/KEY", "ws://127.0.0.1:8546"]
//	upstream = [{url = "wss://a.example", headers = {Authorization = "Bearer x"}}, "ws://127.0.0.1:8546"]
//
//	[[upstream]]
//	url = "wss://a.example"
//	headers = {Authorization = "Bearer x"}
//
// A source replaces the whole list, never adds to it. Upstreams are named by
// their place in the list, from 1 ("upstream 2"), and their URLs shown only
// as reconnect.Redact shows them.

// UpstreamSpec is one upstream as configured.
type UpstreamSpec struct {
	URL string
	// Headers are this upstream's own handshake headers; nil when it has
	// none, so upstream_headers applies. An empty table (headers = {})
	// means no headers at all.
	Headers map[string]string
}

// Upstreams is the upstream option.
type Upstreams []UpstreamSpec

// upstreamTOMLForms says which TOML forms the upstream option takes, for
// errors about it.
const upstreamTOMLForms = `want a URL string, an array of them, or tables {url = "…", headers = {Name = "value"}} (value not shown)`

// UnmarshalTOML reads the upstream option from the decoded TOML value: a
// string, a table, or an array of strings and tables ([[upstream]] included).
// Its errors name an upstream by index and a key only when it looks like a
// name, never a value: loadFile shows them as they are.
func (u *Upstreams) UnmarshalTOML(v any) error {
	var items []any
	switch x := v.(type) {
	case string, map[string]any:
		items = []any{x}
	case []any:
		items = append([]any{}, x...)
	case []map[string]any:
		items = []any{}
		for _, m := range x {
			items = append(items, m)
		}
	}
	// Given but unusable: empty, not nil, so that the problem is reported
	// once, here, and not again as "not set".
	*u = Upstreams{}
	if items == nil {
		return fmt.Errorf("upstream: %s", upstreamTOMLForms)
	}
	if len(items) == 0 {
		return errors.New("upstream: the array is empty; give at least one URL")
	}
	list := make(Upstreams, 0, len(items))
	var errs []error
	for i, item := range items {
		spec, p := upstreamItem(item)
		if p != "" {
			errs = append(errs, fmt.Errorf("upstream %d: %s", i+1, p))
		}
		list = append(list, spec)
	}
	if errs != nil {
		return errors.Join(errs...) // one line each (loadFile)
	}
	*u = list
	return nil
}

// upstreamItem reads one element of the upstream option: a URL string or a
// table with url and, optionally, headers. It returns what is wrong, "" when
// nothing is.
func upstreamItem(item any) (UpstreamSpec, string) {
	switch x := item.(type) {
	case string:
		return UpstreamSpec{URL: x}, ""
	case map[string]any:
		var spec UpstreamSpec
		for _, k := range slices.Sorted(maps.Keys(x)) {
			switch k {
			case "url":
				s, ok := x[k].(string)
				if !ok {
					return spec, "url: want a string, the ws:// or wss:// URL of the node (value not shown)"
				}
				spec.URL = s
			case "headers":
				m, ok := x[k].(map[string]any)
				if !ok {
					return spec, `headers: want a table {Name = "value", …} (value not shown)`
				}
				spec.Headers = make(map[string]string, len(m))
				for name, val := range m {
					s, ok := val.(string)
					if !ok {
						return spec, fmt.Sprintf("headers: %s: want a string (value not shown)", shownKey(name))
					}
					spec.Headers[name] = s
				}
			default:
				return spec, fmt.Sprintf("unknown key %s in its table (want url, and headers if it has its own)", shownKey(k))
			}
		}
		if _, ok := x["url"]; !ok {
			return spec, `its table has no url (want {url = "ws://…"})`
		}
		return spec, ""
	}
	return UpstreamSpec{}, upstreamTOMLForms
}

// upstreamsFromEnv reads MUXD_UPSTREAM: URLs separated by commas, spaces
// around them ignored. An empty item is an error, not skipped: a stray comma
// may stand where a URL was meant.
func upstreamsFromEnv(v string) (Upstreams, error) {
	parts := strings.Split(v, ",")
	var list Upstreams
	var empty []string
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			empty = append(empty, fmt.Sprint(i+1))
		}
		list = append(list, UpstreamSpec{URL: p})
	}
	if empty != nil {
		// Empty, not nil: given but unusable (see UnmarshalTOML).
		return Upstreams{}, fmt.Errorf("MUXD_UPSTREAM: item %s of %d is empty: separate URLs by single commas, with none at either end", strings.Join(empty, ", "), len(parts))
	}
	return list, nil
}

// upstreamProblems lists what is wrong with the upstream option: each URL
// (upstreamProblem), the same URL twice, and each upstream's own headers.
// from says where the list came from ("--upstream", "MUXD_UPSTREAM", the
// file's name).
func (c *Config) upstreamProblems(from string) []string {
	var ps []string
	switch {
	case c.Upstreams == nil:
		return []string{"upstream: not set (use --upstream, the config file, or MUXD_UPSTREAM); for example ws://127.0.0.1:8546"}
	case len(c.Upstreams) == 0:
		return nil // given in the file but unusable, which loadFile reported
	}
	seen := map[string]int{}
	for i, u := range c.Upstreams {
		name := fmt.Sprintf("upstream %d (from %s)", i+1, from)
		if u.URL == "" {
			ps = append(ps, name+": empty; give the node's ws:// or wss:// URL")
			continue
		}
		if p := upstreamProblem(u.URL); p != "" {
			ps = append(ps, name+": "+p)
			continue
		}
		key := sameURLKey(u.URL)
		if j, dup := seen[key]; dup {
			ps = append(ps, fmt.Sprintf("%s: %s is the same URL as upstream %d; give each node once", name, reconnect.Redact(u.URL), j+1))
			continue
		}
		seen[key] = i
		if u.Headers != nil {
			for _, p := range headerProblems(u.Headers) {
				ps = append(ps, fmt.Sprintf("upstream %d: headers: %s", i+1, p))
			}
		}
	}
	return ps
}

// sameURLKey is a valid upstream URL as compared for duplicates: scheme and
// host do not depend on case; everything else does (two keys of one
// provider are two upstreams).
func sameURLKey(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Scheme, u.Host = strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	return u.String()
}

// headerProblems says what is wrong with handshake headers: a value with a
// control character (by name), names that are not names (counted, not
// shown, since a name may be a value typed in the wrong place).
func headerProblems(h map[string]string) []string {
	var ps []string
	badNames := 0
	for _, name := range slices.Sorted(maps.Keys(h)) {
		switch {
		case !validHeaderName(name):
			badNames++
		case !validHeaderValue(h[name]):
			ps = append(ps, fmt.Sprintf("%q: the value holds a control character such as CR or LF (value not shown)", name))
		}
	}
	if badNames > 0 {
		ps = append(ps, fmt.Sprintf("%d header name(s) not valid: a name is letters, digits and -, without spaces or colons (not shown)", badNames))
	}
	return ps
}

// toHeader returns headers as an http.Header.
func toHeader(m map[string]string) http.Header {
	h := http.Header{}
	for k, v := range m {
		h.Set(k, v)
	}
	return h
}

// upstreamHeader is the handshake header of upstream i: its own headers
// when it has them, else upstream_headers.
func (c *Config) upstreamHeader(i int) http.Header {
	if own := c.Upstreams[i].Headers; own != nil {
		return toHeader(own)
	}
	return c.header()
}

// muxUpstreams is the upstream list mux is given.
func (c *Config) muxUpstreams() []mux.Upstream {
	ups := make([]mux.Upstream, len(c.Upstreams))
	for i, u := range c.Upstreams {
		ups[i] = mux.Upstream{URL: u.URL, Header: c.upstreamHeader(i)}
	}
	return ups
}

// redactedUpstreams lists the upstreams for `muxd check`: the URL alone
// when there is one, else each by index ("upstream 1 wss://a.example/…,
// upstream 2 ws://127.0.0.1:8546").
func redactedUpstreams(cfg *Config) string {
	if len(cfg.Upstreams) == 1 {
		return "upstream " + reconnect.Redact(cfg.Upstreams[0].URL)
	}
	parts := make([]string, len(cfg.Upstreams))
	for i, u := range cfg.Upstreams {
		parts[i] = fmt.Sprintf("upstream %d %s", i+1, reconnect.Redact(u.URL))
	}
	return strings.Join(parts, ", ")
}

// upstreamLogAttrs are the upstreams as the startup log shows them:
// upstream=URL for one, upstream.1=URL upstream.2=URL… for several, each
// redacted.
func upstreamLogAttrs(cfg *Config) []any {
	if len(cfg.Upstreams) == 1 {
		return []any{"upstream", reconnect.Redact(cfg.Upstreams[0].URL)}
	}
	var group []any
	for i, u := range cfg.Upstreams {
		group = append(group, fmt.Sprint(i+1), reconnect.Redact(u.URL))
	}
	return []any{slog.Group("upstream", group...)}
}
