package core

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/muxd/muxd/router"
)

// This file is named clients (DESIGN §5): a session may say which client
// it is (the shell reads a name from its URL path or a header, see
// mux.ClientName), and a name configured in Config.Clients gives every
// session under it one share and one set of limits:
//
//   - Weight: the name's quantum in the fair shares of calls at the node
//     (fairshare.go). All its sessions are one flow: a bot with ten
//     connections gets one share, not ten.
//   - Bulk: its calls queue behind those of latency-class clients (every
//     other client), which are served first whenever any wait.
//   - MaxInFlight: requests in flight for all its sessions together;
//     -32005 past it (limit client_in_flight).
//   - Rate: requests per second, a token bucket holding at most one
//     second's worth (at least one request); -32005 past it (limit
//     client_rate). Time comes with each event, as everywhere in the core.
//
// A session with no name, or with a name not configured, is unnamed: a flow
// of its own in the latency class, weight 1, under the per-session limits
// only. Names are never made up from what clients send: the set is the
// configuration's, so metrics labelled by name stay bounded.

// ClientClass is what Config.Clients gives one name.
type ClientClass struct {
	Weight      int     // its quantum in the fair shares; <= 0: 1
	MaxInFlight int     // requests in flight for all its sessions; <= 0: no bound beyond each session's
	Rate        float64 // requests per second; <= 0: none
	Bulk        bool    // its calls queue behind latency-class clients'
}

// ErrBadClientClass is returned by New and Reconfigure for a ClientClass
// that cannot be used.
var ErrBadClientClass = errors.New("bad client class")

// named is the core's state of one configured name.
type named struct {
	name  string
	class ClientClass
	flow  uint64 // its flow in the fair-share queues
	// inflight counts the requests in flight of all its sessions, and
	// sessions the sessions.
	inflight, sessions int
	tokens             float64   // the rate bucket
	filled             time.Time // when tokens was last brought up to date
}

// namedFlowBit marks the fair-share flow of a name (a session's flow is its
// client id, far below it).
const namedFlowBit = 1 << 63

// newNames builds the named states of cfg, keeping the counts of names
// that old (nil: none) held.
func newNames(cfg map[string]ClientClass, old map[string]*named) (map[string]*named, error) {
	for name, cls := range cfg {
		// "default" labels the unnamed clients in the shell's metrics.
		if name == "" || name == "default" || math.IsNaN(cls.Rate) || math.IsInf(cls.Rate, 0) {
			return nil, fmt.Errorf("%w: %q", ErrBadClientClass, name)
		}
	}
	out := make(map[string]*named, len(cfg))
	var flow uint64
	for _, n := range old {
		flow = max(flow, n.flow&^namedFlowBit)
	}
	for name, cls := range cfg {
		cls.Weight = max(cls.Weight, 1)
		if n := old[name]; n != nil {
			n.class = cls
			out[name] = n
			continue
		}
		flow++
		out[name] = &named{name: name, class: cls, flow: namedFlowBit | flow, tokens: burst(cls.Rate)}
	}
	return out, nil
}

// burst is the most requests a bucket of rate holds: one second's worth,
// at least one.
func burst(rate float64) float64 { return max(rate, 1) }

// admit reports why a request of a session under n may not go now
// ("": it may), taking a token from its bucket when it may.
func (n *named) admit(now time.Time) string {
	if n.class.MaxInFlight > 0 && n.inflight >= n.class.MaxInFlight {
		return "client_in_flight"
	}
	if n.class.Rate <= 0 {
		return ""
	}
	if !n.filled.IsZero() {
		if d := now.Sub(n.filled); d > 0 {
			n.tokens = min(n.tokens+d.Seconds()*n.class.Rate, burst(n.class.Rate))
		}
	}
	if now.After(n.filled) {
		n.filled = now
	}
	if n.tokens < 1 {
		return "client_rate"
	}
	n.tokens--
	return ""
}

// flowOf returns the fair-share flow of cl, its weight, and whether it is
// of the bulk class.
func flowOf(cl *client) (flow uint64, weight int, bulk bool) {
	if n := cl.named; n != nil {
		return n.flow, n.class.Weight, n.class.Bulk
	}
	return uint64(cl.id), 1, false
}

// JoinAs is Join for a session that says it is client name: a name in
// Config.Clients puts it under that name's share and limits; any other
// name (or none) leaves it unnamed. It returns the name it counts under
// ("" for unnamed).
func (c *Core) JoinAs(http bool, name string) (router.ClientID, string, error) {
	id, err := c.Join(http)
	if err != nil {
		return 0, "", err
	}
	n := c.names[name]
	if n == nil {
		return id, "", nil
	}
	c.clients[id].named = n
	n.sessions++
	return id, n.name, nil
}

// NamedStat is one configured name's sessions and requests in flight.
type NamedStat struct {
	Name               string
	Sessions, InFlight int
}

// NamedStats appends to dst the state of every configured name, in no
// particular order.
func (c *Core) NamedStats(dst []NamedStat) []NamedStat {
	for _, n := range c.names {
		dst = append(dst, NamedStat{n.name, n.sessions, n.inflight})
	}
	return dst
}

// namedRefusal is the answer to a request refused by a named client's
// limit, by the limit's name.
var namedRefusal = map[string]router.RPCError{
	"client_in_flight": router.ErrorLimit.Because("too many requests in flight for this client name"),
	"client_rate":      router.ErrorLimit.Because("request rate limit exceeded for this client name"),
}
