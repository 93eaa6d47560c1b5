package mux

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"

	"github.com/muxd/muxd/router"
)

// This file is the second routing layer. A client's eth_subscribe is
// answered with a subscription id of muxd's own; identical subscriptions
// (same canonical params) share one upstream subscription; pushes are routed
// by params.subscription and rewritten to each holder's id. All functions
// named ...Locked run with s.mu held.

// newSubscriptionID returns a fresh client subscription id as a JSON string:
// "0x" and 32 lowercase hex digits, like geth's.
func newSubscriptionID() string {
	var b [16]byte
	rand.Read(b[:])
	out := make([]byte, 0, 36)
	out = append(out, `"0x`...)
	out = hex.AppendEncode(out, b[:])
	return string(append(out, '"'))
}

func (s *Server) subscribeLocked(c *Client, frame []byte, m *router.Message, p router.Pending, up *upstreamConn, out *outgoing) []byte {
	if c.tr.name() == "http" {
		return s.errorBytes(p.ID, router.ErrorNoNotifications)
	}
	if !m.Params.Present() {
		return s.errorBytes(p.ID, invalidParams)
	}
	params := m.Params.In(frame)
	key, err := router.SubscriptionKey(params)
	if err != nil {
		return s.errorBytes(p.ID, invalidParams)
	}
	if len(c.subs) >= s.cfg.MaxSubscriptions {
		s.metrics.limit("subscriptions")
		return s.errorBytes(p.ID, router.ErrorLimit.Because("too many subscriptions"))
	}
	subID := newSubscriptionID()
	sh := s.subs.Attach(key, append([]byte(nil), params...), c.id, subID)
	if c.subs == nil {
		c.subs = make(map[string]string)
	}
	c.subs[subID] = key
	s.updateSubGaugesLocked()
	switch sh.State {
	case router.SubLive:
		s.answerSubscribeLocked(c, p, subID)
		return nil
	case router.SubSubscribing:
		s.waitLocked(c, key, router.Waiter{Member: router.Member{Client: c.id, ID: subID}, Request: p})
		return nil
	}
	s.waitLocked(c, key, router.Waiter{Member: router.Member{Client: c.id, ID: subID}, Request: p})
	if up != nil {
		s.subscribeUpstreamLocked(sh, out)
	}
	// With no upstream, the key is subscribed as soon as one is up
	// (resubscribeLocked); the client waits until then or its deadline.
	return nil
}

var invalidParams = router.RPCError{Code: -32602, Message: "invalid params", Reason: "eth_subscribe params must be an array starting with the subscription name"}

// subscribeUpstreamLocked sends eth_subscribe for sh on the current
// connection, as muxd's own request.
func (s *Server) subscribeUpstreamLocked(sh *router.Shared, out *outgoing) {
	sh.State = router.SubSubscribing
	sh.Attempt = s.internalRequestLocked(router.KindSubscribe, methodSubscribe, sh.Params, sh.Key, out)
}

// unsubscribeUpstreamLocked sends eth_unsubscribe for the node's id.
func (s *Server) unsubscribeUpstreamLocked(upstreamID string, out *outgoing) {
	if s.up == nil {
		return // the subscription died with the connection
	}
	params := append(append([]byte{'['}, upstreamID...), ']')
	s.internalRequestLocked(router.KindUnsubscribe, methodUnsubscribe, params, "", out)
}

// internalRequestLocked sends a request muxd makes on its own behalf and
// returns its upstream id. It has no deadline: for eth_subscribe the clients
// waiting on it time out on their own (ExpireWaiters), but muxd keeps
// waiting for the node's answer, so that a late answer still makes the key
// live (or is unsubscribed) instead of leaving an upstream subscription
// nobody knows about.
func (s *Server) internalRequestLocked(kind router.Kind, method string, params []byte, key string, out *outgoing) uint64 {
	uid := s.reqs.Next()
	s.enqueueLocked(nil, uid, router.Pending{
		Client: router.Internal,
		Method: method,
		Sent:   time.Now(),
		Frame:  router.AppendRequest(nil, uid, method, params),
		Kind:   kind,
		Key:    key,
	}, s.up, out)
	return uid
}

