package main

import (
	"fmt"
	"io"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/hashicorp/go-multierror"

	"github.com/muxd/muxd/reconnect"
)

// Every option can be given in the environment as MUXD_ and its TOML key in
// capitals: request_timeout is MUXD_REQUEST_TIMEOUT. The variables are
// derived from the Config struct's toml tags, like the flags, so a new
// option has its variable without further work (TestEnvEveryOption).
// Sources apply in this order, a later one winning: defaults, the file,
// the environment, flags. Values are written as for the flags:
//
//   - lists (and MUXD_UPSTREAM) are separated by commas;
//   - MUXD_UPSTREAM_HEADERS holds "Name: value" entries, one a line, or on
//     one line separated by commas, where a comma starts a new entry only
//     when the next entry's "Name: " (a header name, a colon and a space)
//     follows it: "Authorization: Bearer KEY, X-Api-Key: KEY2" is two
//     entries, "Accept: a, b" one;
//   - an empty variable counts as unset, as MUXD_UPSTREAM always has
//     (clear a list in the file or with a flag: --deny-methods "").
//
// An option given as a flag is not read from the environment at all, so a
// bad value there that the flag overrides is no error. Like a source of
// upstreams, MUXD_UPSTREAM_HEADERS replaces the file's headers as a whole.
// Errors name the variable and show a value only when it is short and
// plain (shownValue), never an upstream URL or a header value.

// envPrefix starts the name of every option's variable.
const envPrefix = "MUXD_"

// envName is the environment variable of the option with TOML key key.
func envName(key string) string { return envPrefix + strings.ToUpper(key) }

// optionSources says where each option's value came from: "file", "env" or
// "flag"; an option not in it has its default.
type optionSources map[string]string

// source is where key's value came from, "default" when nowhere.
func (s optionSources) source(key string) string {
	if v := s[key]; v != "" {
		return v
	}
	return "default"
}

