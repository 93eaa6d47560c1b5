#!/usr/bin/env bash
# `systemd-analyze verify` of configs/*.service and *.socket, with ExecStart
# pointed at a muxd built here (verify insists that the binary exists). The
# template muxd@.service is among them: verify checks it as an instance
# (muxd@i.service), %i expanded.
# Called by .ci/run; says so and succeeds when systemd-analyze is not
# installed (cmd/muxd's TestSystemdUnits checks the units' properties
# everywhere).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

if ! command -v systemd-analyze >/dev/null; then
	echo "verify-units: systemd-analyze is not installed; skipped (TestSystemdUnits still ran)"
	exit 0
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/muxd-units.XXXXXX")"
trap 'rm -rf "$work"' EXIT
go build -o "$work/muxd" ./cmd/muxd
for f in configs/*.service configs/*.socket; do
	sed "s|/usr/local/bin/muxd|$work/muxd|" "$f" >"$work/$(basename "$f")"
done
cd "$work"
# verify prints nothing and exits 0 for clean units.
out="$(systemd-analyze verify --man=no ./*.service ./*.socket 2>&1)" || {
	echo "$out" >&2
	echo "verify-units: systemd-analyze verify failed" >&2
	exit 1
}
if [[ -n "$out" ]]; then
	echo "$out" >&2
	echo "verify-units: systemd-analyze verify printed warnings" >&2
	exit 1
fi
echo "verify-units: systemd-analyze verify is clean for $(ls ./*.service ./*.socket | tr '\n' ' ')"
