#!/usr/bin/env bash
# Installs the npm packages of the client-library tests (integration/clients:
# ethers 5, web3.js 4) and of the reorg tests (integration/anvil: anvil) into
# each folder's node_modules with `npm ci`,
# exactly as package-lock.json pins them (versions and integrity hashes),
# unless that lockfile is already what is installed. Needs Node.js 20+ and
# npm on $PATH and the npm registry the first time. Progress goes to stderr;
# exits non-zero on any failure.
#
# Called by .ci/run and by `make test`. To change a version: edit
# integration/clients/package.json, run `npm install` there, commit both
# package.json and package-lock.json.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

for tool in node npm; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "install-node-deps: $tool not found on \$PATH (Node.js 20 or newer: https://nodejs.org/)" >&2
		exit 1
	fi
done
major="$(node -p 'process.versions.node.split(".")[0]')"
if ((major < 20)); then
	echo "install-node-deps: node $(node --version) is too old; Node.js 20 or newer is needed" >&2
	exit 1
fi

# install DIR: npm ci in DIR unless its node_modules already matches its
# lockfile.
install() {
	local dir="$1"
	# Written after a successful install: the lockfile's checksum, so an
	# unchanged lockfile is not installed again on every `make test`.
	local stamp="$dir/node_modules/.muxd-installed-lock" want start
	want="$(cd "$dir" && sha256sum package-lock.json package.json)"
	if [[ -f "$stamp" && "$(<"$stamp")" == "$want" ]]; then
		echo "install-node-deps: $dir/node_modules already matches package-lock.json" >&2
		return 0
	fi
	echo "install-node-deps: npm ci in $dir (node $(node --version), npm $(npm --version))" >&2
	start=$SECONDS
	# npm ci installs exactly the lockfile (and fails if package.json and
	# the lockfile disagree). No install scripts run: these packages need
	# none (anvil's binary comes as a platform package).
	(cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts >&2)
	printf '%s' "$want" >"$stamp"
	echo "install-node-deps: $dir installed in $((SECONDS - start))s" >&2
}

# integration/clients: ethers 5, web3.js 4; integration/anvil: a node that
# really reorganises its chain.
for dir in integration/clients integration/anvil; do
	install "$repo/$dir"
done
