package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// ErrSubscribeParams means eth_subscribe params muxd cannot key: not an
// array, empty, or not starting with the subscription name.
var ErrSubscribeParams = errors.New("eth_subscribe params must be an array starting with the subscription name")

// SubState is where a shared upstream subscription stands.
type SubState uint8

const (
	SubIdle        SubState = iota // not subscribed upstream (no connection yet, or lost)
	SubSubscribing                 // eth_subscribe sent, answer awaited
	SubLive                        // subscribed; Upstream holds the node's id
)

// Member is one client's hold on a shared subscription.
type Member struct {
	Client ClientID
	ID     string // the client's subscription id as a JSON string, quotes included
	// Ready is set once the client has been sent its subscription id;
	// pushes go only to ready members, so none can overtake the answer.
	Ready bool
	// Held are pushes (already rewritten to ID) that came while the
	// member was not ready, as when its eth_subscribe was answered but
	// the rest of its batch is still awaited. SetReady hands them over,
	// to be sent right after the answer, as geth does.
	Held [][]byte
	// HeldBytes is the size of Held.
	HeldBytes int
}

// Waiter is a client eth_subscribe waiting for the upstream's answer.
type Waiter struct {
	Member
	Request Pending // the client's request, to answer
}

// Shared is one upstream subscription shared by every client that asked for
// the same key.
type Shared struct {
	Key      string
	Params   []byte // eth_subscribe params as the first client wrote them
	State    SubState
	Upstream string // the node's subscription id as a JSON string; "" unless live
	// Attempt is the upstream request id of the eth_subscribe in flight
	// for this key (state SubSubscribing), so that the answer to an older
	// attempt is never taken for the current one.
	Attempt uint64
	Members []Member // every client subscription on this key, waiters included
	Waiters []Waiter // answers owed once the upstream answers
}

// Subscriptions is the second routing table: client subscription id <->
// upstream subscription id <-> subscription key, with the members of each
// key. It is not safe for concurrent use.
type Subscriptions struct {
	byKey      map[string]*Shared
	byUpstream map[string]*Shared // upstream id (JSON string) -> shared
	byClient   map[string]*Shared // client subscription id (JSON string) -> shared
	owner      map[string]ClientID
}

// NewSubscriptions returns an empty table.
func NewSubscriptions() *Subscriptions {
	return &Subscriptions{
		byKey:      make(map[string]*Shared),
		byUpstream: make(map[string]*Shared),
		byClient:   make(map[string]*Shared),
		owner:      make(map[string]ClientID),
	}
}

// Attach adds a client subscription with id subID (a JSON string) to key,
// creating the shared entry (state SubIdle) when it is the first. It returns
// the shared entry; the caller looks at its State to decide whether to answer
// now (SubLive), wait (SubSubscribing) or subscribe upstream (SubIdle).
func (t *Subscriptions) Attach(key string, params []byte, c ClientID, subID string) *Shared {
	sh := t.byKey[key]
	if sh == nil {
		sh = &Shared{Key: key, Params: params}
		t.byKey[key] = sh
	}
	sh.Members = append(sh.Members, Member{Client: c, ID: subID})
	t.byClient[subID] = sh
	t.owner[subID] = c
	return sh
}

// SetReady marks subscription subID as answered, so pushes reach it, and
// returns the pushes held for it until now, to be sent after the answer.
func (t *Subscriptions) SetReady(subID string) (held [][]byte) {
	sh := t.byClient[subID]
	if sh == nil {
		return nil
	}
	for i := range sh.Members {
		if m := &sh.Members[i]; m.ID == subID {
			m.Ready = true
			held, m.Held, m.HeldBytes = m.Held, nil, 0
			return held
		}
	}
	return nil
}

// Key returns the shared entry of key, or nil.
func (t *Subscriptions) Key(key string) *Shared { return t.byKey[key] }

// Subscribed records the node's id for key and makes it live. It returns
// the waiters to answer (their success), and nil, false when nobody holds
// the key any more, or when it is live already (the key was dropped and
// created again while an earlier eth_subscribe for it was unanswered, so two
// went out): the caller should unsubscribe the id upstream.
//
// attempt is the upstream request id the answer came for; an answer to any
// other attempt than the current one is refused the same way.
func (t *Subscriptions) Subscribed(key string, attempt uint64, upstreamID string) ([]Waiter, bool) {
	sh := t.byKey[key]
	if sh == nil || len(sh.Members) == 0 || sh.State == SubLive || sh.Attempt != attempt {
		return nil, false
	}
	sh.State = SubLive
	sh.Attempt = 0
	sh.Upstream = upstreamID
	t.byUpstream[upstreamID] = sh
	w := sh.Waiters
	sh.Waiters = nil
	return w, true
}

