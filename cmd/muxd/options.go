package main

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

//go:generate go test -run ^TestConfigurationReferenceIsCurrent$ . -update

// The option table: every option of Config once, in the groups and order
// that `muxd help` and docs/configuration.md's reference show them. Both
// are made from it: the help by helpOptions, the reference's tables by
// optionReference, which `go generate ./cmd/muxd` writes into
// docs/configuration.md between its markers
// (TestConfigurationReferenceIsCurrent fails while the committed file
// differs). An option's flag (--key with "_" as "-") and variable (MUXD_KEY)
// follow from its key, and its default from defaults().

// option is one row of the table.
type option struct {
	key  string // the TOML key
	arg  string // what the flag takes, as the help names it; "" names it by its Go type
	help string // one line of meaning for `muxd help`
	// doc is the meaning in the reference (Markdown, no "|"); "" is help.
	doc string
	// docDefault is the default as the reference shows it, where the one
	// formatted from defaults() would say less; "" formats that one.
	docDefault string
}

// optionGroup is a heading of the help and of the reference, and the
// options under it.
type optionGroup struct {
	title   string
	options []option
}

// optionGroups lists every Config option once (TestHelpListsEveryOption).
var optionGroups = []optionGroup{
	{"Upstream (the nodes)", []option{
		{key: "upstream", arg: "URL",
			help:       "node WebSocket URL, ws:// or wss://; repeat for several, most preferred first (or MUXD_UPSTREAM, URLs separated by commas, which keeps keys out of the process list; in the file a string, an array, or tables with each node's own headers)",
			doc:        "node WebSocket URL, `ws://` or `wss://`, or several, most preferred first: `--upstream` once for each, `MUXD_UPSTREAM` separated by commas (spaces around them ignored), in the file a string, an array, or tables that give an upstream its own headers (below). Upstreams are named by their place in the list, from 1 (`upstream 2`), and shown as `scheme://host:port/…`. Two equal URLs are an error",
			docDefault: "required"},
		{key: "upstream_headers", arg: "\"NAME: VALUE\"",
			help: "header for the handshake of every upstream that has no headers of its own, \"Name: value\"; repeatable; never logged",
			doc:  "handshake headers of every upstream that has no headers of its own (TOML table; flag `\"Name: value\"`, repeatable); never logged"},
		{key: "max_head_lag",
			help: "most blocks an upstream's head may be behind the best head seen and still be healthy (at least 1)",
			doc:  "most blocks an upstream's head may be behind the best head seen and still be healthy; at least 1"},
		{key: "head_timeout",
			help: "an upstream with no new head for this long is unhealthy"},
		{key: "failback_after",
			help: "how long the preferred upstream must have been healthy before muxd moves back to it (0: never)",
			doc:  "how long the preferred upstream must have been healthy before muxd moves back to it; `0` never moves back"},
		{key: "chain_id",
			help: "chain id (hex, e.g. 0x1) every upstream must report to be used; default: the first one reported",
			doc:  "with several upstreams, the chain id (hex, e.g. `0x1`) each must report to be used; without it the first upstream to answer `eth_chainId` sets it"},
		{key: "upstream_read_limit",
			help: "largest message accepted from the node, bytes",
			doc:  "largest message muxd takes from the node; a larger answer is read and thrown away, and the request it answered (every call of its batch's array, for an array) gets `-32005` (`reason: response too large`) while the connection and every other request go on"},
		{key: "ping_interval",
			help: "upstream keepalive ping interval (0 disables)",
			doc:  "after this long with no sign of life from the node (no byte read, no queued write taken), or with no answer to a request heard, muxd pings it, and sends it one request of its own before the ping (`eth_chainId`, id `\"muxd-keepalive\"`, its answer routed to no client); `0` disables. A busy connection whose requests are answered is neither pinged nor asked; one carrying only pushes (or idle) is, every interval: on a provider that counts requests, that is one `eth_chainId` per `ping_interval` on an idle connection"},
		{key: "ping_timeout",
			help: "pong deadline; on expiry the upstream connection is replaced",
			doc:  "if nothing has progressed (no byte read, no pong, no queued write that found the socket full taken once the node's side made room) this long after the ping, the node is declared dead and the connection replaced: a node reading a large backlog slowly stays connected. If bytes came but no pong and no answer (the node pushes heads yet takes nothing of ours) and a message begun after the ping has arrived whole, the node is declared deaf and replaced the same way: a node sending one long answer slowly stays connected. A node that answers the ping but no request, muxd's own included, is declared deaf once it has answered none for `request_timeout` + `ping_interval` (and a message begun after the ping has ended, or nothing is being received), at the end of a round"},
		{key: "reconnect_initial",
			help: "first delay before redialling the upstream (doubles, jittered)",
			doc:  "first delay before redialling the upstream; doubles with jitter"},
		{key: "reconnect_max",
			help: "longest delay between upstream dial attempts before jitter (up to 1.5x it; muxd never gives up)",
			doc:  "longest delay between dial attempts, before jitter (muxd never gives up; reset after 30 s of health); left unset, it follows a longer `reconnect_initial`. It bounds how long muxd stays away once the node is back (up to 1.5 × it) while no request waits; while requests wait for a connection (`upstream_wait`), muxd dials every 250 ms"},
	}},
	{"Listeners (for clients)", []option{
		{key: "listen", arg: "HOST:PORT",
			help: "WebSocket and HTTP (POST) address for clients (\"\" disables)",
			doc:  "WebSocket and HTTP (POST) for clients"},
		{key: "ipc", arg: "PATH",
			help: "Unix socket path for IPC clients, geth's IPC format (its directory must exist)",
			doc:  "Unix socket path (geth's IPC stream format)"},
		{key: "ipc_mode", arg: "MODE",
			help: "IPC socket file mode, octal",
			doc:  "socket file mode"},
		{key: "ipc_group", arg: "GROUP",
			help: "IPC socket group (needs ipc)",
			doc:  "socket file group"},
		{key: "metrics", arg: "HOST:PORT",
			help: "address for /metrics, /healthz, /readyz, /status (must differ from listen)",
			doc:  "address of `/metrics`, `/healthz`, `/readyz`, `/status`"},
		{key: "client_ping_interval",
			help: "a WebSocket client silent this long is pinged, and closed if it stays silent as long again (0 disables)",
			doc:  "every WebSocket client is checked at this interval: one that sent nothing and took nothing muxd writes since the last check (a write under way for less than two intervals counts as taking) is pinged, so after one to two intervals of silence; one that answers nothing (no pong, no frame) within another interval is closed with `1001 ping timeout` and counted, as geth does every 30 s. A hung client would otherwise keep its session, subscriptions and connection slot for good. `0` disables"},
	}},
	{"Requests", []option{
		{key: "request_timeout",
			help: "deadline of each request, from arrival to answer (-32002 past it)",
			doc:  "per-request deadline, from arrival to answer; with `ping_interval`, also how long an upstream that answers pings may answer no request before keepalive finds it deaf (`ping_timeout`)"},
		{key: "upstream_wait",
			help: "how long a request waits while no upstream is connected before -32002 (at most request_timeout)",
			doc:  "how long a request waits for an upstream connection before `-32002` (`reason: no upstream connected`), given once a dial fails after it (a node back by then gets the request); at most `request_timeout`"},
		{key: "shutdown_grace",
			help: "how long in-flight requests may finish on SIGTERM/SIGINT",
			doc:  "how long in-flight requests may finish on SIGTERM; after that (or once none is left) muxd answers every request `-32002` (`shutdown`) itself"},
		{key: "backfill_blocks",
			help: "most blocks of heads and logs a subscriber is sent after a reconnect or a head jump (0: off)",
			doc:  "most blocks of heads/logs sent to a subscriber after a reconnect or a head jump, and how many delivered blocks are remembered per subscription (logs: the last backfill_blocks numbers and the one below; hashes of heads: 64 more, so that a deeper reorg's fork point is still found and the gap it leaves named exactly); a longer gap is filled from head − backfill_blocks and counted. \"head\" is the block that ends the gap as that subscription sees it: for `newHeads` the node's next head (pushed, or asked for after 1 s), for `logs` the node's head when the subscription is live again; when the node mines a block in between, a `logs` subscription resumes one block below the `newHeads` one (both count `too_long`). 0 turns backfill off"},
		{key: "history_blocks",
			help: "most blocks of history an eth_subscribe with a fromBlock is served; longer is refused (0: fromBlock refused)",
			doc:  "most blocks of history an `eth_subscribe` with a `fromBlock` block number is served: its range from `fromBlock` to the node's head (or to its `toBlock`, when lower); a longer one is refused with `-32602` before the subscription is made (see [behaviour.md](behaviour.md#subscribe-from-a-block)). 0 refuses every `fromBlock` subscription (as does `backfill_blocks = 0`, whose machinery serves the history)"},
		{key: "subscription_gap_notices",
			help: "tell a subscription's clients in band (a muxd_subscriptionGap notification) of every gap muxd could not close (false: off)",
			doc:  "every client of a subscription with a gap muxd could not close (the reasons of `muxd_backfill_gaps_total`) also gets, on its connection right after what the subscription was sent, `{\"jsonrpc\":\"2.0\",\"method\":\"muxd_subscriptionGap\",\"params\":{\"subscription\":\"0x…\",\"result\":{\"kind\":\"logs\",\"reason\":\"reorg_too_deep\",\"fromBlock\":\"0xd\",\"toBlock\":\"0xf\"}}}` (blocks when known; `toBlock` alone: deeper than muxd remembers). go-ethereum's client drops a method it does not handle; check yours before turning this on. Off, the wire is exactly the node's"},
	}},
	{"Coalescing and cache", []option{
		{key: "coalesce",
			help: "identical read requests in flight together share one upstream call (false: off)",
			doc:  "identical reads in flight together (same method, same params after whitespace and key order) share one upstream call; each client gets the node's answer under its own id"},
		{key: "coalesce_methods", arg: "LIST",
			help: "methods whose identical requests are coalesced (read-only, no client state)",
			doc:  "methods that coalesce: read-only, carrying no client state (the same call from two clients means the same thing). Filters, transactions, subscriptions and anything with side effects must never be listed"},
		{key: "cache_bytes",
			help: "bytes of answers that cannot change kept to answer repeats at once (0: off)",
			doc:  "bytes of answers that cannot change kept to answer repeats at once (least recently used out first); 0 turns it off"},
	}},
	{"HTTP connections (on listen)", []option{
		{key: "http_read_header_timeout",
			help: "an HTTP request's headers must arrive within this",
			doc:  "an HTTP request's headers must arrive within this (a new connection: from its opening)"},
		{key: "http_read_timeout",
			help: "an HTTP request's body must arrive within this (408 and closed past it)",
			doc:  "an HTTP request's body must arrive within this after its headers; `408` and closed past it. Not applied to WebSocket sessions"},
		{key: "http_idle_timeout",
			help: "an idle keep-alive HTTP connection is closed after this",
			doc:  "a keep-alive HTTP connection idle this long is closed"},
		{key: "max_connections",
			help:       "connections open on listen, WebSocket included (0: max_clients)",
			doc:        "connections open on `listen`, whatever they carry (WebSocket, keep-alive, half-sent requests)",
			docDefault: "0 (= `max_clients`)"},
	}},
	{"Logging", []option{
		{key: "log_level", arg: "LEVEL",
			help: "debug, info, warn or error",
			doc:  "`debug`, `info`, `warn`, `error`"},
		{key: "log_format", arg: "FORMAT",
			help: "text or json",
			doc:  "`text` or `json`"},
	}},
	{"Access", []option{
		{key: "allowed_origins", arg: "LIST",
			help: "Origin host patterns browser pages may open a WebSocket from"},
		{key: "allowed_hosts", arg: "LIST",
			help: "Host header values accepted (\"*\" for any)",
			doc:  "accepted `Host` headers (`*` for any); a request with none (HTTP/1.0) passes, as on geth: a browser always sends one"},
		{key: "deny_methods", arg: "LIST",
			help: "refused method patterns (-32601): * any run, ? one character, case ignored",
			doc:  "refused methods: `*` any run of characters, `?` one, ASCII case ignored; read-only `debug_trace*` etc. pass"},
		{key: "retry_methods", arg: "LIST",
			help: "methods re-sent after an upstream reconnect (read-only ones)",
			doc:  "methods re-sent after a reconnect"},
	}},
	{"Limits", []option{
		{key: "max_clients",
			help: "concurrent client sessions (WebSocket, HTTP, IPC)",
			doc:  "concurrent sessions (WebSocket, IPC, HTTP exchanges)"},
		{key: "max_in_flight",
			help: "requests in flight per client (-32005 past it)",
			doc:  "requests outstanding per client"},
		{key: "max_held_bytes",
			help: "bytes of one client's requests held in flight or waiting (-32005 past it)",
			doc:  "bytes of one client's requests muxd holds (in flight or waiting for an upstream, and its subscriptions' params while they live); -32005 past it"},
		{key: "max_held_bytes_total",
			help: "bytes of all clients' requests held in flight or waiting (-32005 past it)",
			doc:  "the same for all clients together (a client holding nothing is not exempt); -32005 past it"},
		{key: "max_batch",
			help: "elements per client batch (at most max_in_flight)",
			doc:  "elements per batch"},
		{key: "upstream_max_batch",
			help: "most elements in one array sent to the node (geth's --rpc.batch-request-limit)",
			doc:  "most elements in one array to the node (keep it at or below geth's `--rpc.batch-request-limit`); longer batches go as consecutive arrays"},
		{key: "max_message_bytes",
			help: "largest client message, bytes",
			doc:  "largest client message (geth's own WebSocket limit); a larger one gets `-32005` under its id. Also the largest message muxd sends the node: keep it at or below the node's own limit"},
		{key: "max_subscriptions",
			help: "subscriptions per client"},
		{key: "max_waiting",
			help: "requests held while no upstream is connected, all clients together",
			doc:  "requests held (all clients) while no upstream is connected; -32002 past it"},
		{key: "max_upstream_in_flight",
			help: "client calls running at the node, all clients together; past it calls queue per client and are sent in fair order (0: no bound)",
			doc:  "client calls running at the node, all clients together, calls of departed clients included; a call holds its place until answered, 2 s at most (a call the node drops must not stop everyone's); past it each client's calls queue and are sent in fair order (round robin across clients, a batch costing its element count) as answers free slots, so that one client's flood delays another's call by at most one call. Subscriptions and muxd's own requests do not count, except the history of a subscription from a block (bulk traffic: it counts, and waits behind every queued call). A queued call's `request_timeout` runs. 64 suits a local node shared by a latency-sensitive bot and a flooding client (DESIGN §5 has the figures); a distant or slow node needs more (throughput is at most the bound over the latency). 0 turns the bound off. Needs a restart to change"},
		{key: "clients", arg: "\"NAME:KEY=VALUE,...\"",
			help:       `a named client's share and limits, "name:weight=2,max_in_flight=100,class=bulk,rate=50"; repeatable (MUXD_CLIENTS: entries separated by ';'); a client names itself by its URL path (ws://host:port/name) or X-Muxd-Client`,
			doc:        "named clients' shares and limits (below); flag and variable entries `name:weight=2,max_in_flight=100,class=bulk,rate=50`, the variable's separated by `;`",
			docDefault: "none"},
		{key: "outbound_queue_bytes",
			help: "bytes queued for a client (the first into an empty queue aside): a subscription push past it cuts the client as a slow consumer; answers to its own calls may pass it (see outbound_queue_bytes_total, slow_consumer_timeout)",
			doc:  "bytes queued for a client (the first message into an empty queue aside): a subscription push that would take the pushes queued past it cuts the client as a slow consumer; answers to the client's own calls may pass it, within the next two (a push behind them too)"},
		{key: "outbound_queue_bytes_total",
			help: "what all clients' queues hold past outbound_queue_bytes together; a client whose answer would take them past it is cut as a slow consumer",
			doc:  "what all clients' queues hold past `outbound_queue_bytes`, together; a client whose answer would take it past this is cut as a slow consumer"},
		{key: "slow_consumer_timeout",
			help: "a client whose queue is past outbound_queue_bytes and that takes no message for this long is cut as a slow consumer (geth allows a write 10 s)",
			doc:  "a client whose queue is past `outbound_queue_bytes` and that takes no message for this long (muxd then writes one message at a time, and none is written) is cut as a slow consumer; geth allows each message's write 10 s"},
		{key: "http_body_bytes",
			help: "largest HTTP request body, bytes (413 past it)",
			doc:  "largest HTTP body (413 past it; at once when `Content-Length` announces more, as geth does; the connection is then closed once the client has had the time to read the 413, so a client still sending gets it rather than a reset)"},
	}},
}

