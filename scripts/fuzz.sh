#!/usr/bin/env bash
# Short fuzz runs: every fuzz target in the module, one at a time, for
# FUZZTIME each (default 20s). Called by `make fuzz` and from .ci/run.
# Fuzz targets are found with `go test -list '^Fuzz' ./...`; with none, this
# says so and succeeds. A failing input is written by go test under the
# package's testdata/fuzz/<Name>/ -- commit it as a regression case.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

GO="${GO:-go}"
FUZZTIME="${FUZZTIME:-20s}"

# `go test -list` prints each package's matching names, then "ok  <pkg> <time>"
# ("?  <pkg> [no test files]" for packages without tests). It fails if a
# package does not build, which fails this script too.
list="$("$GO" test -list '^Fuzz' ./...)"

targets=() # "<pkg> <FuzzName>"
pending=()
while IFS= read -r line; do
	case "$line" in
	Fuzz*) pending+=("$line") ;;
	ok[[:space:]]*)
		pkg="$(awk '{print $2}' <<<"$line")"
		for name in "${pending[@]}"; do
			targets+=("$pkg $name")
		done
		pending=()
		;;
	*) pending=() ;;
	esac
done <<<"$list"

if ((${#targets[@]} == 0)); then
	echo "fuzz: no fuzz targets (func FuzzXxx(*testing.F)) in ./... yet; nothing to do"
	exit 0
fi

echo "fuzz: ${#targets[@]} target(s), $FUZZTIME each (plus build time per package)"
failed=()
for t in "${targets[@]}"; do
	pkg="${t% *}"
	name="${t#* }"
	echo "fuzz: === $pkg $name"
	if ! "$GO" test -run='^$' -fuzz="^${name}\$" -fuzztime="$FUZZTIME" "$pkg"; then
		failed+=("$pkg $name")
	fi
done

if ((${#failed[@]} > 0)); then
	echo "fuzz: FAILED: ${failed[*]}" >&2
	exit 1
fi
echo "fuzz: all ${#targets[@]} target(s) passed"
