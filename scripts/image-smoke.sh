#!/usr/bin/env bash
# CI smoke test of the container image (Dockerfile, scripts/image.sh), with
# buildah, offline:
#   1. installs Debian's buildah when it is missing (apt-get, as root) and
#      logs the version in use;
#   2. builds the image (scripts/image.sh, IMAGE_TOOL=buildah);
#   3. checks its config (user 65532, entrypoint, port 8547) and that it
#      holds the CA bundle;
#   4. runs `muxd version` in it (the release stamp) and `muxd check`
#      (MUXD_LISTEN from the image);
#   5. a short serve: muxd in the container in front of geth --dev on the
#      host, one eth_blockNumber through it, SIGTERM, exit 0.
# Containers run with `buildah run --isolation chroot`: no namespaces of
# their own, so they share the host's network (both listen on 127.0.0.1,
# port 0, and say where in their logs). The container and image are
# removed at the end.
#
#   MUXD_GETH  the geth binary (default: scripts/install-geth.sh, .bin/geth)
#
# Each phase's time is printed; the whole takes about a minute once the
# binary is built (the build itself a few minutes cold: scripts/release.sh).
set -euo pipefail
exec </dev/null

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
GO="${GO:-go}"

say() { printf 'image-smoke: %s (+%ds)\n' "$*" "$SECONDS" >&2; }
fail() {
	printf 'image-smoke: FAIL: %s\n' "$*" >&2
	exit 1
}

# ---- 1. buildah ------------------------------------------------------------
if ! command -v buildah >/dev/null; then
	if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
		fail "buildah is not installed, and this is not root on Debian/Ubuntu: install buildah"
	fi
	say "installing Debian's buildah"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -q buildah >/dev/null; then
		apt-get update -q >/dev/null
		apt-get install -y -q buildah >/dev/null
	fi
