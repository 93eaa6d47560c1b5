#!/usr/bin/env bash
# `make release`: static muxd binaries for every release platform, each
# stamped with its version, commit and build date, and a SHA256SUMS file.
#
#   scripts/release.sh [-o DIR] [GOOS/GOARCH ...]
#
#   -o DIR       where to write (default dist/, gitignored); muxd-* and
#                SHA256SUMS already there are removed first, nothing else
#   GOOS/GOARCH  platforms (default linux/amd64 linux/arm64 darwin/amd64
#                darwin/arm64); make image builds linux/<its arch> only
#
# Writes DIR/muxd-GOOS-GOARCH and DIR/SHA256SUMS (sha256sum -c reads it), and
# prints the version on stdout. CGO_ENABLED=0 makes the binaries static (no
# libc: they run on any Linux distribution and in a FROM scratch image);
# -trimpath keeps this machine's paths out of them. The stamp
# (-ldflags -X, read by cmd/muxd/version.go):
#   main.version      git describe --tags --always --dirty, or $RELEASE_VERSION
#   main.buildCommit  git rev-parse HEAD, "-dirty" with uncommitted changes
#   main.buildDate    now (UTC), or $SOURCE_DATE_EPOCH when set (reproducible
#                     builds: two runs on one commit then give equal sums)
# The go command's own VCS stamp is turned off (-buildvcs=false): it is
# missing in a linked git worktree anyway, and the explicit stamp is the
# same wherever the build runs.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
GO="${GO:-go}"

out=dist
if [[ "${1:-}" == -o ]]; then
	[[ $# -ge 2 ]] || { echo "release: -o needs a directory" >&2; exit 2; }
	out="$2"
	shift 2
fi
platforms=("$@")
if ((${#platforms[@]} == 0)); then
	platforms=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64)
fi

if ! git rev-parse --git-dir >/dev/null 2>&1; then
	echo "release: not a git checkout: the version comes from git describe (or set RELEASE_VERSION)" >&2
	exit 1
fi
# describe --dirty refreshes the index itself; diff-index needs it fresh.
git update-index -q --refresh >/dev/null 2>&1 || true
version="${RELEASE_VERSION:-$(git describe --tags --always --dirty)}"
commit="$(git rev-parse HEAD)"
if ! git diff-index --quiet HEAD --; then
	commit+="-dirty"
fi
if [[ -n "${SOURCE_DATE_EPOCH:-}" ]]; then
	date="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ 2>/dev/null || date -u -r "$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
else
	date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
fi
ldflags="-s -w -X main.version=$version -X main.buildCommit=$commit -X main.buildDate=$date"

mkdir -p "$out"
rm -f "$out"/muxd-* "$out/SHA256SUMS"
host="$("$GO" env GOHOSTOS)/$("$GO" env GOHOSTARCH)"
for p in "${platforms[@]}"; do
	os="${p%/*}" arch="${p#*/}"
	bin="$out/muxd-$os-$arch"
	t0=$SECONDS
	CGO_ENABLED=0 GOOS="$os" GOARCH="$arch" \
		"$GO" build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$bin" ./cmd/muxd
	# Static: the go command records how it built the binary.
	if ! "$GO" version -m "$bin" | grep -q 'CGO_ENABLED=0'; then
		echo "release: $bin was not built with CGO_ENABLED=0" >&2
		exit 1
	fi
	# The one this machine can run must report the stamp.
	if [[ "$p" == "$host" ]]; then
		got="$("$bin" version | sed -n 1p)"
		if [[ "$got" != "muxd $version" ]]; then
			echo "release: $bin version says '$got', want 'muxd $version'" >&2
			exit 1
		fi
	fi
	echo "release: $bin ($(wc -c <"$bin" | tr -d ' ') bytes, $((SECONDS - t0))s)" >&2
done

# Checksums, by file name as sha256sum -c expects (shasum where sha256sum is
# missing, as on macOS).
(
	cd "$out"
	if command -v sha256sum >/dev/null; then
		sha256sum muxd-*
	else
		shasum -a 256 muxd-*
	fi >SHA256SUMS
)
echo "release: $out/SHA256SUMS; version $version, commit $commit, built $date" >&2
echo "$version"
