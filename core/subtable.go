package core

import (
	"sort"
	"time"

	"github.com/muxd/muxd/router"
)

// keyState is where one subscription key stands with the node. Its
// transitions, each one event:
//
//	(new)          -> idle           a client subscribes while no upstream is up
//	idle, failed   -> subscribing    eth_subscribe sent (no member has had pushes yet)
//	idle, failed   -> resubscribing  eth_subscribe sent for members that had pushes (after a reconnect)
//	(re)subscribing -> live          the node answered with its subscription id
//	subscribing    -> (gone)         the node refused it: the waiters get its error
//	resubscribing  -> failed         the node refused it: waiters get its error, the others stay
//	subscribing    -> failed         the same, when a member's answer went out in a batch still open
//	any            -> idle           the connection is lost (nothing is live any more)
//	live           -> unsubscribing  its last member left: eth_unsubscribe sent
//	other          -> (gone)         its last member left
//
// A key leaves the table when it is gone or unsubscribing; the answer to an
// eth_subscribe of a key that has gone (or that came back under a later
// attempt) is unsubscribed at once.
type keyState uint8

const (
	keyIdle keyState = iota
	keySubscribing
	keyResubscribing
	keyLive
	keyFailed
	keyUnsubscribing
)

func (s keyState) String() string {
	return [...]string{"idle", "subscribing", "resubscribing", "live", "failed", "unsubscribing"}[s]
}

// shared is one upstream subscription shared by every client that asked for
// the same key.
type shared struct {
	key      string
	params   []byte // eth_subscribe params as the first client wrote them
	state    keyState
	upstream string // the node's subscription id as a JSON string, while live
	// attempt is the upstream id of the eth_subscribe in flight while
	// (re)subscribing, so that the answer to an older attempt is never
	// taken for the current one.
	attempt uint64
	members []*member // in no particular order (removal swaps with the last)
	waiters int       // members whose eth_subscribe awaits the node's answer
}

// member is one client's subscription on a key.
type member struct {
	sh  *shared
	cl  *client
	id  string // the client's subscription id, a JSON string
	idb []byte // id as bytes, for the deliveries of pushes
	idx int    // position in sh.members
	// ready is set once the client has been sent its subscription id:
	// pushes reach only ready members, so none can overtake the answer.
	ready bool
	// held are pushes (already spliced to id) that came before ready, as
	// when the eth_subscribe is answered but the rest of its batch is
	// still awaited; they go right after the answer, as geth sends them.
	held      [][]byte
	heldBytes int
	// keyBytes is what the subscription holds of its params (its copy and
	// its key), counted in its client's held bytes while it lives.
	keyBytes int
	// req is the client's eth_subscribe while it waits for the node's
	// answer; nil otherwise.
	req *router.Pending
	// hist is set for a history subscription (history.go): it gets its
	// own key's deliveries, not the key's fanout.
	hist *histSub
}

// subTable is the second routing table: client subscription id <-> key <->
// the node's subscription id.
type subTable struct {
	byKey      map[string]*shared
	byUpstream map[string]*shared // live keys by the node's id
	byClient   map[string]*member
	waiting    map[*shared]struct{} // keys with waiters
}

func newSubTable() *subTable {
	return &subTable{
		byKey:      make(map[string]*shared),
		byUpstream: make(map[string]*shared),
		byClient:   make(map[string]*member),
		waiting:    make(map[*shared]struct{}),
	}
}

// attach adds client subscription subID of cl to key, creating the key
// (idle) when it is the first. The caller looks at the key's state to
// answer now (live), wait, or subscribe upstream.
func (t *subTable) attach(key string, params []byte, cl *client, subID string) *member {
	sh := t.byKey[key]
	if sh == nil {
		sh = &shared{key: key, params: params}
		t.byKey[key] = sh
	}
	m := &member{sh: sh, cl: cl, id: subID, idb: []byte(subID), idx: len(sh.members)}
	sh.members = append(sh.members, m)
	t.byClient[subID] = m
	return m
}

// wait makes m wait for the node's answer to its key's eth_subscribe; req
// is the client's request, answered then.
func (t *subTable) wait(m *member, req router.Pending) {
	m.req = &req
	m.sh.waiters++
	t.waiting[m.sh] = struct{}{}
}

// subscribing records that eth_subscribe for sh went upstream under id
// attempt: idle or failed -> (re)subscribing.
func (t *subTable) subscribing(sh *shared, attempt uint64) {
	sh.state = keySubscribing
	for _, m := range sh.members {
		if m.ready {
			sh.state = keyResubscribing
			break
		}
	}
	sh.attempt = attempt
}

