#!/usr/bin/env bash
# Short fuzz runs: every fuzz target in the module, one at a time, for
# FUZZTIME each (default 20s), minimizing each new input for at most
# FUZZMINIMIZETIME (default 1s). Called by `make fuzz` and from .ci/run.
# Fuzz targets are found with `go test -list '^Fuzz' ./...`; with none, this
# says so and succeeds. A failing input is written by go test under the
# package's testdata/fuzz/<Name>/ -- commit it as a regression case.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

GO="${GO:-go}"
FUZZTIME="${FUZZTIME:-20s}"
# How long a worker may spend minimizing one input: the fuzzer minimizes
# every new interesting input too, not only failing ones, and at Go's
# default (60s) one large input, such as the 20 KB nesting seeds, took the
# rest of a 20 s run: FuzzIDFinder ran 38k inputs and then 0 per second
# for its last 12 s; with 1s it ran 310k. A failing input is written
# whether or not its minimization finished.
FUZZMINIMIZETIME="${FUZZMINIMIZETIME:-1s}"

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

# run_target fuzzes one target. Go 1.26's fuzz coordinator can fail a run
# with a bare "context deadline exceeded" exactly when -fuzztime expires, on
# a busy machine, having found nothing (go.dev/issue/75804, fixed in Go
# 1.27). Such a run, and only such a run, is tried again, up to FUZZTRIES
# runs in all: a real finding prints "Failing input written to" (or a
# panic, or a test error) and fails at once. With new inputs minimized for
# at most 1s the workers are busy when the deadline comes, and the race hit
# about one target run in eleven (3 of 34 in CI runs on 2026-12-04): five
# runs make a CI failure from it about 5 in 10^6 per target.
FUZZTRIES="${FUZZTRIES:-5}"
run_target() {
	local pkg="$1" name="$2" try out rc
	for ((try = 1; try <= FUZZTRIES; try++)); do
		out="$(mktemp)"
		rc=0
		"$GO" test -run='^$' -fuzz="^${name}\$" -fuzztime="$FUZZTIME" -fuzzminimizetime="$FUZZMINIMIZETIME" "$pkg" 2>&1 | tee "$out" || rc=$?
		if ((rc == 0)); then
			rm -f "$out"
			return 0
		fi
		if grep -q 'context deadline exceeded' "$out" &&
			! grep -qE 'Failing input written|panic:|_test\.go:[0-9]+:' "$out"; then
			rm -f "$out"
			if ((try < FUZZTRIES)); then
				echo "fuzz: $name: the fuzz coordinator's deadline race (go.dev/issue/75804), nothing found; try $((try + 1)) of $FUZZTRIES" >&2
			else
				echo "fuzz: $name: the fuzz coordinator's deadline race in all $FUZZTRIES runs" >&2
			fi
			continue
		fi
		rm -f "$out"
		return 1
	done
	return 1
}

echo "fuzz: ${#targets[@]} target(s), $FUZZTIME each (plus build time per package)"
failed=()
for t in "${targets[@]}"; do
	pkg="${t% *}"
	name="${t#* }"
	echo "fuzz: === $pkg $name"
	if ! run_target "$pkg" "$name"; then
		failed+=("$pkg $name")
	fi
done

if ((${#failed[@]} > 0)); then
	echo "fuzz: FAILED: ${failed[*]}" >&2
	exit 1
fi
echo "fuzz: all ${#targets[@]} target(s) passed"