// lookupOption returns the table's row of key (the zero option when there
// is none).
func lookupOption(key string) option {
	for _, g := range optionGroups {
		for _, o := range g.options {
			if o.key == key {
				return o
			}
		}
	}
	return option{}
}

// defaultFields returns defaults()'s value of each option, by key.
func defaultFields() map[string]reflect.Value {
	v := reflect.ValueOf(defaults())
	fields := map[string]reflect.Value{}
	for i := 0; i < v.NumField(); i++ {
		fields[v.Type().Field(i).Tag.Get("toml")] = v.Field(i)
	}
	return fields
}

// Markers around the generated part of docs/configuration.md.
const (
	referenceBegin = "<!-- option reference: made from cmd/muxd/options.go by `go generate ./cmd/muxd`; edit the table there, not here -->"
	referenceEnd   = "<!-- end of option reference -->"
)

// optionReference is the reference's tables, one per group: each option,
// its environment variable, its default and its meaning.
func optionReference() string {
	fields := defaultFields()
	var b strings.Builder
	for i, g := range optionGroups {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "### %s\n\n| option | environment | default | meaning |\n|---|---|---|---|\n", g.title)
		for _, o := range g.options {
			def := o.docDefault
			if def == "" {
				def = docDefaultText(o.key, fields[o.key])
			}
			doc := o.doc
			if doc == "" {
				doc = o.help
			}
			fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s |\n", o.key, envName(o.key), def, doc)
		}
	}
	return b.String()
}

