#!/usr/bin/env bash
# `make dev`: a local geth --dev node (a block every second) with muxd in
# front of it, for trying muxd by hand. Clients connect to muxd at
# ws://127.0.0.1:8547. geth runs in a temporary datadir that is removed, with
# geth, when this script exits (Ctrl-C). Extra arguments go to muxd.
#
#   DEV_GETH_WS_PORT  geth's WebSocket port     (default 8546)
#   DEV_MUXD_LISTEN   muxd's listen address     (default 127.0.0.1:8547)
#   MUXD_GETH         geth binary to use        (default: scripts/install-geth.sh)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

ws_port="${DEV_GETH_WS_PORT:-8546}"
listen="${DEV_MUXD_LISTEN:-127.0.0.1:8547}"
upstream="ws://127.0.0.1:$ws_port"

geth="${MUXD_GETH:-}"
if [[ -z "$geth" ]]; then
	geth="$(bash scripts/install-geth.sh)"
fi

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if port_open "$ws_port"; then
	echo "dev: something is already listening on 127.0.0.1:$ws_port; stop it or set DEV_GETH_WS_PORT" >&2
	exit 1
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/muxd-dev.XXXXXX")"
log="$work/geth.log"
geth_pid=""

cleanup() {
	if [[ -n "$geth_pid" ]] && kill -0 "$geth_pid" 2>/dev/null; then
		echo "dev: stopping geth (pid $geth_pid)" >&2
		kill -INT "$geth_pid" 2>/dev/null || true
		for _ in $(seq 100); do # up to 10 s, then kill
			kill -0 "$geth_pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$geth_pid" 2>/dev/null || true
		wait "$geth_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# geth also reads GETH_<FLAG> variables; drop them so the flags below are all.
env $(env | sed -n 's/^\(GETH_[A-Za-z0-9_]*\)=.*/-u \1/p') \
	"$geth" --dev --dev.period 1 --datadir "$work/datadir" \
	--ipcdisable --nodiscover --maxpeers 0 --port 0 \
	--ws --ws.addr 127.0.0.1 --ws.port "$ws_port" --ws.api eth,net,web3,txpool \
	--verbosity 3 >"$log" 2>&1 &
geth_pid=$!

for _ in $(seq 600); do # up to 60 s
	if ! kill -0 "$geth_pid" 2>/dev/null; then
		echo "dev: geth exited; its log:" >&2
		tail -n 30 "$log" >&2
		exit 1
	fi
	port_open "$ws_port" && break
	sleep 0.1
done
if ! port_open "$ws_port"; then
	echo "dev: geth did not open $upstream within 60 s; its log:" >&2
	tail -n 30 "$log" >&2
	exit 1
fi

echo "dev: geth --dev (pid $geth_pid) is up at $upstream, log: $log"
echo "dev: starting muxd; clients connect to ws://$listen"
go run ./cmd/muxd --upstream "$upstream" --listen "$listen" "$@"
