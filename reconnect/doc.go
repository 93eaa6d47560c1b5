// Package reconnect supervises muxd's single upstream WebSocket connection.
//
// A [Supervisor] dials the upstream node (see [WebSocketDialer]), hands each live
// connection to a serve function, keeps it alive with pings, and when it is lost dials
// again with exponential backoff and jitter. Every connection carries a generation
// number ([Conn.Gen]) so callers can tell connections apart, e.g. to discard state
// (pending requests, subscriptions) that belonged to a previous connection.
//
// Concurrency: [Supervisor.Run] runs the whole lifecycle on the calling goroutine: it
// dials, calls serve, and calls the optional [Config] hooks synchronously, one connection
// at a time. Internally it runs one keepalive goroutine per connection and, on shutdown,
// one closer; none of them outlive the connection they belong to, except that a
// graceful close handshake may still finish shortly after Run returns (bounded by
// coder/websocket's own close timeouts).
//
// Secrets: providers put API keys in the URL (userinfo, path, query) and in headers.
// Headers are never logged; URLs only appear in logs and errors through [Redact].
package reconnect
