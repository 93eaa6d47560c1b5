package core

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/muxd/muxd/router"
)

// This file is the second routing layer. A client's eth_subscribe is
// answered with a subscription id of muxd's own; identical subscriptions
// (same canonical params) share one upstream subscription (subtable.go);
// pushes are routed by params.subscription and go to each holder under its
// own id.

var invalidParams = router.RPCError{Code: -32602, Message: "invalid params", Reason: "eth_subscribe params must be an array starting with the subscription name"}

// subscribe handles a client's eth_subscribe.
func (c *Core) subscribe(e *Effects, cl *client, frame []byte, m *router.Message, p router.Pending) []byte {
	if cl.http {
		return c.errorBytes(p.Method, p.ID, router.ErrorNoNotifications)
	}
	if !m.Params.Present() {
		return c.errorBytes(p.Method, p.ID, invalidParams)
	}
	params := m.Params.In(frame)
	if stripped, rng, history, perr := router.SplitSubscribeRange(params); history {
		return c.subscribeHistory(e, cl, stripped, rng, perr, p)
	}
	key, err := router.SubscriptionKey(params)
	if err != nil {
		return c.errorBytes(p.Method, p.ID, invalidParams)
	}
	if len(cl.subs) >= c.cfg.MaxSubscriptions {
		c.obs.Limit("subscriptions")
		return c.errorBytes(p.Method, p.ID, router.ErrorLimit.Because("too many subscriptions"))
	}
	// A subscription holds its params for as long as it lives: they count
	// against max_held_bytes like a request's frame, so that a client
	// cannot make muxd hold more through subscriptions than through
	// requests (the first thing a client holds always passes).
	size := len(key) + len(params)
	if c.overHeld(cl, size) {
		return c.errorBytes(p.Method, p.ID, errHeldBytes)
	}
	c.join(e, cl, key, params, size, p, nil, p.Sent)
	return nil
}

// join makes cl's eth_subscribe p a member of key (params: its
// eth_subscribe params, size the bytes it holds; init, when set, is run on
// the new member first): answered at once when the key is live, else
// waiting for the node's answer, the key subscribed upstream when it is
// not being subscribed yet.
func (c *Core) join(e *Effects, cl *client, key string, params []byte, size int, p router.Pending, init func(*member), now time.Time) *member {
	subID := c.cfg.NewSubscriptionID()
	mem := c.subs.attach(key, append([]byte(nil), params...), cl, subID)
	if init != nil {
		init(mem)
	}
	mem.keyBytes = size
	c.hold(cl, size)
	if cl.subs == nil {
		cl.subs = make(map[string]*member)
	}
	cl.subs[subID] = mem
	c.subGauges()
	switch mem.sh.state {
	case keyLive:
		c.answerSubscribe(e, cl, &p, mem, now)
		return mem
	case keySubscribing, keyResubscribing:
		c.wait(cl, mem, p)
		return mem
	}
	// idle or failed
	c.wait(cl, mem, p)
	if c.gen != 0 {
		c.subscribeUpstream(e, mem.sh, now)
	}
	// With no upstream, the key is subscribed as soon as one is up
	// (resubscribe); the client waits until then or its deadline.
	return mem
}

// wait records a client eth_subscribe that waits for the node's answer. It
// counts as in flight for its client like any request, so limits, Shutdown
// and the IPC close after a parse error wait for its answer.
func (c *Core) wait(cl *client, mem *member, p router.Pending) {
	c.subs.wait(mem, p)
	c.started(cl, 0)
}

// subscribeUpstream sends eth_subscribe for sh on the current connection,
// as muxd's own request.
func (c *Core) subscribeUpstream(e *Effects, sh *shared, now time.Time) {
	// A new logs key asks where it starts first (gapfill.Expect).
	c.applyGap(e, c.gap.Expect(sh.key, now), nil, now)
	c.subs.subscribing(sh, c.internalRequest(e, router.KindSubscribe, methodSubscribe, sh.params, sh.key, time.Time{}, now))
}