// docDefaultText is an option's default as the reference shows it.
func docDefaultText(key string, f reflect.Value) string {
	switch x := f.Interface().(type) {
	case Duration:
		return "`" + x.Duration.String() + "`"
	case int:
		return docBytes(key, int64(x))
	case int64:
		return docBytes(key, x)
	case string:
		if x == "" {
			return "none"
		}
		return "`" + x + "`"
	case []string:
		if len(x) == 0 {
			return "none"
		}
		return "`" + strings.Join(x, "`, `") + "`"
	case bool:
		return strconv.FormatBool(x)
	}
	return "none"
}

// docBytes adds the size in MiB or GiB to a byte count's default.
func docBytes(key string, n int64) string {
	s := strconv.FormatInt(n, 10)
	if !strings.HasSuffix(key, "_bytes") && !strings.HasSuffix(key, "_bytes_total") && key != "upstream_read_limit" {
		return s
	}
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		s += fmt.Sprintf(" (%d GiB)", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		s += fmt.Sprintf(" (%d MiB)", n>>20)
	}
	return s
}

// spliceReference returns doc with the text between the reference's
// markers replaced by ref; ok is false when doc lacks them.
func spliceReference(doc, ref string) (string, bool) {
	begin := strings.Index(doc, referenceBegin)
	end := strings.Index(doc, referenceEnd)
	if begin < 0 || end < begin {
		return doc, false
	}
	return doc[:begin+len(referenceBegin)] + "\n\n" + ref + "\n" + doc[end:], true
}
