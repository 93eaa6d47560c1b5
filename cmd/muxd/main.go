// Command muxd shares one upstream WebSocket to an Ethereum JSON-RPC node
// among many local clients.
//
//	muxd [serve] --upstream ws://127.0.0.1:8546 [--listen 127.0.0.1:8547] [--config FILE] …
//	muxd check --config FILE
//	muxd probe URL
//	muxd version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/hashicorp/go-multierror"
)

// version is set at build time with -ldflags "-X main.version=…"; otherwise
// the module version from the build info is used.
var version = ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is muxd's command line; it returns the exit code: 0 on success, 1 on a
// runtime failure, 2 on a usage or configuration error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "version":
		fmt.Fprintln(stdout, "muxd", versionString())
		return 0
	case "check":
		cfg, _, err := loadConfig(args, stderr)
		if err != nil {
			return reportConfigError(err, stderr)
		}
		fmt.Fprintf(stdout, "configuration ok (upstream %s)\n", redactedUpstream(cfg))
		return 0
	case "probe":
		return runProbe(ctx, args, stdout, stderr)
	case "serve":
		cfg, exposed, err := loadConfig(args, stderr)
		if err != nil {
			return reportConfigError(err, stderr)
		}
		if err := serve(ctx, cfg, exposed, stderr); err != nil {
			fmt.Fprintln(stderr, "muxd:", err)
			return 1
		}
		return 0
	}
	// Shown only when it is a plain word: a URL or key put first by
	// mistake is not echoed.
	fmt.Fprintf(stderr, "muxd: unknown command %s (serve, check, probe, version)\n", shownWord(cmd))
	return 2
}

func reportConfigError(err error, stderr io.Writer) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintln(stderr, "muxd:", err)
	return 2
}

// loadConfig builds the configuration: defaults, then the config file, then
// MUXD_UPSTREAM, then flags. It also returns the options given as flags
// whose values may be secrets (see flagValues.exposedSecrets).
func loadConfig(args []string, stderr io.Writer) (*Config, []string, error) {
	fs, fv, file := newFlagSet("muxd")
	if err := parseFlags(fs, args, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if fs.NArg() > 0 {
		// Not quoted: a stray argument is often the rest of a value
		// with spaces, such as a header's.
		return nil, nil, fmt.Errorf("%w: %d unexpected argument(s) after the options (not shown; a value with spaces needs quotes, and a command comes first)", ErrConfig, fs.NArg())
	}
	// Every problem is reported at once: the file's, the flags' and the
	// resulting configuration's.
	cfg := defaults()
	var errs *multierror.Error
	upstreamFrom := ""
	if *file != "" {
		errs = multierror.Append(errs, loadFile(&cfg, *file))
		if cfg.Upstream != "" {
			upstreamFrom = *file
		}
	}
	if v := os.Getenv("MUXD_UPSTREAM"); v != "" {
		cfg.Upstream, upstreamFrom = v, "MUXD_UPSTREAM"
	}
	if _, ok := fv.vals["upstream"]; ok {
		upstreamFrom = "--upstream"
	}
	errs = multierror.Append(errs, fv.apply(&cfg))
	errs = multierror.Append(errs, cfg.problems(upstreamFrom))
	if err := errs.ErrorOrNil(); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return &cfg, fv.exposedSecrets(), nil
}

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
