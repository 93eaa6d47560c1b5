# muxd's container image: FROM scratch, the static Linux binary, a CA bundle
# (for wss:// providers) and nothing else; it runs as 65532, not root.
#
# Built by `make image` (scripts/image.sh), never from the repository root:
# the script first builds the binary (scripts/release.sh, stamped with git
# describe) and gathers the build context in build/image/: this file, the
# binary as muxd, and the build host's /etc/ssl/certs/ca-certificates.crt.
# Nothing is pulled (scratch is no image to pull), so the build works
# offline, with docker, podman or buildah.
#
# Run it with the options as MUXD_<OPTION> variables or flags after the image
# name (muxd help lists them), for example:
#   docker run --rm -p 127.0.0.1:8547:8547 -e MUXD_UPSTREAM=wss://node.example/KEY muxd
# The image sets MUXD_LISTEN=0.0.0.0:8547 (the container's own interfaces:
# publishing the port decides who can reach it). Like any variable, it
# overrides listen in a config file (--config): give the address as
# MUXD_LISTEN or --listen instead. Clients reaching muxd under another host
# name than localhost need it in MUXD_ALLOWED_HOSTS.
FROM scratch

ARG VERSION=unknown
ARG REVISION=unknown
LABEL org.opencontainers.image.title="muxd" \
      org.opencontainers.image.description="Shares one upstream WebSocket to an Ethereum JSON-RPC node among many clients" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"

COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY muxd /usr/local/bin/muxd

ENV MUXD_LISTEN=0.0.0.0:8547
USER 65532:65532
EXPOSE 8547
ENTRYPOINT ["/usr/local/bin/muxd"]
