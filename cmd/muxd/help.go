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
// line of meaning, in the groups and order of docs/configuration.md's
// reference. The flag package's own usage is not used: it shows every
// option as "value" with no default.

// optionGroup is a heading of the help and the options under it, by TOML key.
type optionGroup struct {
	title string
	keys  []string
}

// optionGroups lists every Config option once (TestHelpListsEveryOption).
var optionGroups = []optionGroup{
	{"Upstream (the nodes)", []string{"upstream", "upstream_headers", "max_head_lag", "head_timeout", "failback_after", "chain_id", "upstream_read_limit", "ping_interval", "ping_timeout", "reconnect_initial", "reconnect_max"}},
	{"Listeners (for clients)", []string{"listen", "ipc", "ipc_mode", "ipc_group", "metrics", "client_ping_interval"}},
	{"Requests", []string{"request_timeout", "upstream_wait", "shutdown_grace", "backfill_blocks", "history_blocks", "subscription_gap_notices"}},
	{"Coalescing and cache", []string{"coalesce", "coalesce_methods", "cache_bytes"}},
	{"HTTP connections (on listen)", []string{"http_read_header_timeout", "http_read_timeout", "http_idle_timeout", "max_connections"}},
	{"Logging", []string{"log_level", "log_format"}},
	{"Access", []string{"allowed_origins", "allowed_hosts", "deny_methods", "retry_methods"}},
	{"Limits", []string{"max_clients", "max_in_flight", "max_held_bytes", "max_held_bytes_total", "max_batch", "upstream_max_batch", "max_message_bytes", "max_subscriptions", "max_waiting", "outbound_queue_bytes", "outbound_queue_bytes_total", "slow_consumer_timeout", "http_body_bytes"}},
}