// subscribed records the node's id for key, answered to attempt:
// (re)subscribing -> live. It returns the key, whose waiting members the
// caller answers (answered), or nil when the key has gone or the answer is
// not for its current attempt: the caller should unsubscribe the id.
func (t *subTable) subscribed(key string, attempt uint64, upstreamID string) *shared {
	sh := t.byKey[key]
	if sh == nil || (sh.state != keySubscribing && sh.state != keyResubscribing) || sh.attempt != attempt {
		return nil
	}
	sh.state, sh.attempt, sh.upstream = keyLive, 0, upstreamID
	t.byUpstream[upstreamID] = sh
	return sh
}

// answered takes m's waiting request, once it has been answered.
func (t *subTable) answered(m *member) *router.Pending {
	req := m.req
	if req == nil {
		return nil
	}
	m.req = nil
	if m.sh.waiters--; m.sh.waiters == 0 {
		delete(t.waiting, m.sh)
	}
	return req
}

// failed records that the node refused key's eth_subscribe of attempt. The
// waiting members are removed and returned, to be answered with the node's
// error; members that had pushes stay (resubscribing -> failed), and the
// key is tried again on the next connection. A key left with no member is
// gone. An answer for another attempt changes nothing (nil).
func (t *subTable) failed(key string, attempt uint64) []*member {
	sh := t.byKey[key]
	if sh == nil || (sh.state != keySubscribing && sh.state != keyResubscribing) || sh.attempt != attempt {
		return nil
	}
	var out []*member
	for i := 0; i < len(sh.members); {
		if m := sh.members[i]; m.req != nil {
			out = append(out, m)
			t.remove(m)
			continue // the last member moved to i
		}
		i++
	}
	sh.attempt = 0
	sh.state = keyFailed
	if len(sh.members) == 0 {
		delete(t.byKey, key)
	}
	return out
}

// ready marks m answered, so that pushes reach it, and returns the pushes
// held for it until now, to be sent after the answer.
func (t *subTable) ready(m *member) [][]byte {
	m.ready = true
	held := m.held
	m.held, m.heldBytes = nil, 0
	return held
}

// detach removes client subscription subID. When it was its key's last
// member the key is gone, and unsubscribe is the node's id to unsubscribe
// when the key was live (live -> unsubscribing).
func (t *subTable) detach(subID string) (m *member, last bool, unsubscribe string) {
	m = t.byClient[subID]
	if m == nil {
		return nil, false, ""
	}
	sh := m.sh
	t.remove(m)
	if len(sh.members) > 0 {
		return m, false, ""
	}
	delete(t.byKey, sh.key)
	if sh.state == keyLive {
		delete(t.byUpstream, sh.upstream)
		unsubscribe = sh.upstream
		sh.state = keyUnsubscribing
	}
	return m, true, unsubscribe
}

// remove takes m out of its key and the table, in O(1). A waiting member
// keeps its req, for the caller to answer.
func (t *subTable) remove(m *member) {
	sh := m.sh
	delete(t.byClient, m.id)
	if m.req != nil { // left for the caller to answer
		if sh.waiters--; sh.waiters == 0 {
			delete(t.waiting, sh)
		}
	}
	last := len(sh.members) - 1
	moved := sh.members[last]
	sh.members[m.idx] = moved
	moved.idx = m.idx
	sh.members[last] = nil
	sh.members = sh.members[:last]
}

// lost makes every key idle, as when the connection is gone: the node's
// ids are forgotten and in-flight attempts no longer count.
func (t *subTable) lost() {
	clear(t.byUpstream)
	for _, sh := range t.byKey {
		sh.state, sh.upstream, sh.attempt = keyIdle, "", 0
	}
}

// idle returns the keys with members and no upstream subscription asked
// for, sorted, for subscribing on a new connection.
func (t *subTable) idle() []*shared {
	var out []*shared
	for _, sh := range t.byKey {
		if sh.state == keyIdle && len(sh.members) > 0 {
			out = append(out, sh)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// expireWaiters removes the waiting members whose request deadline is not
// after now and appends them to dst. A key left with no member and not live
// is gone.
func (t *subTable) expireWaiters(now time.Time, dst []*member) []*member {
	for sh := range t.waiting {
		for i := 0; i < len(sh.members); {
			m := sh.members[i]
			if m.req == nil || m.req.Deadline.IsZero() || m.req.Deadline.After(now) {
				i++
				continue
			}
			dst = append(dst, m)
			t.remove(m)
		}
		if len(sh.members) == 0 && sh.state != keyLive {
			delete(t.byKey, sh.key)
		}
	}
	return dst
}

// counts returns the number of live upstream subscriptions and of client
// subscriptions.
func (t *subTable) counts() (upstream, clients int) {
	return len(t.byUpstream), len(t.byClient)
}
