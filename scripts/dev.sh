#!/usr/bin/env bash
# `make dev`: a local geth --dev node (a block every second) with muxd in
# front of it, for trying muxd by hand. It says where clients connect once
# muxd is actually serving. Ctrl-C (or SIGTERM) stops muxd and geth, removes
# geth's temporary datadir and exits 0. Extra arguments go to muxd
# (make dev ARGS="--log-level debug").
#
#   DEV_GETH_WS_PORT  geth's WebSocket port                (default 8546)
#   DEV_MUXD_LISTEN   muxd's WebSocket and HTTP address    (default 127.0.0.1:8547)
#   MUXD_GETH         geth binary to use (default: .bin/geth, installed by scripts/install-geth.sh)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
GO="${GO:-go}"

ws_port="${DEV_GETH_WS_PORT:-8546}"
listen="${DEV_MUXD_LISTEN:-127.0.0.1:8547}"
upstream="ws://127.0.0.1:$ws_port"
listen_host="${listen%:*}"
listen_port="${listen##*:}"
case "$listen_host" in
"" | 0.0.0.0 | "[::]") probe_host=127.0.0.1 ;;
*) probe_host="${listen_host#[}" probe_host="${probe_host%]}" ;;
esac

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

if port_open 127.0.0.1 "$ws_port"; then
	echo "dev: something already listens on 127.0.0.1:$ws_port (geth's port): stop it, or set DEV_GETH_WS_PORT" >&2
	exit 1
fi
if port_open "$probe_host" "$listen_port"; then
	echo "dev: something already listens on $listen (muxd's address): stop it, or set DEV_MUXD_LISTEN" >&2
	exit 1
fi

geth="${MUXD_GETH:-}"
if [[ -z "$geth" ]]; then
	geth="$(bash scripts/install-geth.sh)"
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/muxd-dev.XXXXXX")"
geth_log="$work/geth.log"
geth_pid=""
muxd_pid=""

# stop PID SIGNAL: signal a child and wait for it, up to 10 s, then kill it.
stop() {
	local pid="$1" sig="$2"
	[[ -n "$pid" ]] || return 0
	kill -"$sig" "$pid" 2>/dev/null || true
	for _ in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}
cleanup() {
	trap '' INT TERM
	if [[ -n "$muxd_pid" ]] && kill -0 "$muxd_pid" 2>/dev/null; then
		echo "dev: stopping muxd (pid $muxd_pid)" >&2
	fi
	stop "$muxd_pid" TERM
	if [[ -n "$geth_pid" ]] && kill -0 "$geth_pid" 2>/dev/null; then
		echo "dev: stopping geth (pid $geth_pid)" >&2
	fi
	stop "$geth_pid" INT
	rm -rf "$work"
}
trap cleanup EXIT
# Ctrl-C and SIGTERM are how `make dev` is meant to end: exit 0.
trap 'exit 0' INT TERM

echo "dev: building muxd" >&2
"$GO" build -o "$work/muxd" ./cmd/muxd

# geth also reads GETH_<FLAG> variables; drop them so the flags below are all.
env $(env | sed -n 's/^\(GETH_[A-Za-z0-9_]*\)=.*/-u \1/p') \
	"$geth" --dev --dev.period 1 --datadir "$work/datadir" \
	--ipcdisable --nodiscover --maxpeers 0 --port 0 \
	--ws --ws.addr 127.0.0.1 --ws.port "$ws_port" --ws.api eth,net,web3,txpool \
	--verbosity 3 >"$geth_log" 2>&1 &
geth_pid=$!

for _ in $(seq 600); do # up to 60 s
	if ! kill -0 "$geth_pid" 2>/dev/null; then
		echo "dev: geth exited; its log:" >&2
		tail -n 30 "$geth_log" >&2
		exit 1
	fi
	port_open 127.0.0.1 "$ws_port" && break
	sleep 0.1
done
if ! port_open 127.0.0.1 "$ws_port"; then
	echo "dev: geth did not open $upstream within 60 s; its log:" >&2
	tail -n 30 "$geth_log" >&2
	exit 1
fi
echo "dev: geth --dev (pid $geth_pid) is up at $upstream, log: $geth_log" >&2

"$work/muxd" --upstream "$upstream" --listen "$listen" "$@" &
muxd_pid=$!
for _ in $(seq 300); do # up to 30 s
	if ! kill -0 "$muxd_pid" 2>/dev/null; then
		wait "$muxd_pid" && code=0 || code=$?
		muxd_pid=""
		echo "dev: muxd exited (status $code) before serving; see its messages above" >&2
		exit 1
	fi
	port_open "$probe_host" "$listen_port" && break
	sleep 0.1
done
if ! port_open "$probe_host" "$listen_port"; then
	echo "dev: muxd did not open $listen within 30 s" >&2
	exit 1
fi

cat >&2 <<EOF
dev: muxd (pid $muxd_pid) is serving; clients connect to
       WebSocket  ws://$listen
       HTTP       http://$listen  (POST, Content-Type: application/json)
     try: curl -s -H 'Content-Type: application/json' -d '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}' http://$listen
     Ctrl-C stops muxd and geth.
EOF

# wait returns when muxd exits or a trapped signal (Ctrl-C) arrives. Ctrl-C
# reaches muxd too (the terminal signals the whole process group), and muxd
# exits 0 once it has shut down gracefully: that is a normal end as well.
if wait "$muxd_pid"; then code=0; else code=$?; fi
muxd_pid=""
if ((code == 0)); then
	exit 0
fi
echo "dev: muxd exited with status $code" >&2
exit 1