// optionHelp is one line of meaning for each option; docs/configuration.md
// says the same at more length.
var optionHelp = map[string]string{
	"upstream":                   "node WebSocket URL, ws:// or wss://; repeat for several, most preferred first (or MUXD_UPSTREAM, URLs separated by commas, which keeps keys out of the process list; in the file a string, an array, or tables with each node's own headers)",
	"upstream_headers":           `header for the handshake of every upstream that has no headers of its own, "Name: value"; repeatable; never logged`,
	"chain_id":                   "chain id (hex, e.g. 0x1) every upstream must report to be used; default: the first one reported",
	"max_head_lag":               "most blocks an upstream's head may be behind the best head seen and still be healthy (at least 1)",
	"head_timeout":               "an upstream with no new head for this long is unhealthy",
	"failback_after":             "how long the preferred upstream must have been healthy before muxd moves back to it (0: never)",
	"upstream_read_limit":        "largest message accepted from the node, bytes",
	"ping_interval":              "upstream keepalive ping interval (0 disables)",
	"client_ping_interval":       "a WebSocket client silent this long is pinged, and closed if it stays silent as long again (0 disables)",
	"ping_timeout":               "pong deadline; on expiry the upstream connection is replaced",
	"reconnect_initial":          "first delay before redialling the upstream (doubles, jittered)",
	"reconnect_max":              "longest delay between upstream dial attempts before jitter (up to 1.5x it; muxd never gives up)",
	"listen":                     `WebSocket and HTTP (POST) address for clients ("" disables)`,
	"ipc":                        "Unix socket path for IPC clients, geth's IPC format (its directory must exist)",
	"ipc_mode":                   "IPC socket file mode, octal",
	"ipc_group":                  "IPC socket group (needs ipc)",
	"metrics":                    "address for /metrics, /healthz, /readyz, /status (must differ from listen)",
	"request_timeout":            "deadline of each request, from arrival to answer (-32002 past it)",
	"upstream_wait":              "how long a request waits while no upstream is connected before -32002 (at most request_timeout)",
	"shutdown_grace":             "how long in-flight requests may finish on SIGTERM/SIGINT",
	"log_level":                  "debug, info, warn or error",
	"log_format":                 "text or json",
	"allowed_origins":            "Origin host patterns browser pages may open a WebSocket from",
	"allowed_hosts":              `Host header values accepted ("*" for any)`,
	"deny_methods":               "refused method patterns (-32601): * any run, ? one character, case ignored",
	"retry_methods":              "methods re-sent after an upstream reconnect (read-only ones)",
	"max_clients":                "concurrent client sessions (WebSocket, HTTP, IPC)",
	"max_in_flight":              "requests in flight per client (-32005 past it)",
	"max_held_bytes":             "bytes of one client's requests held in flight or waiting (-32005 past it)",
	"max_held_bytes_total":       "bytes of all clients' requests held in flight or waiting (-32005 past it)",
	"max_batch":                  "elements per client batch (at most max_in_flight)",
	"upstream_max_batch":         "most elements in one array sent to the node (geth's --rpc.batch-request-limit)",
	"max_message_bytes":          "largest client message, bytes",
	"max_subscriptions":          "subscriptions per client",
	"max_waiting":                "requests held while no upstream is connected, all clients together",
	"outbound_queue_bytes":       "bytes queued for a client (the first into an empty queue aside): a subscription push past it cuts the client as a slow consumer; answers to its own calls may pass it (see outbound_queue_bytes_total, slow_consumer_timeout)",
	"outbound_queue_bytes_total": "what all clients' queues hold past outbound_queue_bytes together; a client whose answer would take them past it is cut as a slow consumer",
	"slow_consumer_timeout":      "a client whose queue is past outbound_queue_bytes and that takes no message for this long is cut as a slow consumer (geth allows a write 10 s)",
	"http_body_bytes":            "largest HTTP request body, bytes (413 past it)",
	"http_read_header_timeout":   "an HTTP request's headers must arrive within this",
	"http_read_timeout":          "an HTTP request's body must arrive within this (408 and closed past it)",
	"http_idle_timeout":          "an idle keep-alive HTTP connection is closed after this",
	"max_connections":            "connections open on listen, WebSocket included (0: max_clients)",
	"backfill_blocks":            "most blocks of heads and logs a subscriber is sent after a reconnect or a head jump (0: off)",
	"history_blocks":             "most blocks of history an eth_subscribe with a fromBlock is served; longer is refused (0: fromBlock refused)",
	"subscription_gap_notices":   "tell a subscription's clients in band (a muxd_subscriptionGap notification) of every gap muxd could not close (false: off)",
	"coalesce":                   "identical read requests in flight together share one upstream call (false: off)",
	"coalesce_methods":           "methods whose identical requests are coalesced (read-only, no client state)",
	"cache_bytes":                "bytes of answers that cannot change kept to answer repeats at once (0: off)",
}

// optionArg names the value an option's flag takes, for the help.
var optionArg = map[string]string{
	"upstream": "URL", "upstream_headers": `"NAME: VALUE"`, "listen": "HOST:PORT", "metrics": "HOST:PORT",
	"ipc": "PATH", "ipc_mode": "MODE", "ipc_group": "GROUP", "log_level": "LEVEL", "log_format": "FORMAT",
	"allowed_origins": "LIST", "allowed_hosts": "LIST", "deny_methods": "LIST", "retry_methods": "LIST",
	"coalesce_methods": "LIST",
}

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
	v := reflect.ValueOf(defaults())
	fields := map[string]reflect.Value{}
	for i := 0; i < v.NumField(); i++ {
		fields[v.Type().Field(i).Tag.Get("toml")] = v.Field(i)
	}
	for _, g := range optionGroups {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, key := range g.keys {
			f := fields[key]
			arg := optionArg[key]
			if arg == "" {
				arg = argOfKind(f)
			}
			fmt.Fprintf(w, "  %-36s %s\n", flagName(key)+" "+arg, envName(key))
			fmt.Fprintf(w, "%s\n", wrapWords(optionHelp[key]+" ("+defaultText(key, f)+")", 84, "        "))
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