fi
# The version in use, for the log (Debian's package version when it is one).
pkg="$(dpkg-query -W -f='${Version}' buildah 2>/dev/null || true)"
say "buildah $(buildah version --json 2>/dev/null | sed -n 's/.*"version": *"\([^"]*\)".*/\1/p' | sed -n 1p)${pkg:+, Debian package $pkg}$( [[ -r /etc/debian_version ]] && printf ', Debian %s' "$(cat /etc/debian_version)")"
buildah info >/dev/null || fail "buildah info failed: buildah cannot run here"

geth="${MUXD_GETH:-}"
if [[ -z "$geth" ]]; then
	geth="$(bash scripts/install-geth.sh)"
fi
[[ -x "$geth" ]] || fail "MUXD_GETH=$geth is not an executable"

work="$(mktemp -d "${TMPDIR:-/tmp}/muxd-image-smoke.XXXXXX")"
image="muxd-smoke-$$"
ctr=""
geth_pid="" run_pid="" muxd_pid=""

# stop PID SIGNAL: signal a child and wait for it, up to 20 s, then kill it.
stop() {
	local pid="$1" sig="$2"
	[[ -n "$pid" ]] || return 0
	kill -"$sig" "$pid" 2>/dev/null || true
	for _ in $(seq 200); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}
cleanup() {
	# muxd first: buildah run killed outright would leave it running.
	if [[ -n "$muxd_pid" ]] && kill -0 "$muxd_pid" 2>/dev/null; then
		kill -KILL "$muxd_pid" 2>/dev/null || true
	fi
	stop "$run_pid" TERM
	stop "$geth_pid" INT
	if [[ -n "$ctr" ]]; then
		buildah rm "$ctr" >/dev/null 2>&1 || true
	fi
	buildah rmi "$image:latest" "${ref:-$image:latest}" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

# ---- 2. build ----------------------------------------------------------------
say "building the image"
ref="$(GO="$GO" IMAGE="$image" IMAGE_TOOL=buildah bash scripts/image.sh)"
say "built $ref"

# ---- 3. config and content ---------------------------------------------------
cfg="$(buildah inspect --type image --format '{{.OCIv1.Config.User}}|{{.OCIv1.Config.Entrypoint}}|{{.OCIv1.Config.ExposedPorts}}' "$ref")"
[[ "$cfg" == "65532:65532|[/usr/local/bin/muxd]|map[8547/tcp:{}]" ]] ||
	fail "image config is '$cfg', want user 65532:65532, entrypoint [/usr/local/bin/muxd], port 8547/tcp"
ctr="$(buildah from --pull=never --name "$image" "$ref")"
mnt="$(buildah mount "$ctr")"
[[ -s "$mnt/etc/ssl/certs/ca-certificates.crt" ]] || fail "the image has no /etc/ssl/certs/ca-certificates.crt"
files="$(cd "$mnt" && find . -type f | sort | tr '\n' ' ')"
buildah umount "$ctr" >/dev/null
say "config ok ($cfg); files: $files"

# ---- 4. muxd version, muxd check ---------------------------------------------
crun() { buildah run --isolation chroot "$ctr" -- /usr/local/bin/muxd "$@"; }
version_out="$(crun version)"
printf '%s\n' "$version_out" | sed 's/^/  /' >&2
# The version scripts/release.sh stamped, as image.sh labelled the image.
want="muxd $(buildah inspect --type image --format '{{index .OCIv1.Config.Labels "org.opencontainers.image.version"}}' "$ref")"
[[ "$(head -n1 <<<"$version_out")" == "$want" ]] || fail "muxd version says '$(head -n1 <<<"$version_out")', want '$want'"
grep -q '^  commit: *[0-9a-f]\{40\}' <<<"$version_out" || fail "muxd version names no commit"
check_out="$(crun check --upstream ws://127.0.0.1:1)"
grep -Eq '^listen +env +0\.0\.0\.0:8547$' <<<"$check_out" || fail "muxd check in the image does not show listen from MUXD_LISTEN:
$check_out"
say "muxd version and check ok"

# ---- 5. serve: geth on the host, muxd in the container -----------------------
# geth also reads GETH_<FLAG> variables; drop them so the flags below are all.
# The log exists before geth starts: the loop below may read it before the
# background job has opened it.
: >"$work/geth.log"
env $(env | sed -n 's/^\(GETH_[A-Za-z0-9_]*\)=.*/-u \1/p') \
	"$geth" --dev --dev.period 1 --datadir "$work/datadir" \
	--ipcdisable --nodiscover --maxpeers 0 --port 0 \
	--ws --ws.addr 127.0.0.1 --ws.port 0 --verbosity 3 >"$work/geth.log" 2>&1 &
geth_pid=$!
upstream=""
for _ in $(seq 600); do # up to 60 s
	kill -0 "$geth_pid" 2>/dev/null || { tail -n 20 "$work/geth.log" >&2; fail "geth exited"; }
	upstream="$(sed -n 's/.*WebSocket enabled *url=\(ws:[^ ]*\).*/\1/p' "$work/geth.log" | sed -n 1p)"
	[[ -n "$upstream" ]] && break
	sleep 0.1
done
[[ -n "$upstream" ]] || { tail -n 20 "$work/geth.log" >&2; fail "geth did not open its WebSocket within 60 s"; }
say "geth --dev at $upstream"

# --listen (a flag) over the image's MUXD_LISTEN: loopback, a free port.
: >"$work/muxd.log"
crun --upstream "$upstream" --listen 127.0.0.1:0 >"$work/muxd.log" 2>&1 &
run_pid=$!
addr=""
for _ in $(seq 300); do # up to 30 s
	kill -0 "$run_pid" 2>/dev/null || { cat "$work/muxd.log" >&2; fail "muxd in the container exited"; }
	addr="$(sed -n 's/.*transport=ws+http addr=\([^ ]*\).*/\1/p' "$work/muxd.log" | sed -n 1p)"
	[[ -n "$addr" ]] && break
	sleep 0.1
done
[[ -n "$addr" ]] || { cat "$work/muxd.log" >&2; fail "muxd did not listen within 30 s"; }

# muxd's own process: the descendant of buildah run that is /usr/local/bin/muxd
# (buildah run answers SIGTERM by killing it, so it is signalled directly).
descendants() {
	local p
	for p in $(ps -o pid= --ppid "$1"); do
		echo "$p"
		descendants "$p"
	done
}
for p in $(descendants "$run_pid"); do
	if [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == muxd ]]; then muxd_pid="$p"; fi
done
[[ -n "$muxd_pid" ]] || fail "no muxd process under buildah run ($run_pid)"
uid="$(awk '/^Uid:/ {print $2}' "/proc/$muxd_pid/status")"
[[ "$uid" == 65532 ]] || fail "muxd runs as uid $uid, want 65532"
say "muxd in the container (pid $muxd_pid, uid $uid) at $addr"

# One request, once geth has mined past block 0 (a block a second).
answer=""
for _ in $(seq 100); do # up to 10 s
	answer="$(curl -sS --max-time 10 -H 'Content-Type: application/json' \
		-d '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}' "http://$addr/")" ||
		fail "eth_blockNumber through muxd: curl failed"
	[[ "$answer" =~ ^\{\"jsonrpc\":\"2\.0\",\"id\":1,\"result\":\"0x[0-9a-f]+\"\}$ ]] ||
		fail "eth_blockNumber through muxd answered: $answer"
	[[ "$answer" != *'"0x0"'* ]] && break
	sleep 0.1
done
say "eth_blockNumber through muxd: $answer"

kill -TERM "$muxd_pid"
code=0
for _ in $(seq 200); do # up to 20 s
	kill -0 "$run_pid" 2>/dev/null || break
	sleep 0.1
done
kill -0 "$run_pid" 2>/dev/null && fail "muxd did not exit within 20 s of SIGTERM"
wait "$run_pid" || code=$?
run_pid=""
grep -q 'msg="shutdown complete"' "$work/muxd.log" || { cat "$work/muxd.log" >&2; fail "muxd did not shut down cleanly"; }
((code == 0)) || { cat "$work/muxd.log" >&2; fail "buildah run exited $code"; }
say "muxd stopped on SIGTERM, exit 0"
say "ok"
