package gapfill

import "time"

// Expect is the event "key's eth_subscribe is being sent (the first
// time)". A logs key asks for the node's head now, ahead of the
// subscription's answer, rather than when it becomes live: where it
// starts is then known even when the connection is lost right after the
// node answered the subscription (and the client was told it is live), so
// the logs mined during that outage are backfilled like any others. The
// head the node answers may be a block below the one the subscription
// starts at: the logs of such a block are owed only across a reconnect,
// and then sent (they are the subscriber's filter's, mined after its
// eth_subscribe was sent). Other kinds, and keys the machine knows, are
// left as they are.
func (m *Machine) Expect(key string, now time.Time) Effects {
	if _, ok := m.keys[key]; ok || !m.Enabled() {
		return m.take()
	}
	k := newKey(key)
	if k.kind != kindLogs {
		return m.take()
	}
	k.expected = true
	m.keys[key] = k
	m.askBaseline(k, now)
	return m.take()
}

// asking reports whether a request of k's with purpose is in flight.
func (m *Machine) asking(k *keyState, purpose string) bool {
	for _, r := range m.reqs {
		if r.key == k.key && r.purpose == purpose {
			return true
		}
	}
	return false
}
