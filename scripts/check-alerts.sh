#!/usr/bin/env bash
# Checks deploy/prometheus/muxd-alerts.yml with promtool: `check rules`
# (syntax, PromQL, templates) and `test rules` (the unit tests in
# muxd-alerts_test.yml). promtool comes from Debian's prometheus package,
# installed here when missing (as root; --no-install-recommends keeps out
# the node exporter and its timers). The package also ships a prometheus
# service; whether the package manager starts it does not matter here:
# only the promtool binary is used.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v promtool >/dev/null 2>&1; then
	if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
		echo "check-alerts: promtool not found; install Prometheus's promtool (Debian/Ubuntu: apt-get install prometheus)" >&2
		exit 1
	fi
	echo "check-alerts: installing promtool (Debian package prometheus)"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
promtool --version 2>&1 | head -n 1

cd deploy/prometheus
promtool check rules muxd-alerts.yml
promtool test rules muxd-alerts_test.yml