// subscribedLocked handles the node's answer to muxd's eth_subscribe.
func (s *Server) subscribedLocked(msg []byte, m *router.Message, uid uint64, p router.Pending, out *outgoing) {
	if m.Result.Present() && msg[m.Result.Off] == '"' {
		upID := string(m.Result.In(msg))
		waiters, ok := s.subs.Subscribed(p.Key, uid, upID)
		if !ok {
			// Everyone left while it was being set up, or the key is
			// live already under another upstream id.
			s.unsubscribeUpstreamLocked(upID, out)
			return
		}
		for _, w := range waiters {
			if c := s.clients[w.Client]; c != nil {
				s.answerSubscribeLocked(c, w.Request, w.ID)
				s.endedLocked(c, 0) // a waiter holds no upstream frame of its own
			}
		}
		s.updateSubGaugesLocked()
		s.applyGapLocked(s.gap.Live(p.Key, time.Now()), nil, out)
		return
	}
	// An error (or a result that is no subscription id): each waiter gets
	// the node's answer as it came, under its own id.
	waiters := s.subs.Failed(p.Key, uid)
	s.log.Warn("upstream refused a subscription", "key", p.Key, "waiters", len(waiters))
	for _, w := range waiters {
		c := s.clients[w.Client]
		if c == nil {
			continue
		}
		delete(c.subs, w.ID)
		resp := router.AppendSpliced(nil, msg[m.Start:m.End], rebase(m.ID, m.Start), w.Request.ID)
		s.deliverLocked(c, w.Request, resp, responseCode(msg, m))
		s.endedLocked(c, 0)
	}
	s.updateSubGaugesLocked()
}

// waitLocked records a client eth_subscribe that waits for the node's
// answer. It counts as in flight for its client like any request, so limits,
// Shutdown and the IPC close after a parse error wait for its answer.
func (s *Server) waitLocked(c *Client, key string, w router.Waiter) {
	s.subs.Wait(key, w)
	s.startedLocked(c, 0)
}

// expireWaitersLocked removes the subscribe waiters whose deadline is not
// after now and appends their requests to dst, to be answered by the caller.
func (s *Server) expireWaitersLocked(now time.Time, dst []router.Pending) []router.Pending {
	for _, w := range s.subs.ExpireWaiters(now) {
		if c := s.clients[w.Client]; c != nil {
			delete(c.subs, w.ID)
			s.endedLocked(c, 0)
		}
		dst = append(dst, w.Request)
	}
	return dst
}

// answerSubscribeLocked sends a client its subscription id and lets pushes
// reach it from then on; in a batch, from when the array is sent.
func (s *Server) answerSubscribeLocked(c *Client, p router.Pending, subID string) {
	resp := router.AppendResultResponse(nil, p.ID, []byte(subID))
	if p.Batch != nil {
		p.Batch.Subs = append(p.Batch.Subs, subID)
	}
	s.deliverLocked(c, p, resp, 0)
	if p.Batch == nil {
		s.activateLocked(c, subID)
	}
}

// activateLocked lets pushes reach c's subscriptions subIDs from now on,
// once their answer is queued; pushes held for them until now go first.
func (s *Server) activateLocked(c *Client, subIDs ...string) {
	for _, sub := range subIDs {
		held := s.subs.SetReady(sub)
		for _, m := range held {
			c.send(m)
		}
		s.metrics.Pushes.Add(float64(len(held)))
	}
}

func rebase(sp router.Span, start int) router.Span {
	sp.Off -= start
	return sp
}

func (s *Server) unsubscribeLocked(c *Client, frame []byte, m *router.Message, p router.Pending, up *upstreamConn, out *outgoing) []byte {
	if c.tr.name() == "http" {
		return s.errorBytes(p.ID, router.ErrorNoNotifications)
	}
	var args []string
	if !m.Params.Present() || json.Unmarshal(m.Params.In(frame), &args) != nil || len(args) != 1 {
		return s.errorBytes(p.ID, router.RPCError{Code: -32602, Message: "invalid params", Reason: "eth_unsubscribe takes one subscription id"})
	}
	// muxd's ids are lowercase hex; a client that upper-cased one still
	// means it.
	subID, _ := json.Marshal(strings.ToLower(args[0]))
	result := "false"
	if owner, ok := s.subs.Owner(string(subID)); ok && owner == c.id {
		s.detachLocked(c, string(subID), out)
		result = "true"
	}
	s.metrics.response(0)
	return router.AppendResultResponse(nil, p.ID, []byte(result))
}