// applyEnv sets over cfg the options whose variables are set (lookup is
// os.LookupEnv outside tests), except those for which skip is true (given
// as flags). It returns the keys it set and every bad value.
func applyEnv(cfg *Config, lookup func(string) (string, bool), skip func(key string) bool) ([]string, error) {
	var set []string
	var errs *multierror.Error
	v := reflect.ValueOf(cfg).Elem()
	for i := 0; i < v.NumField(); i++ {
		key := v.Type().Field(i).Tag.Get("toml")
		name := envName(key)
		raw, ok := lookup(name)
		if !ok || strings.TrimSpace(raw) == "" || skip(key) {
			continue
		}
		set = append(set, key)
		switch f := v.Field(i); f.Interface().(type) {
		case Upstreams:
			list, err := upstreamsFromEnv(raw) // its errors name MUXD_UPSTREAM
			errs = multierror.Append(errs, err)
			f.Set(reflect.ValueOf(list))
		case map[string]string:
			m, err := headersFromEnv(name, raw)
			errs = multierror.Append(errs, err)
			f.Set(reflect.ValueOf(m))
		default:
			// One value, as one flag would give it; spaces around it
			// (an env file's "MUXD_X = 30s" style) are not part of it.
			if err := setField(f, []string{strings.TrimSpace(raw)}); err != nil {
				errs = multierror.Append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	}
	return set, errs.ErrorOrNil()
}

// headerEntryStart matches what follows a comma that starts a new header
// entry: spaces, a header name, a colon and a space (or the end).
var headerEntryStart = regexp.MustCompile("^[ \t]*[!#$%&'*+.^_`|~0-9A-Za-z-]+:([ \t]|$)")

// headersFromEnv reads MUXD_UPSTREAM_HEADERS (named name in errors): see
// the rules above. Errors never show a value; a name only when one plainly
// comes first (malformedHeader).
func headersFromEnv(name, v string) (map[string]string, error) {
	var entries []string
	for _, line := range strings.Split(v, "\n") {
		start := 0
		for i := 0; i < len(line); i++ {
			if line[i] == ',' && headerEntryStart.MatchString(line[i+1:]) {
				entries = append(entries, line[start:i])
				start = i + 1
			}
		}
		entries = append(entries, line[start:])
	}
	m := map[string]string{}
	var errs *multierror.Error
	n := 0
	for _, e := range entries {
		if e = strings.TrimSpace(e); e == "" {
			continue // a blank line, or the newline that ends the last entry
		}
		n++
		k, val, ok := strings.Cut(e, ":")
		if !ok {
			errs = multierror.Append(errs, fmt.Errorf("%s: entry %d: %w", name, n, errMalformedHeader(e)))
			continue
		}
		m[strings.TrimSpace(k)] = strings.TrimSpace(val)
	}
	return m, errs.ErrorOrNil()
}

// problemKey matches the option a problem of Config.problems is about: its
// key, then ": " or " (".
var problemKey = regexp.MustCompile(`^([a-z_]+)(?::| \()`)

// annotateEnv adds "(from MUXD_X)" to each problem about an option set in
// the environment: the message names the option, which the file and the
// flags may not show.
func annotateEnv(errs *multierror.Error, from optionSources) *multierror.Error {
	if errs == nil {
		return nil
	}
	for i, e := range errs.Errors {
		if m := problemKey.FindStringSubmatch(e.Error()); m != nil && from[m[1]] == "env" {
			errs.Errors[i] = fmt.Errorf("%w (from %s)", e, envName(m[1]))
		}
	}
	return errs
}

// toolVariable matches MUXD_ variables that are not options but are read
// by the repository's own scripts and tests (the geth binary, test and
// benchmark children): not worth a note.
var toolVariable = regexp.MustCompile(`^MUXD_(GETH|TEST_[A-Z0-9_]*|BENCH_[A-Z0-9_]*)$`)

// unknownEnv lists the MUXD_ variables in environ (os.Environ's form) that
// are not options: most likely a misspelt one, whose option silently keeps
// its value from elsewhere.
func unknownEnv(environ []string) []string {
	known := map[string]bool{}
	t := reflect.TypeOf(Config{})
	for i := 0; i < t.NumField(); i++ {
		known[envName(t.Field(i).Tag.Get("toml"))] = true
	}
	var names []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || known[name] || toolVariable.MatchString(name) {
			continue
		}
		if !plainWord.MatchString(name) {
			name = "(a name not shown)"
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// writeSources prints, for `muxd check`, every option in the help's order
// with where its value came from and the value; secrets are not shown:
// upstream URLs as reconnect.Redact shows them, headers by name only.
func writeSources(w io.Writer, cfg *Config, from optionSources) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OPTION\tFROM\tVALUE")
	v := reflect.ValueOf(cfg).Elem()
	fields := map[string]reflect.Value{}
	for i := 0; i < v.NumField(); i++ {
		fields[v.Type().Field(i).Tag.Get("toml")] = v.Field(i)
	}
	for _, g := range optionGroups {
		for _, o := range g.options {
			key := o.key
			shown := shownOption(fields[key])
			if key == "reconnect_max" && from["reconnect_max"] == "" && cfg.ReconnectMax != defaults().ReconnectMax {
				shown += " (follows reconnect_initial)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", key, from.source(key), shown)
		}
	}
	tw.Flush()
}

// shownOption is an option's value as `muxd check` prints it.
func shownOption(f reflect.Value) string {
	switch x := f.Interface().(type) {
	case Upstreams:
		parts := make([]string, len(x))
		for i, u := range x {
			parts[i] = reconnect.Redact(u.URL)
			if u.Headers != nil {
				parts[i] += " (own headers: " + headerNames(u.Headers) + ")"
			}
		}
		return strings.Join(parts, ", ")
	case map[string]string:
		if len(x) == 0 {
			return "none"
		}
		return headerNames(x) + " (values not shown)"
	case Duration:
		return x.Duration.String()
	case []string:
		if len(x) == 0 {
			return "none"
		}
		return strings.Join(x, ",")
	case string:
		if x == "" {
			return "none"
		}
		return x
	}
	return fmt.Sprint(f.Interface())
}

// headerNames lists the names of headers, sorted; "none" for none. A name
// that is not a valid header name is not shown (a value may have been
// typed in its place), though check refuses such names before printing.
func headerNames(h map[string]string) string {
	if len(h) == 0 {
		return "none"
	}
	names := slices.Sorted(maps.Keys(h))
	for i, n := range names {
		if !validHeaderName(n) {
			names[i] = "(not shown)"
		}
	}
	return strings.Join(names, ", ")
}
