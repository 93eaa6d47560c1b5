// Package reconnect supervises muxd's single upstream WebSocket connection.
//
// A [Supervisor] dials the upstream node (see [WebSocketDialer]), hands each live
// connection to a serve function, watches that the node shows signs of life (bytes
// from it, our writes being taken, pongs; see [Config.PingTimeout]), and when the
// connection is lost dials again with exponential backoff and jitter, the pauses cut
// short while the caller says something waits ([Supervisor.Hurry]). Every connection carries a generation
// number ([Conn.Gen]) so callers can tell connections apart, e.g. to discard state
// (pending requests, subscriptions) that belonged to a previous connection.
//
// Concurrency: [Supervisor.Run] runs the whole lifecycle on the calling goroutine: it
// dials, calls serve, and calls the optional [Config] hooks synchronously, one connection
// at a time. Internally it runs one keepalive goroutine per connection, at most one
// ping at a time, and, on shutdown, one closer; none of them outlive the connection
// they belong to, except that a graceful close handshake may still finish shortly
// after Run returns (bounded by coder/websocket's own close timeouts). A socket opened
// by [WebSocketDialer] has no goroutine of its own: its writes are made by whoever
// writes, and held between [Conn.Cork] and [Conn.Flush].
//
// Redirects: a handshake answered with an HTTP redirect is not followed (the headers
// carry API keys); the dial fails with [ErrRedirect].
//
// Secrets: providers put API keys in the URL (userinfo, path, query) and in headers.
// Headers are never logged; URLs only appear in logs and errors through [Redact].
package reconnect
