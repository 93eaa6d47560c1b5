package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/muxd/muxd/reconnect"
)

// What `check` (and serve, before it starts) says about the addresses it is
// given: the upstream URL, the TCP listen addresses and the IPC path. The
// upstream URL may hold a key, so it is only ever shown in reconnect.Redact's
// form (scheme://host:port/…); listen addresses and paths are not secrets.

// upstreamProblem says what is wrong with the upstream URL raw, "" when
// nothing is. It names what was given in redacted form and what is accepted.
func upstreamProblem(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		// A host:port without a scheme does not parse, or parses with no
		// host ("localhost:8546" has scheme "localhost").
		if guess := withWSScheme(raw); guess != "" && !strings.Contains(raw, "://") {
			return fmt.Sprintf("has no scheme: did you mean %s? (ws:// or wss:// for TLS; the rest of the URL is not shown)", guess)
		}
		if err != nil {
			return fmt.Sprintf("not a URL: %s (the URL is not shown: it may hold credentials)", urlProblem(raw))
		}
		return "must be a ws:// or wss:// URL with a host, as in wss://node.example/KEY (the value is not shown: it may hold credentials)"
	}
	if u.Scheme != "ws" && u.Scheme != "wss" {
		hint := ""
		if u.Scheme == "http" || u.Scheme == "https" {
			hint = "; a node's HTTP endpoint is not its WebSocket one (geth: --ws, port 8546 by default)"
		}
		return fmt.Sprintf("must be a ws:// or wss:// URL, got %s%s", reconnect.Redact(raw), hint)
	}
	if u.Hostname() == "" {
		return fmt.Sprintf("has no host name, got %s", reconnect.Redact(raw))
	}
	if strings.Contains(u.Host, ",") {
		// "ws://a:1,ws://b:2" parses, with host "a:1,ws:".
		return "its host holds a comma: give several upstreams as separate URLs (--upstream once for each, or a TOML array; MUXD_UPSTREAM separates them by commas) (the URL is not shown)"
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Sprintf("port %s is not a port number from 1 to 65535, got %s", p, reconnect.Redact(raw))
		}
	}
	return ""
}

// withWSScheme returns raw with "ws://" put in front, redacted, when that
// makes a URL whose host reads as one (plausibleHost); else "". A value
// pasted without its URL, a bare API key, would otherwise be shown as the
// host of the guess.
func withWSScheme(raw string) string {
	u, err := url.Parse("ws://" + raw)
	if err != nil || !plausibleHost(u.Hostname(), u.Port()) {
		return ""
	}
	return reconnect.Redact("ws://" + raw)
}

// plausibleHost reports whether h, followed by port ("" for none), reads
// as a host rather than a key: an IP address without a zone, localhost,
// or a name (guessedHostName). With a port (1 to 65535) any such name
// passes, one label included (a container's name); without one, only a
// name whose last label is letters only (a top-level domain), since a key
// may look like a name.
func plausibleHost(h, port string) bool {
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return false
		}
	}
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Zone() == ""
	}
	if strings.EqualFold(h, "localhost") {
		return true
	}
	return guessedHostName.MatchString(h) && (port != "" || topLevelDomain.MatchString(h))
}

// guessedHostName is hostName with underscores (container names such as
// proj_geth_1) and labels of at most 63 bytes; topLevelDomain matches a
// name of two labels or more whose last is letters only.
var (
	guessedHostName = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?$`)
	topLevelDomain  = regexp.MustCompile(`\.[A-Za-z]+\.?$`)
)

// hostName matches a DNS host name (letters, digits, '-', '.'), as a listen
// address may give one ("localhost").
var hostName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*\.?$`)

// listenAddrProblem says what is wrong with a TCP address to listen on
// ("host:port"; port 0 picks a free one), "" when nothing is.
func listenAddrProblem(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Sprintf("%q is not host:port, as in 127.0.0.1:8547 (%s)", addr, strings.TrimPrefix(err.Error(), "address "+addr+": "))
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Sprintf("%q: port %q is not a number from 0 to 65535", addr, port)
	}
	if host == "" {
		return "" // every interface
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return ""
	}
	if !hostName.MatchString(host) {
		return fmt.Sprintf("%q: host %q is neither an IP address nor a host name", addr, host)
	}
	return ""
}

// ipcDirNote says, for `check`, when the IPC socket's directory does not
// exist or is not a directory now, so that serve would fail to bind; "" when
// it is there. It is a note, not an error: under systemd the directory may
// be created only when the service starts (RuntimeDirectory=).
func ipcDirNote(path string) string {
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case err == nil && !fi.IsDir():
		return fmt.Sprintf("ipc: %s is not a directory; muxd cannot create %s there", dir, path)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("ipc: directory %s does not exist (yet); serve will fail unless it is created first (mkdir -p %s, or RuntimeDirectory= under systemd)", dir, dir)
	}
	return ""
}

// ipcListenError adds what to do to an error binding the IPC socket at path.
func ipcListenError(path string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w (directory %s does not exist: create it, or choose an ipc path in a directory that exists, such as ./muxd.ipc)", err, filepath.Dir(path))
	}
	if errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("%w (muxd may not create files in %s: choose another ipc path, or run muxd as a user who may)", err, filepath.Dir(path))
	}
	return err
}
