package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
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

// newFlagSet defines one flag per config option, named after its TOML key
// with "_" written as "-", plus --config and --version. Every option flag,
// and --config, records what it is given in fv (so a repeated one can be
// refused); the help is help.go's, not the flag package's.
func newFlagSet(name string) (*flag.FlagSet, *flagValues, *bool) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fv := &flagValues{vals: map[string][]string{}}
	t := reflect.TypeOf(Config{})
	for i := 0; i < t.NumField(); i++ {
		key := t.Field(i).Tag.Get("toml")
		fs.Var(optionFlag{fv, key}, strings.ReplaceAll(key, "_", "-"), lookupOption(key).help)
	}
	fs.Var(optionFlag{fv, "config"}, "config", "TOML config file")
	showVersion := fs.Bool("version", false, "print the version")
	return fs, fv, showVersion
}

// configFile returns the --config value, "" when none was given.
func (fv *flagValues) configFile() string {
	if v := fv.vals["config"]; len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// repeated lists the single-valued flags given more than once: an error,
// never a silent override. Lists, --upstream-headers and --upstream (one
// URL each, in order of preference) may repeat.
func (fv *flagValues) repeated() error {
	var errs *multierror.Error
	kinds := map[string]reflect.Kind{"config": reflect.String}
	t := reflect.TypeOf(Config{})
	for i := 0; i < t.NumField(); i++ {
		kinds[t.Field(i).Tag.Get("toml")] = t.Field(i).Type.Kind()
	}
	for _, name := range fv.order {
		if k := kinds[name]; len(fv.vals[name]) > 1 && k != reflect.Slice && k != reflect.Map {
			errs = multierror.Append(errs, fmt.Errorf("--%s: given %d times; give it once (a later value does not override an earlier one)",
				strings.ReplaceAll(name, "_", "-"), len(fv.vals[name])))
		}
	}
	return errs.ErrorOrNil()
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
	case Upstreams:
		// One URL per flag, not split at commas: the list is the flags
		// in order.
		list := make(Upstreams, len(vals))
		for i, v := range vals {
			list[i] = UpstreamSpec{URL: v}
		}
		f.Set(reflect.ValueOf(list))
	case Duration:
		d, err := time.ParseDuration(last)
		if err != nil {
			return fmt.Errorf("%s is not a duration like 30s", shownValue(last))
		}
		f.Set(reflect.ValueOf(Duration{d}))
	case string:
		f.SetString(last)
	case bool:
		b, err := strconv.ParseBool(last)
		if err != nil {
			return fmt.Errorf("%s is not true or false", shownValue(last))
		}
		f.SetBool(b)
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

// parseFlags parses args with fs, printing nothing: -h and --help return
// flag.ErrHelp for the caller to print its help on stdout. The error
// returned quotes nothing typed except a plain flag name, since the flag
// package's own errors ("bad flag syntax: …", "invalid value … for flag …")
// print what may be a secret.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
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
	if slices.ContainsFunc(fv.vals["upstream"], urlHasSecrets) {
		names = append(names, "--upstream")
	}
	if len(fv.vals["upstream_headers"]) > 0 {
		names = append(names, "--upstream-headers")
	}
	return names
}
