package mux

import (
	"time"
)

// Status is a snapshot of a Server for an operator (the metrics listener's
// /status). It holds nothing secret: upstreams by their number and
// redacted host (never the URL's credentials, path or query, nor header
// values), subscription keys (a client's params) cut short.
type Status struct {
	Ready bool `json:"ready"`
	// NotReady says why not, when not ready.
	NotReady  string           `json:"not_ready,omitempty"`
	Upstreams []UpstreamStatus `json:"upstreams"`
	// Clients are the sessions by transport: ws, http, ipc.
	Clients map[string]int `json:"clients"`
	// Subscriptions are the subscription keys, in key order, at most
	// StatusMaxKeys of them; SubscriptionKeys is how many there are.
	Subscriptions    []SubscriptionStatus `json:"subscriptions"`
	SubscriptionKeys int                  `json:"subscription_keys"`
	// BackfillsRunning is how many keys are being backfilled.
	BackfillsRunning int `json:"backfills_running"`
	// RequestsInFlight and RequestsWaiting are clients' requests owed an
	// answer, and those waiting for an upstream.
	RequestsInFlight int `json:"requests_in_flight"`
	RequestsWaiting  int `json:"requests_waiting"`
}

// UpstreamStatus is one configured upstream.
type UpstreamStatus struct {
	Upstream  string `json:"upstream"` // its number in the configuration, from 1
	Host      string `json:"host"`     // scheme://host:port, "/…" for a path or query
	Active    bool   `json:"active"`
	Connected bool   `json:"connected"`
	Healthy   bool   `json:"healthy"`
	// Why it is not healthy: disconnected, stalled, lagging, chain id….
	Why string `json:"why,omitempty"`
	// Head is its last head (null: none yet); LagBlocks and LagSeconds
	// how far and how long it is behind the best head; HeadAgeSeconds the
	// time since that head (null: none).
	Head           *uint64  `json:"head"`
	LagBlocks      uint64   `json:"lag_blocks"`
	LagSeconds     float64  `json:"lag_seconds"`
	HeadAgeSeconds *float64 `json:"head_age_seconds"`
}

// SubscriptionStatus is one subscription key.
type SubscriptionStatus struct {
	// Key is the key's text (method and params), its first 120 bytes
	// (core.KeyStatusMax); Truncated says it was cut, KeyBytes is its
	// whole length.
	Key       string `json:"key"`
	KeyBytes  int    `json:"key_bytes"`
	Truncated bool   `json:"truncated,omitempty"`
	// State is idle, subscribing, resubscribing, live, failed or
	// unsubscribing.
	State    string `json:"state"`
	Clients  int    `json:"clients"`
	Backfill bool   `json:"backfill"`
}

// StatusMaxKeys bounds the subscription keys a Status lists.
const StatusMaxKeys = 200

// Status returns a snapshot of s.
func (s *Server) Status() Status {
	now := time.Now()
	ready, why := s.readyAt(now)
	st := Status{Ready: ready, NotReady: why, Clients: map[string]int{"ws": 0, "http": 0, "ipc": 0}}
	s.peersMu.RLock()
	for _, c := range s.peers {
		st.Clients[c.tr.name()]++
	}
	s.peersMu.RUnlock()

	s.mu.Lock()
	stats := s.core.Stats()
	keys, total := s.core.Subscriptions(StatusMaxKeys)
	for _, n := range s.set.nodes {
		fs := s.set.sel.Status(n.index, now)
		u := UpstreamStatus{
			Upstream:  n.label,
			Host:      n.host,
			Active:    s.up != nil && s.up.node == n,
			Connected: fs.Connected,
			Healthy:   fs.Healthy,
			Why:       fs.Why,
		}
		if fs.HasHead {
			head := fs.Head
			age := sinceOr0(fs.HeadAt, now)
			u.Head, u.HeadAgeSeconds = &head, &age
			if fs.Best > head {
				u.LagBlocks = fs.Best - head
			}
			u.LagSeconds = sinceOr0(fs.BehindSince, now)
		}
		st.Upstreams = append(st.Upstreams, u)
	}
	s.mu.Unlock()

	st.SubscriptionKeys = total
	st.BackfillsRunning = stats.Backfills
	st.RequestsInFlight = stats.InFlight
	st.RequestsWaiting = stats.Waiting
	st.Subscriptions = make([]SubscriptionStatus, 0, len(keys))
	for _, k := range keys {
		st.Subscriptions = append(st.Subscriptions, SubscriptionStatus{
			Key: k.Key, KeyBytes: k.KeyBytes, Truncated: k.Truncated, State: k.State, Clients: k.Clients, Backfill: k.Backfill,
		})
	}
	return st
}
