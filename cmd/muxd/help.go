package main

import (
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
)

// The help muxd prints for `muxd help [command]`, `-h` and `--help`: the
// commands, then every option of serve and check with its default and one
// line of meaning, from the option table (options.go) that also makes
// docs/configuration.md's reference. The flag package's own usage is not
// used: it shows every option as "value" with no default.

// flagName is the flag of a TOML key.
func flagName(key string) string { return "--" + strings.ReplaceAll(key, "_", "-") }

// helpCommands lists the commands; `muxd help` and `muxd --help` start with it.
func helpCommands(w io.Writer) {
	fmt.Fprint(w, `muxd shares one upstream WebSocket to an Ethereum JSON-RPC node among many local
clients (WebSocket, HTTP and IPC), each answered under its own request ids.

Usage:
  muxd [serve] [OPTIONS]   run muxd (serve is the default command)
  muxd check [OPTIONS]     check the configuration, print each option and its source, exit
  muxd probe [--json] [--count N] [--timeout D] URL
                           print a correlation table for an endpoint (http, https, ws, wss)
  muxd version             print the version (also: muxd --version)
  muxd help [COMMAND]      this help, or one command's

Example, in front of a local node (geth --ws):
  muxd --upstream ws://127.0.0.1:8546 --listen 127.0.0.1:8547

Exit status: 0 done, 1 failed while running, 2 usage or configuration error.
`)
}

// helpOptions lists every option of serve and check, grouped, with its
// flag, value, default and meaning.
func helpOptions(w io.Writer) {
	fmt.Fprint(w, `
Options of serve and check. Each is also a key of the TOML file given with --config,
the flag's name with "-" written "_" (--request-timeout is request_timeout), and an
environment variable, MUXD_ and the key in capitals (MUXD_REQUEST_TIMEOUT). Later
sources win: defaults, the file, the environment, flags; a later source of upstreams
or of upstream headers replaces the whole list. Give a flag once; list options take
commas ("a,b") in flags and variables, and --upstream and --upstream-headers may be
repeated. MUXD_UPSTREAM_HEADERS takes "Name: value" entries one a line, or separated
by commas where the next "Name: " follows ("A: x, B: y"; "Accept: a, b" is one). An
empty variable counts as unset. muxd check shows where each value came from.

General:
  --config FILE
        TOML config file (example: configs/muxd.example.toml)
  -h, --help
        this help
  --version
        print the version
`)
	fields := defaultFields()
	for _, g := range optionGroups {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, o := range g.options {
			f := fields[o.key]
			arg := o.arg
			if arg == "" {
				arg = argOfKind(f)
			}
			fmt.Fprintf(w, "  %-36s %s\n", flagName(o.key)+" "+arg, envName(o.key))
			fmt.Fprintf(w, "%s\n", wrapWords(o.help+" ("+defaultText(o.key, f)+")", 84, "        "))
		}
	}
}

// argOfKind names a flag's value by its Go type.
func argOfKind(f reflect.Value) string {
	switch f.Interface().(type) {
	case Duration:
		return "DURATION"
	case int, int64:
		return "N"
	case bool:
		return "BOOL"
	}
	return "VALUE"
}

// defaultText is the default of one option as the help shows it.
func defaultText(key string, f reflect.Value) string {
	switch x := f.Interface().(type) {
	case Duration:
		return "default " + x.Duration.String()
	case int:
		return "default " + withBytes(key, int64(x))
	case int64:
		return "default " + withBytes(key, x)
	case Upstreams:
		return "required"
	case string:
		if x == "" {
			return "default none"
		}
		return "default " + x
	case []string:
		if len(x) == 0 {
			return "default none"
		}
		return "default " + strings.Join(x, ",")
	case map[string]string:
		return "default none"
	case bool:
		return "default " + strconv.FormatBool(x)
	}
	return ""
}

// withBytes adds the size in MiB to a byte count's default.
func withBytes(key string, n int64) string {
	s := strconv.FormatInt(n, 10)
	if (strings.HasSuffix(key, "_bytes") || strings.HasSuffix(key, "_bytes_total") || key == "upstream_read_limit") && n >= 1<<20 && n%(1<<20) == 0 {
		s += fmt.Sprintf(", %d MiB", n>>20)
	}
	return s
}

// wrapWords breaks s into lines of at most width bytes (a word longer than
// that, or a list joined by commas, breaks at a comma), each line indented.
func wrapWords(s string, width int, indent string) string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		for len(indent)+len(word) > width && strings.Contains(word[:len(word)-1], ",") {
			// A long comma-separated default: break after the last comma that fits.
			room := max(width-len(indent)-len(line)-1, 0)
			cut := strings.LastIndex(word[:min(room, len(word))], ",")
			if cut < 0 {
				if line == "" {
					break
				}
				lines, line = append(lines, line), ""
				continue
			}
			if line != "" {
				line += " "
			}
			lines, line = append(lines, line+word[:cut+1]), ""
			word = word[cut+1:]
		}
		switch {
		case line == "":
			line = word
		case len(indent)+len(line)+1+len(word) > width:
			lines, line = append(lines, line), word
		default:
			line += " " + word
		}
	}
	lines = append(lines, line)
	return indent + strings.Join(lines, "\n"+indent)
}

// helpProbe is `muxd help probe`.
func helpProbe(w io.Writer) {
	fmt.Fprint(w, `Usage: muxd probe [--json] [--count N] [--timeout D] URL

Sends one batch of common methods and the same methods as concurrent single
requests to URL (http://, https://, ws:// or wss://) and prints a row per request:
its id, the id of the answer, whether they match, latency, error. web3_sha3 calls
are canaries whose results are checked locally. Exit status 1 when a row did not
match or the endpoint cannot be reached, 2 for a usage error.

  --json          print JSON instead of a table
  --count N       rounds to run (default 1)
  --timeout D     deadline for each round (default 10s)

Example: muxd probe ws://127.0.0.1:8547
`)
}

// runHelp is `muxd help [command]`.
func runHelp(args []string, stdout, stderr io.Writer) int {
	if len(args) > 1 {
		fmt.Fprintln(stderr, "muxd help: give at most one command (serve, check, probe, version, help)")
		return 2
	}
	topic := ""
	if len(args) == 1 {
		topic = args[0]
	}
	switch topic {
	case "", "help":
		helpCommands(stdout)
		helpOptions(stdout)
	case "serve", "check":
		fmt.Fprintf(stdout, "Usage: muxd %s [OPTIONS]\n", topic)
		if topic == "check" {
			fmt.Fprintln(stdout, "\nValidates the options (and the file given with --config) as serve would, without\nstarting: every problem is listed and the exit status is 2; with none, prints the\nupstreams, then every option with where its value came from (default, file, env,\nflag) and the value (upstream URLs redacted, header values not shown), and exits 0.")
		} else {
			fmt.Fprintln(stdout, "\nRuns muxd until SIGTERM or SIGINT, then shuts down gracefully (shutdown_grace).")
		}
		helpOptions(stdout)
	case "probe":
		helpProbe(stdout)
	case "version":
		fmt.Fprintln(stdout, "Usage: muxd version (or muxd --version)\n\nPrints muxd's version, then its commit (-dirty: built from a modified tree), build\ndate and Go release, each where the binary knows it.")
	default:
		fmt.Fprintf(stderr, "muxd help: unknown command %s (serve, check, probe, version, help)\n", shownWord(topic))
		return 2
	}
	return 0
}
