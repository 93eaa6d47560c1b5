package mux

import (
	"net/http"
	"strings"
)

// ClientNameHeader is the header a WebSocket or HTTP client may name itself
// with instead of its URL's path (see ClientName).
const ClientNameHeader = "X-Muxd-Client"

// maxClientName bounds a client name.
const maxClientName = 64

// ClientName returns the name a client connecting with request r says it
// has: the X-Muxd-Client header when it is set, else its URL's path without
// its slashes (ws://127.0.0.1:8547/bot-a names bot-a: every client library
// takes a URL, few let a header be set). "" when it says none, or what it
// says is not a name: 1 to 64 of the ASCII letters, digits, '.', '_' and
// '-' (a path of more than one segment, such as /ws/v1, is none). What a
// name gives is the configuration's ([clients.NAME], core.ClientClass): a
// name not configured is unnamed, so nothing a client sends makes a name
// muxd keeps.
func ClientName(r *http.Request) string {
	if v := r.Header.Get(ClientNameHeader); v != "" {
		return ValidClientName(strings.TrimSpace(v))
	}
	return ValidClientName(strings.Trim(r.URL.Path, "/"))
}

// ValidClientName returns s when it is a client name, else "".
func ValidClientName(s string) string {
	if len(s) == 0 || len(s) > maxClientName {
		return ""
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return ""
		}
	}
	return s
}