// unsubscribeUpstream sends eth_unsubscribe for the node's id.
func (c *Core) unsubscribeUpstream(e *Effects, upstreamID string, now time.Time) {
	if c.gen == 0 {
		return // the subscription died with the connection
	}
	params := append(append([]byte{'['}, upstreamID...), ']')
	c.internalRequest(e, router.KindUnsubscribe, methodUnsubscribe, params, "", time.Time{}, now)
}

// internalRequest sends a request muxd makes on its own behalf and returns
// its upstream id. eth_subscribe and eth_unsubscribe have no deadline
// (zero): for eth_subscribe the clients waiting on it time out on their
// own (expireWaiters), but muxd keeps waiting for the node's answer, so
// that a late answer still makes the key live (or is unsubscribed) instead
// of leaving an upstream subscription nobody knows about.
func (c *Core) internalRequest(e *Effects, kind router.Kind, method string, params []byte, key string, deadline, now time.Time) uint64 {
	uid := c.reqs.Next()
	c.enqueue(e, nil, uid, router.Pending{
		Client:   router.Internal,
		Method:   method,
		Sent:     now,
		Deadline: deadline,
		Frame:    router.AppendRequest(nil, uid, method, params),
		Kind:     kind,
		Key:      key,
	}, now)
	return uid
}

// errSubscriptionIDInUse is what the clients waiting on an eth_subscribe
// get when the node answers it with the id of another live subscription.
var errSubscriptionIDInUse = router.ErrorUnavailable.Because("upstream gave the subscription an id already in use")

// subscriptionIDInUse fails the eth_subscribe uid for key, which the node
// answered with the id of another key's live subscription on this
// connection: a node bug, after which the node's pushes under that id
// cannot be told apart. The key live first keeps the id, so that no client
// gets another subscription's pushes; this one's waiters get
// errSubscriptionIDInUse, and nothing is unsubscribed (that would end the
// other one).
func (c *Core) subscriptionIDInUse(e *Effects, key string, uid uint64, now time.Time) {
	waiters := c.subs.failed(key, uid)
	if c.subs.byKey[key] == nil {
		c.gap.Forget(key)
	}
	e.noteLimited(LimitedSubscriptionIDInUse, "upstream gave a new subscription the id of another live one: refused", "key", logKey(key), "key_bytes", len(key), "waiters", len(waiters))
	for _, mem := range waiters {
		c.dropSub(mem.cl, mem)
		c.answerOwn(e, mem.cl, mem.req, errSubscriptionIDInUse, now)
		c.ended(mem.cl, 0)
	}
	c.subGauges()
}

// subscribeAnswered handles the node's answer m to muxd's eth_subscribe
// uid for p.Key.
func (c *Core) subscribeAnswered(e *Effects, frame []byte, m *router.Message, uid uint64, p *router.Pending, now time.Time) {
	if m.Result.Present() && frame[m.Result.Off] == '"' {
		upID := string(m.Result.In(frame))
		if c.subs.byUpstream[upID] != nil {
			// Another key's live id, or this key's own returned again
			// to a stale attempt: either way it must not be
			// unsubscribed.
			c.subscriptionIDInUse(e, p.Key, uid, now)
			return
		}
		sh := c.subs.subscribed(p.Key, uid, upID)
		if sh == nil {
			// Everyone left while it was being set up, or the key is
			// live already under another upstream id.
			c.unsubscribeUpstream(e, upID, now)
			return
		}
		for i := 0; i < len(sh.members); i++ {
			mem := sh.members[i]
			if req := c.subs.answered(mem); req != nil {
				c.answerSubscribe(e, mem.cl, req, mem, now)
				c.ended(mem.cl, 0) // a waiter holds no upstream frame of its own
			}
		}
		c.subGauges()
		c.applyGap(e, c.gap.Live(p.Key, now), nil, now)
		c.historyLive(e, sh, now)
		return
	}
	// An error (or a result that is no subscription id): each waiter gets
	// the node's answer as it came, under its own id.
	waiters := c.subs.failed(p.Key, uid)
	if c.subs.byKey[p.Key] == nil {
		c.gap.Forget(p.Key) // gone: what Expect started for it too
	}
	// A client chooses the params, and so this line and its length.
	e.noteLimited(LimitedSubscriptionRefused, "upstream refused a subscription", "key", logKey(p.Key), "key_bytes", len(p.Key), "waiters", len(waiters))
	elem := frame[m.Start:m.End]
	code := responseCode(frame, m)
	for _, mem := range waiters {
		c.dropSub(mem.cl, mem)
		resp := router.AppendSpliced(nil, elem, rebase(m.ID, m.Start), mem.req.ID)
		c.answer(e, mem.cl, mem.req, Delivery{Msg: resp}, code, now)
		c.ended(mem.cl, 0)
	}
	c.subGauges()
}

