# muxd developer tasks. CI runs .ci/run, which runs `make test`, `make bench-smoke`
# and `make fuzz`. Needs: Go (go.mod's version), make, bash, and for -race a C
# compiler (gcc) with cgo; scripts/prereqs.sh says which is missing.
#
#   make test   go vet + all tests with -race; the geth --dev integration tests
#               use .bin/geth (installed here) or $MUXD_GETH if set; the
#               client-library tests (integration/clients) use the npm packages
#               package-lock.json pins (installed here: scripts/install-node-deps.sh)
#   make geth   install the pinned geth into .bin/geth (scripts/install-geth.sh)
#   make fuzz   short fuzz runs of every FuzzXxx target (FUZZTIME each, default 20s)
#   make dev    geth --dev on ws://127.0.0.1:8546 + muxd on ws://127.0.0.1:8547
#               (DEV_GETH_WS_PORT, DEV_MUXD_LISTEN, MUXD_GETH; ARGS for muxd)
#   make bench-smoke  the benchmark suite (integration/bench) at tiny sizes, seconds,
#               no thresholds; the full suite is `go run ./integration/bench`
#   make release  static binaries (linux, darwin; amd64, arm64) stamped with
#               git describe into dist/, with dist/SHA256SUMS (scripts/release.sh)
#   make image  the container image (Dockerfile: FROM scratch, static muxd, CA
#               bundle, user 65532) with docker, podman or buildah, whichever
#               works (scripts/image.sh; IMAGE, IMAGE_TOOL)

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := test

GO ?= go
FUZZTIME ?= 20s
GETH_BIN := $(CURDIR)/.bin/geth

.PHONY: test geth fuzz dev bench-smoke release image

# With MUXD_GETH set the install is skipped and that binary is used. A failed
# install (geth, or the npm packages: needs node and npm) is fatal under
# CI=true; locally the tests needing it then skip instead.
test:
	@GO="$(GO)" bash scripts/prereqs.sh race
	@if [[ -z "$${MUXD_GETH:-}" ]]; then \
		if ! bash scripts/install-geth.sh >/dev/null; then \
			if [[ "$${CI:-}" == true ]]; then echo "make test: geth install failed" >&2; exit 1; fi; \
			echo "make test: geth install failed; geth integration tests will skip" >&2; \
		fi; \
	fi
	@if ! bash scripts/install-node-deps.sh; then \
		if [[ "$${CI:-}" == true ]]; then echo "make test: npm package install failed" >&2; exit 1; fi; \
		echo "make test: npm package install failed; client-library tests (integration/clients) will skip" >&2; \
	fi
	@if [[ -z "$${MUXD_GETH:-}" && -x "$(GETH_BIN)" ]]; then export MUXD_GETH="$(GETH_BIN)"; fi; \
	echo "make test: MUXD_GETH=$${MUXD_GETH:-<unset>}"; \
	set -x; \
	$(GO) vet ./... && $(GO) test -race -count=1 -timeout 30m ./...

geth:
	@bash scripts/install-geth.sh

# ---- fuzz: short fuzz runs (also run by .ci/run) ---------------------------
# Loops over `go test -list '^Fuzz' ./...`, one target at a time:
#   go test -run='^$' -fuzz='^Name$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s <pkg>
# Succeeds (saying so) while there are no fuzz targets.
fuzz:
	@GO="$(GO)" FUZZTIME="$(FUZZTIME)" bash scripts/fuzz.sh

# ARGS go to muxd: make dev ARGS="--log-level debug"
dev:
	@GO="$(GO)" bash scripts/prereqs.sh
	@GO="$(GO)" bash scripts/dev.sh $(ARGS)

# ---- bench-smoke: the benchmark suite at tiny sizes (also run by .ci/run) --
bench-smoke:
	$(GO) run ./integration/bench -smoke -q

# ---- release: static, version-stamped binaries and their checksums --------
release:
	@GO="$(GO)" bash scripts/release.sh >/dev/null

# ---- image: the container image, built offline from what the repo builds --
image:
	@GO="$(GO)" bash scripts/image.sh >/dev/null