// Failed records that subscribing key upstream failed. The waiters are
// returned to be answered with the error, and their members removed; members
// that were live before (a resubscribe after reconnect) stay, and the key
// goes back to SubIdle to be tried on the next connection. A failure of an
// attempt that is not the current one changes nothing.
func (t *Subscriptions) Failed(key string, attempt uint64) []Waiter {
	sh := t.byKey[key]
	if sh == nil || sh.Attempt != attempt {
		return nil
	}
	sh.Attempt = 0
	w := sh.Waiters
	sh.Waiters = nil
	for _, x := range w {
		t.removeMember(sh, x.ID)
	}
	sh.State = SubIdle
	if len(sh.Members) == 0 {
		delete(t.byKey, key)
	}
	return w
}

// Wait records a waiter on key (state SubSubscribing).
func (t *Subscriptions) Wait(key string, w Waiter) {
	if sh := t.byKey[key]; sh != nil {
		sh.Waiters = append(sh.Waiters, w)
	}
}

// Push returns the shared subscription a push for upstream id raw (the JSON
// string from params.subscription) belongs to, or nil. It does not allocate.
func (t *Subscriptions) Push(raw []byte) *Shared { return t.byUpstream[string(raw)] }

// Owner returns the client holding subscription id subID.
func (t *Subscriptions) Owner(subID string) (ClientID, bool) {
	c, ok := t.owner[subID]
	return c, ok
}

// Detach removes client subscription subID. When it was the key's last
// member the key is removed, and unsubscribe is the node's id to
// unsubscribe ("" when it was not live).
func (t *Subscriptions) Detach(subID string) (sh *Shared, last bool, unsubscribe string) {
	sh = t.byClient[subID]
	if sh == nil {
		return nil, false, ""
	}
	t.removeMember(sh, subID)
	for i, w := range sh.Waiters {
		if w.ID == subID {
			sh.Waiters = append(sh.Waiters[:i], sh.Waiters[i+1:]...)
			break
		}
	}
	if len(sh.Members) > 0 {
		return sh, false, ""
	}
	delete(t.byKey, sh.Key)
	if sh.State == SubLive {
		delete(t.byUpstream, sh.Upstream)
		unsubscribe = sh.Upstream
	}
	return sh, true, unsubscribe
}

func (t *Subscriptions) removeMember(sh *Shared, subID string) {
	delete(t.byClient, subID)
	delete(t.owner, subID)
	for i, m := range sh.Members {
		if m.ID == subID {
			sh.Members = append(sh.Members[:i], sh.Members[i+1:]...)
			return
		}
	}
}

// Lost marks every subscription not subscribed, as when the upstream
// connection is gone; the node's ids are forgotten.
func (t *Subscriptions) Lost() {
	clear(t.byUpstream)
	for _, sh := range t.byKey {
		sh.State = SubIdle
		sh.Upstream = ""
		sh.Attempt = 0
	}
}

// Idle returns the keys that have members but no upstream subscription,
// sorted, for resubscribing.
func (t *Subscriptions) Idle() []*Shared {
	var out []*Shared
	for _, sh := range t.byKey {
		if sh.State == SubIdle && len(sh.Members) > 0 {
			out = append(out, sh)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// ExpireWaiters removes waiters whose request deadline is not after now
// and returns them, to be answered with a timeout.
func (t *Subscriptions) ExpireWaiters(now time.Time) []Waiter {
	var out []Waiter
	for _, sh := range t.byKey {
		if len(sh.Waiters) == 0 {
			continue
		}
		kept := sh.Waiters[:0]
		for _, w := range sh.Waiters {
			if w.Request.Deadline.IsZero() || w.Request.Deadline.After(now) {
				kept = append(kept, w)
				continue
			}
			out = append(out, w)
			t.removeMember(sh, w.ID)
		}
		sh.Waiters = kept
		if len(sh.Members) == 0 && sh.State != SubLive {
			delete(t.byKey, sh.Key)
		}
	}
	return out
}

// Counts returns the number of shared (upstream) subscriptions that are
// live and the number of client subscriptions.
func (t *Subscriptions) Counts() (upstream, clients int) {
	return len(t.byUpstream), len(t.byClient)
}

// SubscriptionKey canonicalises eth_subscribe params into the key under
// which identical subscriptions share one upstream subscription. Member
// order in objects does not matter (keys are sorted), and for "logs" the hex
// of addresses and topics is compared without regard to case, since the
// node parses it as numbers. Everything else is compared exactly: when in
// doubt, two subscriptions are kept apart.
func SubscriptionKey(params []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.UseNumber()
	var v []any
	if err := dec.Decode(&v); err != nil || len(v) == 0 {
		return "", ErrSubscribeParams
	}
	name, ok := v[0].(string)
	if !ok || name == "" {
		return "", ErrSubscribeParams
	}
	if name == "logs" && len(v) > 1 {
		if f, ok := v[1].(map[string]any); ok {
			for _, k := range []string{"address", "topics"} {
				if x, ok := f[k]; ok {
					f[k] = lowerHex(x)
				}
			}
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("subscription key: %w", err)
	}
	return string(b), nil
}

func lowerHex(x any) any {
	switch x := x.(type) {
	case string:
		if strings.HasPrefix(x, "0x") || strings.HasPrefix(x, "0X") {
			return strings.ToLower(x)
		}
		return x
	case []any:
		for i := range x {
			x[i] = lowerHex(x[i])
		}
		return x
	}
	return x
}