// answerSubscribe sends a client its subscription id and lets pushes reach
// it from then on; in a batch, from when the array is sent.
func (c *Core) answerSubscribe(e *Effects, cl *client, p *router.Pending, mem *member, now time.Time) {
	resp := router.AppendResultResponse(nil, p.ID, []byte(mem.id))
	if p.Batch != nil {
		p.Batch.Subs = append(p.Batch.Subs, mem.id)
	}
	c.answer(e, cl, p, Delivery{Msg: resp}, 0, now)
	if p.Batch == nil {
		c.activate(e, mem)
	}
}

// activate lets pushes reach mem from now on, once its answer is queued;
// pushes held for it until now go first.
func (c *Core) activate(e *Effects, mem *member) {
	held := c.subs.ready(mem)
	for _, msg := range held {
		e.deliver(mem.cl, Delivery{Msg: msg, Push: true})
	}
	c.obs.Pushed(len(held))
}

func rebase(sp router.Span, start int) router.Span {
	sp.Off -= start
	return sp
}

// unsubscribe handles a client's eth_unsubscribe: only its own
// subscriptions, and the upstream one only with its key's last member.
func (c *Core) unsubscribe(e *Effects, cl *client, frame []byte, m *router.Message, p router.Pending) []byte {
	if cl.http {
		return c.errorBytes(p.Method, p.ID, router.ErrorNoNotifications)
	}
	var args []string
	if !m.Params.Present() || json.Unmarshal(m.Params.In(frame), &args) != nil || len(args) != 1 {
		return c.errorBytes(p.Method, p.ID, router.RPCError{Code: -32602, Message: "invalid params", Reason: "eth_unsubscribe takes one subscription id"})
	}
	// muxd's ids are lowercase hex; a client that upper-cased one still
	// means it.
	subID, _ := json.Marshal(strings.ToLower(args[0]))
	result := "false"
	// A subscription whose eth_subscribe still waits for the node's
	// answer has not been handed to the client: it is not the client's to
	// cancel yet (detaching it would leave that eth_subscribe unanswered).
	if mem, ok := cl.subs[string(subID)]; ok && mem.req == nil {
		c.detach(e, cl, string(subID), p.Sent)
		result = "true"
	}
	c.obs.Answered(p.Method, 0, OutcomeResult, -1)
	return router.AppendResultResponse(nil, p.ID, []byte(result))
}

// dropSub forgets mem as one of cl's subscriptions, and the bytes it held.
func (c *Core) dropSub(cl *client, mem *member) {
	if cl.subs[mem.id] == mem {
		delete(cl.subs, mem.id)
		c.hold(cl, -mem.keyBytes)
	}
}

// detach removes one of cl's subscriptions, unsubscribing upstream when it
// was the key's last.
func (c *Core) detach(e *Effects, cl *client, subID string, now time.Time) {
	if mem := cl.subs[subID]; mem != nil {
		c.dropSub(cl, mem)
	}
	mem, last, unsub := c.subs.detach(subID)
	if mem != nil {
		c.endHistory(mem)
	}
	if mem != nil && last {
		c.gap.Forget(mem.sh.key)
	}
	if unsub != "" {
		c.unsubscribeUpstream(e, unsub, now)
	}
	c.subGauges()
}

// resubscribe subscribes upstream every key that has holders but no
// upstream subscription: after a reconnect, and for keys whose client asked
// while no upstream was up. Client ids do not change.
func (c *Core) resubscribe(e *Effects, now time.Time) {
	for _, sh := range c.subs.idle() {
		c.subscribeUpstream(e, sh, now)
	}
}

