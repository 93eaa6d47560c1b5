package mux

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// WithoutHealthHeads leaves a single upstream without muxd's newHeads
// health subscription (Config.noHealthHeads), for the external tests that
// count exactly what the node receives.
func WithoutHealthHeads(c *Config) { c.noHealthHeads = true }

// DroppedCount returns how many messages were dropped for reason r.
func (m *Metrics) DroppedCount(r DropReason) float64 {
	return counterValue(m.dropped[r])
}

// counterValue reads a counter or gauge, for tests.
func counterValue(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	return 0
}

// OpenConnections is the number of connections open on the server's
// listeners.
func (h *HTTPServer) OpenConnections() int {
	return h.conns.open()
}

// Active returns the index of the active upstream (in Config.Upstreams,
// of the configuration it came with: after a reload that changed them, the
// old list's until the switch to the new one), -1 while none is.
func (s *Server) Active() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.up == nil {
		return -1
	}
	return s.up.node.index
}

// upChanges holds, per Server that a test has asked Connected, the channel
// closed at the next change of its upstream.
var upChanges sync.Map // *Server -> *chan struct{}

// Connected reports whether the upstream is up, and returns a channel that
// is closed at the next change (the first call on s starts watching).
func (s *Server) Connected() (bool, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.upChanged == nil {
		ch := make(chan struct{})
		cur := &ch
		upChanges.Store(s, cur)
		s.upChanged = func() {
			close(*cur)
			*cur = make(chan struct{})
		}
	}
	cur, _ := upChanges.Load(s)
	return s.up != nil, *cur.(*chan struct{})
}
