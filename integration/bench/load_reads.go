package main

// Workload (h): many clients reacting to every new head with reads, against
// a node that takes its time (the upstream with -node-delay), counting the
// calls that reach the node.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// readsPerHead is how many reads each client sends on every head.
const readsPerHead = 3

// sameReads are the reads every client sends on every head in the first
// phase of (h): identical across clients.
var sameReads = [readsPerHead]struct{ method, params string }{
	{"eth_blockNumber", `[]`},
	{"eth_getBlockByNumber", `["latest",false]`},
	{"eth_chainId", `[]`},
}

// readsPhase is what the clients send on a head.
type readsPhase int32

const (
	phaseSame     readsPhase = iota // sameReads
	phaseDistinct                   // eth_getBalance of addresses of the client's own
)

// methods are the methods the phase sends: its upstream calls are the
// calls of these the node received.
func (p readsPhase) methods() []string {
	if p == phaseDistinct {
		return []string{"eth_getBalance"}
	}
	m := make([]string, 0, readsPerHead)
	for _, r := range sameReads {
		m = append(m, r.method)
	}
	return m
}

// read returns the method and params of client i's k-th read in the phase.
func (p readsPhase) read(i, k int) (method, params string) {
	if p == phaseDistinct {
		return "eth_getBalance", fmt.Sprintf(`["0x%040x","latest"]`, i*readsPerHead+k+1)
	}
	return sameReads[k].method, sameReads[k].params
}

// readsFigures are the figures of one (h) measurement: upstream calls per
// client call in each phase.
type readsFigures struct {
	same, distinct float64
}

// readsClient is one client's state, owned by its socket's reader
// goroutine.
type readsClient struct {
	head    uint64              // the last head pushed to it
	nextID  int64               // ids of its requests count up from 1
	pending map[int64][2]string // method and params by request id
	buf     []byte
}

// readsRun is one (h) measurement in progress.
type readsRun struct {
	clients  []readsClient
	phase    atomic.Int32  // a readsPhase; set while no head is being answered
	answered atomic.Int64  // answers read and found right, over all heads
	step     chan struct{} // nudged when answered reaches a multiple of a head's answers
	perHead  int64         // answers per head: clients x readsPerHead

	mu  sync.Mutex
	bad []error // answers not equal to the node's, and anything unexpected
}

func (r *readsRun) fail(err error) {
	r.mu.Lock()
	r.bad = append(r.bad, err)
	r.mu.Unlock()
	select {
	case r.step <- struct{}{}:
	default:
	}
}

func (r *readsRun) failures() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.bad) == 0 {
		return nil
	}
	return fmt.Errorf("%d wrong answers or messages, first: %w", len(r.bad), r.bad[0])
}

// onMsg handles a message read by client i: on a head, it sends the
// phase's reads; an answer it checks against the node's answer at that
// head, byte for byte.
func (r *readsRun) onMsg(i int, c *websocket.Conn, msg []byte) {
	cl := &r.clients[i]
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Result struct {
				Number string `json:"number"`
			} `json:"result"`
		} `json:"params"`
	}
	if err := json.Unmarshal(msg, &m); err != nil {
		r.fail(fmt.Errorf("client %d: undecodable message %.200s: %w", i, msg, err))
		return
	}
	if m.Method == "eth_subscription" {
		n, err := strconv.ParseUint(m.Params.Result.Number, 0, 64)
		if err != nil {
			r.fail(fmt.Errorf("client %d: head without a number: %.200s", i, msg))
			return
		}
		cl.head = n
		phase := readsPhase(r.phase.Load())
		for k := range readsPerHead {
			method, params := phase.read(i, k)
			cl.nextID++
			cl.pending[cl.nextID] = [2]string{method, params}
			cl.buf = fmt.Appendf(cl.buf[:0], `{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, cl.nextID, method, params)
			if err := c.Write(context.Background(), websocket.MessageText, cl.buf); err != nil {
				r.fail(fmt.Errorf("client %d: write: %w", i, err))
				return
			}
		}
		return
	}
	id, err := strconv.ParseInt(string(m.ID), 10, 64)
	req, ok := cl.pending[id]
	if err != nil || !ok {
		r.fail(fmt.Errorf("client %d: answer to no request of its own: %.200s", i, msg))
		return
	}
	delete(cl.pending, id)
	want, _ := appendChainAnswer(nil, m.ID, req[0], json.RawMessage(req[1]), cl.head)
	if !bytes.Equal(msg, want) {
		r.fail(fmt.Errorf("client %d, head %d, %s%s:\n got  %.300s\n want %.300s", i, cl.head, req[0], req[1], msg, want))
		return
	}
	if r.answered.Add(1)%r.perHead == 0 {
		select {
		case r.step <- struct{}{}:
		default:
		}
	}
}

// runReads subscribes o.HeadClients clients to newHeads on an upstream
// started with -node-delay. In each of two phases the upstream pushes
// o.Heads heads, one at a time: on each, every client sends its three
// reads (the same three for all in the first phase, eth_getBalance of
// addresses of its own in the second) and checks each answer against the
// node's answer at that head; the next head comes once every answer is
// in. A phase's figure is the calls of its methods the node received per
// read the clients sent. Straight to the node and through the relay, the
// two must be equal; a wrong answer fails the measurement.
func runReads(ctx context.Context, e *env, o Options) (readsFigures, error) {
	var f readsFigures
	r := &readsRun{clients: make([]readsClient, o.HeadClients), step: make(chan struct{}, 1), perHead: int64(o.HeadClients * readsPerHead)}
	for i := range r.clients {
		r.clients[i].pending = map[int64][2]string{}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	conns, err := subscribeEach(ctx, e.target, o.HeadClients, &wg, r.onMsg)
	if err != nil {
		return f, err
	}
	defer closeAll(conns)
	head := 0
	for _, phase := range []readsPhase{phaseSame, phaseDistinct} {
		r.phase.Store(int32(phase))
		before, err := upstreamStatsOf(ctx, e.upstream)
		if err != nil {
			return f, err
		}
		for range o.Heads {
			head++
			var pr pushReply
			if err := ctlGet(ctx, e.upstream, "/ctl/push?seq="+strconv.Itoa(head), &pr); err != nil {
				return f, err
			}
			if err := r.await(ctx, int64(head)*r.perHead); err != nil {
				return f, fmt.Errorf("reads, head %d: %w", head, err)
			}
		}
		after, err := upstreamStatsOf(ctx, e.upstream)
		if err != nil {
			return f, err
		}
		var up int64
		for _, m := range phase.methods() {
			up += after.Calls[m] - before.Calls[m]
		}
		sent := int64(o.Heads) * r.perHead
		if e.mode != "muxd" && up != sent {
			return f, fmt.Errorf("reads: the node counted %d calls of %v for the %d reads sent %s", up, phase.methods(), sent, e.mode)
		}
		ratio := float64(up) / float64(sent)
		if phase == phaseSame {
			f.same = ratio
		} else {
			f.distinct = ratio
		}
	}
	return f, nil
}

// await waits until want answers in all have been read and found right.
func (r *readsRun) await(ctx context.Context, want int64) error {
	for {
		if err := r.failures(); err != nil {
			return err
		}
		got := r.answered.Load()
		if got >= want {
			return nil
		}
		select {
		case <-r.step:
		case <-time.After(30 * time.Second):
			return fmt.Errorf("%d of %d answers in, and no more in 30s", got, want)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
