#!/usr/bin/env bash
# Installs the pinned geth into <repo>/.bin/geth (through the Go module proxy)
# unless it is already there at the pinned version. Prints the binary's path on
# stdout; progress goes to stderr, so `GETH=$(scripts/install-geth.sh)` works.
#
# Keep GETH_VERSION in step with PinnedVersion in integration/gethnode and with
# the go-ethereum requirement in go.mod.
set -euo pipefail

GETH_VERSION="v1.17.10"

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$repo/.bin"
geth="$bin/geth"

installed_version() {
	# `geth version` prints "Version: 1.17.10-stable".
	"$geth" version 2>/dev/null | sed -n 's/^Version: *//p' | head -n1
}

want="${GETH_VERSION#v}"
have=""
if [[ -x "$geth" ]]; then
	have="$(installed_version || true)"
fi
if [[ "$have" == "$want" || "$have" == "$want"-* ]]; then
	echo "install-geth: $geth is already geth $have" >&2
else
	if [[ -n "$have" ]]; then
		echo "install-geth: $geth is geth $have, want $want; reinstalling" >&2
	fi
	echo "install-geth: installing geth $GETH_VERSION into $bin (cold builds take a few minutes)" >&2
	mkdir -p "$bin"
	start=$SECONDS
	# Run outside the repo so its go.mod and any GOFLAGS=-mod=... do not apply.
	(cd / && GOBIN="$bin" GOFLAGS= go install "github.com/ethereum/go-ethereum/cmd/geth@$GETH_VERSION")
	have="$(installed_version || true)"
	if [[ "$have" != "$want" && "$have" != "$want"-* ]]; then
		echo "install-geth: installed $geth but it reports version '$have', want $want" >&2
		exit 1
	fi
	echo "install-geth: installed geth $have in $((SECONDS - start))s" >&2
fi
echo "$geth"