// push is layer 2: a push for a live key goes to every ready member of
// it, as one shared message with each member's id at at. The gap machine
// (backfill.go) decides first whether it goes now, waits behind a
// backfill, or is a duplicate.
func (c *Core) push(e *Effects, frame []byte, m *router.Message, now time.Time) {
	if !m.Subscription.Present() {
		c.drop(e, DropUnexpected, "upstream push without params.subscription", "gen", c.gen)
		return
	}
	sh := c.subs.byUpstream[string(m.Subscription.In(frame))]
	if sh == nil {
		c.drop(e, DropUnknownSubscription, "upstream push for a subscription nobody holds", "gen", c.gen)
		return
	}
	if isNewHeadsKey(sh.key) && (len(c.coalesce) > 0 || c.cache.max > 0 || c.cfg.ReportHeads) {
		c.headPushed(e, m.Params.In(frame), now)
	}
	if !isNewHeadsKey(sh.key) && len(c.coalesce) > 0 {
		// A log or a receipt of a new block (logs, geth's
		// transactionReceipts) tells its subscribers of the block.
		c.heads.sawBlockNumber(memberValue(m.Params.In(frame), `"blockNumber":`, false))
	}
	elem := frame[m.Start:m.End]
	live := sharedPush{elem, rebase(m.Subscription, m.Start), true, m.Start}
	if c.gap.Passes(sh.key) {
		// newPendingTransactions and the like, the busiest pushes: no
		// gap rules, straight to the members.
		c.fanout(e, sh, live)
	} else {
		c.applyGap(e, c.gap.Push(sh.key, m.Params.In(frame), now), &live, now)
	}
	if len(c.hist) > 0 {
		c.pushHistory(e, sh, m.Params.In(frame), &live, now)
	}
}

// sharedPush is a push as it goes to every member of a key: msg with the
// subscription id at at. borrowed: msg lies in the event's frame, at off.
type sharedPush struct {
	msg      []byte
	at       router.Span
	borrowed bool
	off      int
}

// fanout queues push p for every member of sh, each under its own id. A
// member whose answer has not gone out yet gets it held, in a copy of its
// own, until it has.
func (c *Core) fanout(e *Effects, sh *shared, p sharedPush) {
	n := 0
	for _, mem := range sh.members {
		if mem.hist != nil {
			continue // its own key's deliveries reach it (history.go)
		}
		if c.pushTo(e, mem, p) {
			n++
		}
	}
	c.obs.Pushed(n)
}

// pushTo queues push p for mem under its id, or holds a copy of it while
// mem's answer has not gone out; it reports whether p was delivered (not
// held, not refused). Held pushes count against the client's queue bound
// like queued ones: a batch kept open long cannot pile them up without end.
func (c *Core) pushTo(e *Effects, mem *member, p sharedPush) bool {
	if !mem.ready {
		size := len(p.msg) - p.at.Len + len(mem.id)
		if mem.heldBytes+size > c.cfg.HeldPushBytes {
			e.Slow = append(e.Slow, mem.cl.id)
			return false
		}
		mem.held = append(mem.held, router.AppendSpliced(make([]byte, 0, size), p.msg, p.at, mem.idb))
		mem.heldBytes += size
		return false
	}
	e.deliver(mem.cl, Delivery{Msg: p.msg, At: p.at, ID: mem.idb, Shared: true, Borrowed: p.borrowed, Off: p.off, Push: true})
	return true
}

// subGauges reports the subscription counts.
func (c *Core) subGauges() {
	c.obs.Subscriptions(c.subs.counts())
}

// maxLoggedKey bounds a subscription key in a log line: a logs filter may
// name many addresses, and a client chooses the params.
const maxLoggedKey = 256

// logKey is key as a log line gives it, cut to maxLoggedKey bytes.
func logKey(key string) string {
	if len(key) <= maxLoggedKey {
		return key
	}
	return key[:maxLoggedKey] + "…"
}
