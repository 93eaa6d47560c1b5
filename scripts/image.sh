#!/usr/bin/env bash
# `make image`: muxd's container image (Dockerfile) for this machine's
# architecture, built offline with whichever of docker, podman or buildah
# works here (docker only with a running engine: `docker info`).
#
#   IMAGE       image name (default muxd); tagged NAME:VERSION and NAME:latest
#   IMAGE_TOOL  docker, podman or buildah, to choose rather than detect
#   CA_BUNDLE   CA certificates copied into the image
#               (default /etc/ssl/certs/ca-certificates.crt, Debian's)
#
# First builds the static binary (scripts/release.sh -o build/image/bin
# linux/ARCH, stamped as a release), then gathers the build context in
# build/image/ (gitignored): Dockerfile, muxd, ca-certificates.crt. Prints
# the image reference, NAME:VERSION, on stdout; the rest goes to stderr.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
GO="${GO:-go}"
image="${IMAGE:-muxd}"
ca="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"

# works TOOL: the tool is installed and can build (docker: its engine runs).
works() {
	command -v "$1" >/dev/null || return 1
	case "$1" in
	docker | podman) timeout 30 "$1" info >/dev/null 2>&1 ;;
	buildah) timeout 30 buildah info >/dev/null 2>&1 ;;
	*) return 1 ;;
	esac
}
tool="${IMAGE_TOOL:-}"
if [[ -n "$tool" ]]; then
	works "$tool" || { echo "image: IMAGE_TOOL=$tool does not work here ($tool info failed)" >&2; exit 1; }
else
	for t in docker podman buildah; do
		if works "$t"; then tool="$t" && break; fi
	done
	if [[ -z "$tool" ]]; then
		echo "image: no working docker, podman or buildah (docker needs a running engine);" \
			"on Debian or Ubuntu: apt-get install buildah" >&2
		exit 1
	fi
fi
if [[ ! -s "$ca" ]]; then
	echo "image: no CA bundle at $ca (Debian/Ubuntu: apt-get install ca-certificates; or set CA_BUNDLE)" >&2
	exit 1
fi

arch="$("$GO" env GOARCH)"
ctx="build/image"
rm -rf "$ctx"
mkdir -p "$ctx"
version="$(GO="$GO" bash scripts/release.sh -o "$ctx/bin" "linux/$arch")"
cp "$ctx/bin/muxd-linux-$arch" "$ctx/muxd"
rm -rf "$ctx/bin"
cp "$ca" "$ctx/ca-certificates.crt"
cp Dockerfile "$ctx/Dockerfile"

# A tag is letters, digits, _ . -: anything else in the version becomes -.
tag="$(printf '%s' "$version" | tr -c 'A-Za-z0-9_.-' '-')"
ref="$image:$tag"
revision="$(git rev-parse HEAD)"
args=(-f "$ctx/Dockerfile" --build-arg "VERSION=$version" --build-arg "REVISION=$revision" -t "$ref" -t "$image:latest")
echo "image: building $ref with $tool ($("$tool" --version 2>/dev/null | sed -n 1p))" >&2
t0=$SECONDS
case "$tool" in
docker) docker build "${args[@]}" "$ctx" >&2 ;;
podman) podman build --pull=never "${args[@]}" "$ctx" >&2 ;;
buildah) buildah build --pull=never "${args[@]}" "$ctx" >&2 ;;
esac
echo "image: built $ref in $((SECONDS - t0))s" >&2
echo "$ref"
