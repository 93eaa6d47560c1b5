package reconnect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// DefaultReadLimit is the maximum size of one upstream message when
// [WebSocketDialer] is given a non-positive read limit. Ethereum nodes send large
// responses (blocks with full transactions, traces, logs), hence the generous limit.
const DefaultReadLimit = 128 << 20

// ErrRedirect is wrapped by the error of a [WebSocketDialer] dial whose
// handshake was answered with an HTTP redirect. Redirects are not followed:
// the handshake carries the configured headers (API keys, Authorization),
// and a WebSocket endpoint that redirects is a misconfiguration; configure
// the URL it redirects to instead.
var ErrRedirect = errors.New("upstream redirected the WebSocket handshake; redirects are not followed")

// DialFunc opens one upstream connection. ctx bounds the dial attempt only; the
// returned connection must stay usable after ctx is done. A DialFunc may be called
// again after a previous connection is lost, but [Supervisor.Run] never calls it
// concurrently with itself.
type DialFunc func(ctx context.Context) (*websocket.Conn, error)

// WebSocketDialer returns a DialFunc that dials rawURL (ws:// or wss://) sending the
// extra HTTP headers in header (for example Authorization), and sets the connection's
// read limit to readLimit bytes (0 means [DefaultReadLimit]; < 0 none, for a caller
// that bounds what it keeps of each message itself, as muxd's upstream reader does so
// that one message too large does not cost the connection).
//
// header is copied; later changes to it have no effect. Headers are never logged.
// Dial errors read "dial upstream <Redact(rawURL)>: <cause>", where the cause's text
// has the URL and its secret parts (userinfo, path, query) scrubbed; the original
// error stays reachable through errors.Unwrap / errors.Is / errors.As, and its own
// message may contain the raw URL, so do not log an unwrapped cause.
//
// An HTTP redirect in answer to the handshake is not followed, so the headers
// and the URL's secrets never reach another origin (or the same one under
// another path); the dial fails with an error wrapping [ErrRedirect] that
// names the status code and the redirect target's scheme and host only.
//
// The returned DialFunc is safe for concurrent use.
func WebSocketDialer(rawURL string, header http.Header, readLimit int64) DialFunc {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	return webSocketDialer(rawURL, header, readLimit, d.DialContext)
}

// webSocketDialer is WebSocketDialer opening its sockets with dialNet.
func webSocketDialer(rawURL string, header http.Header, readLimit int64, dialNet func(ctx context.Context, network, addr string) (net.Conn, error)) DialFunc {
	switch {
	case readLimit == 0:
		readLimit = DefaultReadLimit
	case readLimit < 0:
		readLimit = -1 // coder/websocket: no limit
	}
	opts := &websocket.DialOptions{HTTPHeader: header.Clone(), HTTPClient: coalescingClient(dialNet)}
	prefix := "dial upstream " + Redact(rawURL) + ": "
	scrub := urlScrubber(rawURL)
	return func(ctx context.Context) (*websocket.Conn, error) {
		c, resp, err := websocket.Dial(ctx, rawURL, opts)
		if err != nil {
			if rerr := redirectError(resp); rerr != nil {
				return nil, &dialError{msg: prefix + rerr.Error(), err: rerr}
			}
			return nil, &dialError{msg: prefix + scrub.Replace(err.Error()), err: err}
		}
		c.SetReadLimit(readLimit)
		return c, nil
	}
}

// dialError is fmt.Errorf("dial upstream %s: %w", Redact(rawURL), err) with the
// secrets scrubbed from err's text (net/http's *url.Error quotes the whole URL).
type dialError struct {
	msg string
	err error
}

func (e *dialError) Error() string { return e.msg }
func (e *dialError) Unwrap() error { return e.err }

