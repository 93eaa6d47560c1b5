// Command muxd shares one upstream WebSocket to an Ethereum JSON-RPC node
// among many local clients.
//
//	muxd [serve] --upstream ws://127.0.0.1:8546 [--listen 127.0.0.1:8547] [--config FILE] …
//	muxd check --config FILE
//	muxd probe URL
//	muxd version (or --version)
//	muxd help [command] (or -h, --help)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hashicorp/go-multierror"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is muxd's command line; it returns the exit code: 0 on success, 1 on a
// runtime failure, 2 on a usage or configuration error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd, named := "serve", false
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args, named = args[0], args[1:], true
	}
	switch cmd {
	case "version":
		if len(args) > 0 {
			fmt.Fprintln(stderr, "muxd version: takes no arguments")
			return 2
		}
		writeVersion(stdout, currentBuild())
		return 0
	case "help":
		return runHelp(args, stdout, stderr)
	case "check":
		cfg, _, from, err := loadConfigFrom(args)
		if err != nil {
			return reportConfigError(cmd, err, stdout, stderr)
		}
		if cfg.IPC != "" {
			if note := ipcDirNote(cfg.IPC); note != "" {
				fmt.Fprintln(stderr, "muxd check: note:", note)
			}
		}
		for _, name := range unknownEnv(os.Environ()) {
			fmt.Fprintf(stderr, "muxd check: note: %s is set but is no option's variable (MUXD_ and a TOML key in capitals; see muxd help): ignored\n", name)
		}
		fmt.Fprintf(stdout, "configuration ok (%s)\n", redactedUpstreams(cfg))
		writeSources(stdout, cfg, from)
		return 0
	case "probe":
		return runProbe(ctx, args, stdout, stderr)
	case "serve":
		cfg, exposed, err := loadConfig(args)
		if errors.Is(err, flag.ErrHelp) && !named {
			return runHelp(nil, stdout, stderr) // muxd --help: the commands too
		}
		if err != nil {
			return reportConfigError(cmd, err, stdout, stderr)
		}
		// A reload reads the file and the environment again; the flags
		// given at start still win.
		load := func() (*Config, error) {
			cfg, _, err := loadConfig(args)
			return cfg, err
		}
		if err := serve(ctx, cfg, exposed, stderr, load); err != nil {
			fmt.Fprintln(stderr, "muxd:", withListFormat(err))
			return 1
		}
		return 0
	}
	// Shown only when it is a plain word: a URL or key put first by
	// mistake is not echoed.
	fmt.Fprintf(stderr, "muxd: unknown command %s (serve, check, probe, version, help); options start with --\n", shownWord(cmd))
	return 2
}

// errShowVersion is what loadConfig returns for --version.
var errShowVersion = errors.New("--version")

// reportConfigError prints what loadConfig returned for the command cmd and
// returns the exit code: 0 for --help and --version, 2 for a usage or
// configuration error.
func reportConfigError(cmd string, err error, stdout, stderr io.Writer) int {
	switch {
	case errors.Is(err, flag.ErrHelp):
		return runHelp([]string{cmd}, stdout, stderr)
	case errors.Is(err, errShowVersion):
		writeVersion(stdout, currentBuild())
		return 0
	}
	fmt.Fprintln(stderr, "muxd:", err)
	fmt.Fprintf(stderr, "Run 'muxd help %s' for every option with its default.\n", cmd)
	return 2
}

// listFormat writes several errors one to a line.
func listFormat(errs []error) string {
	if len(errs) == 1 {
		return errs[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d problems:", len(errs))
	for _, e := range errs {
		b.WriteString("\n  - " + e.Error())
	}
	return b.String()
}

// loadConfig builds the configuration: defaults, then the config file, then
// the environment (MUXD_<OPTION>, env.go), then flags; a source of
// upstreams replaces the list of the one before. It also returns the
// options given as flags whose values may be secrets (see
// flagValues.exposedSecrets). It returns flag.ErrHelp for -h and
// errShowVersion for --version.
func loadConfig(args []string) (*Config, []string, error) {
	cfg, exposed, _, err := loadConfigFrom(args)
	return cfg, exposed, err
}

// loadConfigFrom is loadConfig, also saying where each option's value came
// from (for muxd check).
func loadConfigFrom(args []string) (*Config, []string, optionSources, error) {
	fs, fv, showVersion := newFlagSet("muxd")
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, nil, nil, err
		}
		return nil, nil, nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if *showVersion {
		return nil, nil, nil, errShowVersion
	}
	if fs.NArg() > 0 {
		// Not quoted: a stray argument is often the rest of a value
		// with spaces, such as a header's.
		return nil, nil, nil, fmt.Errorf("%w: %d unexpected argument(s) after the options (not shown; a value with spaces needs quotes, and a command comes first)", ErrConfig, fs.NArg())
	}
	if err := fv.repeated(); err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", ErrConfig, withListFormat(err))
	}
	// Every problem is reported at once: the file's, the environment's,
	// the flags' and the resulting configuration's; but a file that
	// cannot be read or parsed is reported alone, since the rest would
	// follow from it.
	cfg := defaults()
	from := optionSources{}
	var errs *multierror.Error
	upstreamFrom := ""
	if file := fv.configFile(); file != "" {
		keys, err := readFile(&cfg, file)
		var unreadable *unreadableFileError
		if errors.As(err, &unreadable) {
			return nil, nil, nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		errs = multierror.Append(errs, err)
		for _, k := range keys {
			from[k] = "file"
		}
		if len(cfg.Upstreams) > 0 {
			upstreamFrom = file
		}
	}
	// The environment, over the file. An option given as a flag is not
	// read from it: the flag wins (and MUXD_UPSTREAM is then not parsed).
	keys, err := applyEnv(&cfg, os.LookupEnv, func(key string) bool { _, ok := fv.vals[key]; return ok })
	errs = multierror.Append(errs, err)
	for _, k := range keys {
		from[k] = "env"
	}
	if from["upstream"] == "env" {
		upstreamFrom = envName("upstream")
	}
	if _, ok := fv.vals["upstream"]; ok {
		upstreamFrom = "--upstream"
	}
	errs = multierror.Append(errs, fv.apply(&cfg))
	for _, name := range fv.order {
		if name != "config" {
			from[name] = "flag"
		}
	}
	// reconnect_max left at its default follows a longer reconnect_initial:
	// the default fell from 10 s to 2 s, and a configuration that set only
	// reconnect_initial, above 2 s, stays valid.
	if cfg.ReconnectMax == defaults().ReconnectMax && cfg.ReconnectInitial.Duration > cfg.ReconnectMax.Duration {
		cfg.ReconnectMax = cfg.ReconnectInitial
	}
	errs = multierror.Append(errs, annotateEnv(cfg.problems(upstreamFrom), from))
	if err := errs.ErrorOrNil(); err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", ErrConfig, withListFormat(err))
	}
	return &cfg, fv.exposedSecrets(), from, nil
}

// withListFormat flattens a multierror and gives it listFormat.
func withListFormat(err error) error {
	var me *multierror.Error
	if errors.As(err, &me) {
		flat := multierror.Flatten(me).(*multierror.Error)
		flat.ErrorFormat = listFormat
		return flat
	}
	return err
}
