#!/usr/bin/env bash
# Checks what `make test` (with "race") or `make dev` needs before they start,
# and says what is missing and how to get it: Go at the version go.mod asks
# for, and for the race detector cgo with a C compiler.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GO="${GO:-go}"
missing=0
say() { echo "prereqs: $*" >&2; }

want="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$repo/go.mod")"
if ! command -v "$GO" >/dev/null; then
	say "Go is not installed (or not on PATH): install Go $want or newer from https://go.dev/dl/"
	exit 1
fi
have="$("$GO" env GOVERSION)" # "go1.26.8", or "devel …"
have="${have#go}"
older() { # older A B: version A < version B
	[[ "$1" != "$2" && "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" == "$1" ]]
}
if [[ "$have" =~ ^[0-9] ]] && older "${have%%[-+ ]*}" "$want"; then
	# The go command fetches a newer toolchain itself unless GOTOOLCHAIN=local.
	if [[ "$("$GO" env GOTOOLCHAIN)" == local ]]; then
		say "Go $have is older than the $want go.mod needs, and GOTOOLCHAIN=local stops the go command from fetching it: install Go $want or newer from https://go.dev/dl/"
		missing=1
	else
		say "Go $have is older than the $want go.mod needs; the go command will download Go $want (GOTOOLCHAIN=auto)"
	fi
fi

if [[ "${1:-}" == race ]]; then
	# Without a C compiler the go command turns cgo off by itself, so the
	# compiler is checked first.
	cc="$("$GO" env CC)"
	if ! command -v "${cc%% *}" >/dev/null; then
		say "the race detector (go test -race) needs cgo and a C compiler, and '$cc' is not installed: install gcc (Debian/Ubuntu: apt-get install gcc; Fedora: dnf install gcc; macOS: xcode-select --install) or set CC"
		missing=1
	elif [[ "$("$GO" env CGO_ENABLED)" != 1 ]]; then
		say "the race detector (go test -race) needs cgo, and CGO_ENABLED is $("$GO" env CGO_ENABLED): unset CGO_ENABLED (or set it to 1)"
		missing=1
	fi
fi
exit "$missing"
