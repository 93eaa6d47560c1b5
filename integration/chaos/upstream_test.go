package chaos

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/muxd/muxd/internal/testnode"
)

// chaosUpstream scripts the shared fake node to misbehave in every way a
// shared socket must survive:
//
//   - every request is answered with {"echo": params, "m": method}, so an
//     answer routed to the wrong request is visible;
//   - each answer is delayed 0-20 ms on its own goroutine, so answers come
//     back out of order;
//   - the socket is cut (Drop) 200-600 ms after it was accepted, and the
//     next connection is accepted as usual;
//   - now and then an answer is sent twice, an answer with an id nobody
//     sent is sent, and an {"id":null,"error":...} object is sent;
//   - eth_subscribe gets a subscription id that is new on every connection,
//     and every live subscription is pushed every ~20 ms with a counter and
//     the subscription's params.
//
// A client batch reaches it as one JSON array (muxd keeps the client's
// order); half the arrays are answered element by element, out of order
// like single requests, the other half as one array in reverse order, now
// and then sent twice. eth_subscribe or eth_unsubscribe inside an array is
// a protocol violation (muxd sends its own alone) and recorded as a failure.
type chaosUpstream struct {
	*testnode.Node

	requests   atomic.Int64
	notifs     atomic.Int64
	dups       atomic.Int64
	unknownIDs atomic.Int64
	nullIDs    atomic.Int64
	pushes     atomic.Int64
	subscribes atomic.Int64
	subRecv    atomic.Int64
	unsubs     atomic.Int64
	arrays     atomic.Int64 // client batches received as one array

	mu       sync.Mutex
	failures []string
}

func (u *chaosUpstream) fail(format string, args ...any) {
	u.mu.Lock()
	if len(u.failures) < 50 {
		u.failures = append(u.failures, fmt.Sprintf(format, args...))
	}
	u.mu.Unlock()
}

// Failures lists what the node saw muxd do wrong: besides what fail
// recorded, frames that were not JSON (answered -32700 and the socket
// closed, as geth does) and arrays that held no message.
func (u *chaosUpstream) Failures() []string {
	c := u.Counts()
	if c.Malformed > 0 {
		u.fail("upstream received %d frames of invalid JSON from muxd", c.Malformed)
	}
	if empty := int64(c.Batches-c.Malformed) - u.arrays.Load(); empty > 0 {
		u.fail("upstream received %d empty arrays from muxd", empty)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.failures...)
}

func newChaosUpstream(t *testing.T) *chaosUpstream {
	u := &chaosUpstream{Node: testnode.New(t)}
	u.SetHandler(u.handle)
	u.SetArrayHandler(u.handleArray)
	u.SetOnConnect(u.misbehave)
	return u
}

// misbehave cuts the connection at a random moment and pushes every live
// subscription of it every ~20 ms until then.
func (u *chaosUpstream) misbehave(fc *testnode.Conn) {
	life := 200*time.Millisecond + rand.N(400*time.Millisecond)
	dropT := time.AfterFunc(life, fc.Drop)
	defer dropT.Stop()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	var counter int64
	for {
		select {
		case <-fc.Done():
			return
		case <-t.C:
		}
		for id, params := range fc.LiveSubs() {
			counter++
			u.pushes.Add(1)
			_ = fc.Push(id, fmt.Sprintf(`{"n":%d,"conn":%d,"params":%s}`, counter, fc.N, params))
		}
	}
}

// handle takes a single message.
func (u *chaosUpstream) handle(fc *testnode.Conn, r testnode.Req) {
	if r.IsNotification() {
		u.notifs.Add(1)
		return
	}
	u.requests.Add(1)
	u.answerLater(fc, r)
}

// answerLater answers call r after a short random delay, on its own
// goroutine, so that answers come back out of order.
func (u *chaosUpstream) answerLater(fc *testnode.Conn, r testnode.Req) {
	if r.Method == "eth_subscribe" {
		u.subRecv.Add(1)
	}
	delay := rand.N(20 * time.Millisecond)
	u.Go(func() {
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-fc.Done():
				t.Stop()
				return
			}
		}
		u.answer(fc, r)
	})
}

// handleArray takes a client batch as muxd sends it.
func (u *chaosUpstream) handleArray(fc *testnode.Conn, reqs []testnode.Req) {
	u.arrays.Add(1)
	var calls []testnode.Req
	for _, r := range reqs {
		if r.Method == "eth_subscribe" || r.Method == "eth_unsubscribe" {
			u.fail("upstream received %s inside an array: %.200s", r.Method, r.Raw)
			return
		}
		if r.IsNotification() {
			u.notifs.Add(1)
			continue
		}
		u.requests.Add(1)
		calls = append(calls, r)
	}
	if rand.N(2) == 0 {
		for _, r := range calls {
			u.answerLater(fc, r)
		}
		return
	}
	u.Go(func() {
		parts := make([][]byte, 0, len(calls))
		for i := len(calls) - 1; i >= 0; i-- {
			parts = append(parts, chaosAnswer(calls[i]))
		}
		if len(parts) == 0 {
			return
		}
		arr := testnode.ArrayFrame(parts)
		_ = fc.Write(arr)
		if rand.N(100) < 3 {
			u.dups.Add(1)
			_ = fc.Write(arr) // the same array twice
		}
	})
}

// chaosAnswer is the answer to an ordinary call: its params and method.
func chaosAnswer(r testnode.Req) []byte {
	params := r.Params
	if params == nil {
		params = json.RawMessage("null")
	}
	method, _ := json.Marshal(r.Method)
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":{"echo":%s,"m":%s}}`, r.ID, params, method)
}

// answer answers call r. Write errors mean the socket is gone: the
// connection's reader ends on its own.
func (u *chaosUpstream) answer(fc *testnode.Conn, r testnode.Req) {
	switch r.Method {
	case "eth_subscribe":
		// The subscription is live only once its id has been written: no
		// push can overtake the answer.
		u.subscribes.Add(1)
		fc.Subscribe(r)
		return
	case "eth_unsubscribe":
		u.unsubs.Add(1)
		fc.Answer(r)
		return
	}
	resp := chaosAnswer(r)
	_ = fc.Write(resp)
	switch n := rand.N(100); {
	case n < 3:
		u.dups.Add(1)
		_ = fc.Write(resp) // the same answer twice
	case n < 5:
		u.unknownIDs.Add(1)
		_ = fc.Write(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"result":{"echo":["stray"],"m":"stray"}}`, 1<<40+rand.N(1<<20)))
	case n < 7:
		u.nullIDs.Add(1)
		_ = fc.Write([]byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"chaos: invalid request"}}`))
	}
}