// urlScrubber returns a Replacer that rewrites every spelling of rawURL that may appear
// in an error (as given; with the ws/wss/http/https scheme; with the password masked by
// url.URL.Redacted or by net/http; quoted) to Redact(rawURL), and any remaining secret
// part of it to "…".
func urlScrubber(rawURL string) *strings.Replacer {
	redacted := Redact(rawURL)
	full := []string{rawURL}
	var parts []string
	if u, err := url.Parse(rawURL); err == nil {
		for _, scheme := range []string{"ws", "wss", "http", "https"} {
			v := *u
			v.Scheme = scheme
			full = append(full, v.String(), v.Redacted())
			if _, ok := u.User.Password(); ok { // as net/http's stripPassword does
				full = append(full, strings.Replace(v.String(), u.User.String()+"@", u.User.Username()+":***@", 1))
			}
		}
		if u.User != nil {
			pw, _ := u.User.Password()
			parts = append(parts, u.User.String(), u.User.Username(), pw)
		}
		parts = append(parts, u.RawQuery, u.EscapedPath(), u.Path, u.EscapedFragment(), u.Fragment)
	}
	for _, s := range slices.Clone(full) {
		full = append(full, strings.Trim(strconv.Quote(s), `"`))
	}

	type pair struct{ old, new string }
	var pairs []pair
	for _, s := range full {
		pairs = append(pairs, pair{s, redacted})
	}
	for _, s := range parts {
		if len(s) >= 4 { // shorter strings ("/", "/v3") are not secrets and too likely to clobber other text
			pairs = append(pairs, pair{s, "…"})
		}
	}
	// strings.Replacer tries the pairs in argument order at each position: longest first.
	slices.SortStableFunc(pairs, func(a, b pair) int { return cmp.Compare(len(b.old), len(a.old)) })
	var args []string
	for _, p := range pairs {
		if p.old != "" {
			args = append(args, p.old, p.new)
		}
	}
	return strings.NewReplacer(args...)
}

// redirectError returns an error wrapping ErrRedirect if resp, the answer to
// a failed handshake, is a redirect, and nil otherwise. Its text names the
// status and the target's scheme://host only: the target's path, query and
// userinfo may carry the same secrets as the upstream URL.
func redirectError(resp *http.Response) error {
	if resp == nil || resp.StatusCode < 300 || resp.StatusCode > 399 || resp.Header.Get("Location") == "" {
		return nil
	}
	target := "an unreadable location"
	if loc, err := resp.Location(); err == nil && loc.Host != "" {
		target = loc.Scheme + "://" + loc.Host
	}
	return fmt.Errorf("%w: %d %s to %s", ErrRedirect, resp.StatusCode, http.StatusText(resp.StatusCode), target)
}

// coalescingClient is the HTTP client for the upstream handshake: its
// connections, opened by dialNet, coalesce writes (see coalescingConn),
// which the WebSocket then inherits, and report their progress to the
// liveness the dial's ctx carries, if any (see withLiveness), and say they
// are open to the hook it carries, if any (see withReach). Every dial
// opens a new connection (no keep-alive pool), so the socket a WebSocket
// gets is always the one its own dial opened and watched. It follows no
// redirect (see ErrRedirect): the redirect response itself comes back to
// websocket.Dial, which fails on it. Proxy settings come from the
// environment as with http.DefaultTransport.
func coalescingClient(dialNet func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Client {
	return &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{
			Proxy: http.ProxyFromEnvironment,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := dialNet(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				cc := newCoalescingConn(c)
				if l := livenessFrom(ctx); l != nil {
					l.watch(cc)
				}
				if reached := reachFrom(ctx); reached != nil {
					reached()
				}
				return cc, nil
			},
			DisableKeepAlives:   true,
			TLSHandshakeTimeout: 10 * time.Second,
		},
	}
}

type reachKey struct{}

// withReach returns ctx carrying reached: a [WebSocketDialer] dial under it
// calls it once its connection to the node is open, as the handshake
// begins. The Supervisor passes one to each dial when OnDialReached is set.
func withReach(ctx context.Context, reached func()) context.Context {
	return context.WithValue(ctx, reachKey{}, reached)
}

// reachFrom returns the hook ctx carries, or nil.
func reachFrom(ctx context.Context) func() {
	f, _ := ctx.Value(reachKey{}).(func())
	return f
}