// detachLocked removes one of c's subscriptions, unsubscribing upstream
// when it was the key's last.
func (s *Server) detachLocked(c *Client, subID string, out *outgoing) {
	delete(c.subs, subID)
	sh, last, unsub := s.subs.Detach(subID)
	if last {
		s.gap.Forget(sh.Key)
	}
	if unsub != "" {
		s.unsubscribeUpstreamLocked(unsub, out)
	}
	s.updateSubGaugesLocked()
}

// releaseSubscriptionsLocked detaches every subscription of a client that
// has gone and returns the frames to send upstream.
func (s *Server) releaseSubscriptionsLocked(c *Client) [][]byte {
	var out outgoing
	for subID := range c.subs {
		s.detachLocked(c, subID, &out)
	}
	return out.frames
}

// resubscribeLocked subscribes upstream every key that has holders but no
// live upstream subscription: after a reconnect, and for keys whose client
// asked while no upstream was up. Client ids do not change.
func (s *Server) resubscribeLocked(out *outgoing) {
	for _, sh := range s.subs.Idle() {
		s.subscribeUpstreamLocked(sh, out)
	}
}

// subscriptionsLostLocked forgets the node's subscription ids when the
// connection is gone.
func (s *Server) subscriptionsLostLocked() {
	s.subs.Lost()
	s.updateSubGaugesLocked()
}

// routePush is layer 2: a push is scanned once, then spliced for every
// holder of its subscription with that holder's id. The gap machine
// (backfill.go) decides first whether it goes now, waits behind a backfill,
// or is a duplicate.
func (s *Server) routePush(u *upstreamConn, frame []byte, m *router.Message) {
	if !m.Subscription.Present() {
		s.dropped(DropUnexpected, "upstream push without params.subscription", "gen", u.Gen)
		return
	}
	elem := frame[m.Start:m.End]
	at := rebase(m.Subscription, m.Start)
	var out outgoing
	s.mu.Lock()
	if s.up != u {
		s.mu.Unlock()
		return
	}
	sh := s.subs.Push(at.In(elem))
	if sh == nil {
		s.mu.Unlock()
		s.dropped(DropUnknownSubscription, "upstream push for a subscription nobody holds", "gen", u.Gen)
		return
	}
	if s.gap.Passes(sh.Key) {
		// newPendingTransactions and the like, the busiest pushes: no
		// gap rules, straight to the members.
		s.fanoutLocked(sh, elem, at)
	} else {
		s.applyGapLocked(s.gap.Push(sh.Key, m.Params.In(frame), time.Now()), &livePush{elem, at}, &out)
	}
	s.mu.Unlock()
	u.send(out.frames...)
}

// fanoutLocked queues push elem, whose params.subscription is at at, for
// every member of sh, each under its own id.
func (s *Server) fanoutLocked(sh *router.Shared, elem []byte, at router.Span) {
	n := 0
	for i := range sh.Members {
		mem := &sh.Members[i]
		c := s.clients[mem.Client]
		if c == nil {
			continue
		}
		msg := router.AppendSpliced(make([]byte, 0, len(elem)-at.Len+len(mem.ID)), elem, at, []byte(mem.ID))
		if !mem.Ready {
			// Its answer has not been sent yet (a batch still being
			// answered): the push follows the answer.
			// Held pushes count against the client's queue bound
			// like queued ones: a batch kept open long cannot pile
			// them up without end.
			if mem.HeldBytes+len(msg) > s.cfg.OutboundQueueBytes {
				c.slowConsumer()
				continue
			}
			mem.Held = append(mem.Held, msg)
			mem.HeldBytes += len(msg)
			continue
		}
		c.send(msg)
		n++
	}
	s.metrics.Pushes.Add(float64(n))
}

func (s *Server) updateSubGaugesLocked() {
	up, cl := s.subs.Counts()
	s.metrics.UpstreamSubs.Set(float64(up))
	s.metrics.ClientSubs.Set(float64(cl))
}
