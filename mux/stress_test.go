package mux

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// stressPlan is what one stress client sends and what it must get back.
type stressPlan struct {
	frames []string
	// want maps each request's unique params key to the id it carried.
	want map[string]string
	// group maps each request key to the frame it was sent in; a batch
	// answer must hold exactly the keys of its frame.
	group map[string]int
	size  map[int]int // id-bearing elements per frame
	notes []string    // keys of the notifications sent
	// answers is the number of frames muxd must send back.
	answers int
}

func newStressPlan(client, requests int) *stressPlan {
	rng := rand.New(rand.NewPCG(uint64(client), 42))
	p := &stressPlan{want: map[string]string{}, group: map[string]int{}, size: map[int]int{}}
	methods := []string{"eth_call", "eth_getBalance", "eth_getLogs", "eth_chainId", "eth_sendRawTransaction"}
	k := 0
	id := func() string {
		switch rng.IntN(10) {
		case 0:
			return `7` // shared by many requests, also across clients
		case 1:
			return `"dup"`
		case 2:
			return `null`
		case 3:
			return fmt.Sprintf(`%d.5`, k)
		case 4, 5:
			return fmt.Sprintf(`"s-%d"`, k)
		}
		return fmt.Sprint(k)
	}
	request := func(frame int) string {
		key := fmt.Sprintf("c%d-r%d", client, k)
		i := id()
		k++
		p.want[key] = i
		p.group[key] = frame
		p.size[frame]++
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":%q,"params":[%q]}`, i, methods[rng.IntN(len(methods))], key)
	}
	note := func() string {
		key := fmt.Sprintf("c%d-n%d", client, len(p.notes))
		p.notes = append(p.notes, key)
		return fmt.Sprintf(`{"jsonrpc":"2.0","method":"eth_note","params":[%q]}`, key)
	}
	for k < requests {
		frame := len(p.frames)
		switch r := rng.IntN(10); {
		case r < 6:
			p.frames = append(p.frames, request(frame))
		case r < 7:
			p.frames = append(p.frames, note())
		default:
			n := 1 + rng.IntN(8)
			var elems []string
			for range n {
				if rng.IntN(4) == 0 {
					elems = append(elems, note())
				} else if k < requests {
					elems = append(elems, request(frame))
				}
			}
			if len(elems) == 0 {
				elems = append(elems, note())
			}
			p.frames = append(p.frames, "["+strings.Join(elems, ",")+"]")
		}
		if p.size[frame] > 0 {
			p.answers++
		}
	}
	return p
}

// stressResp is an answer as the stress clients decode it, in one pass.
type stressResp struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  *struct {
		Method string   `json:"method"`
		Params []string `json:"params"`
	} `json:"result"`
}

// run plays the plan against muxd and checks every answer.
func (p *stressPlan) run(url string) error {
	conn, err := dialRaw(url, nil)
	if err != nil {
		return err
	}
	defer conn.CloseNow()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	werr := make(chan error, 1)
	go func() {
		for _, f := range p.frames {
			if err := conn.Write(ctx, websocket.MessageText, []byte(f)); err != nil {
				werr <- err
				return
			}
		}
		werr <- nil
	}()
	answered := map[string]bool{}
	for range p.answers {
		_, b, err := conn.Read(ctx)
		if err != nil {
			return fmt.Errorf("read after %d answers: %w", len(answered), err)
		}
		var rs []stressResp
		batch := len(b) > 0 && b[0] == '['
		if batch {
			err = json.Unmarshal(b, &rs)
		} else {
			rs = make([]stressResp, 1)
			err = json.Unmarshal(b, &rs[0])
		}
		if err != nil {
			return fmt.Errorf("%v: %s", err, b)
		}
		frame := -1
		for _, r := range rs {
			if r.JSONRPC != "2.0" || r.Result == nil || len(r.Result.Params) != 1 {
				return fmt.Errorf("not an echo: %s", b)
			}
			key := r.Result.Params[0]
			want, ok := p.want[key]
			if !ok {
				return fmt.Errorf("answer for someone else's request %q: %s", key, b)
			}
			if answered[key] {
				return fmt.Errorf("request %q answered twice", key)
			}
			answered[key] = true
			if string(r.ID) != want {
				return fmt.Errorf("request %q sent id %s, answer has %s", key, want, r.ID)
			}
			g := p.group[key]
			if frame != -1 && g != frame {
				return fmt.Errorf("one answer array mixes requests of frames %d and %d", frame, g)
			}
			frame = g
		}
		isBatch := p.frames[frame][0] == '['
		if batch != isBatch || len(rs) != p.size[frame] {
			return fmt.Errorf("frame %d (%d requests, batch %v) answered by %d (batch %v): %.200s", frame, p.size[frame], isBatch, len(rs), batch, b)
		}
	}
	if err := <-werr; err != nil {
		return err
	}
	if len(answered) != len(p.want) {
		return fmt.Errorf("%d of %d requests answered", len(answered), len(p.want))
	}
	return nil
}

// TestStress: many clients, many mixed requests, an upstream that answers
// out of order; every answer reaches its own request exactly once.
func TestStress(t *testing.T) {
	const clients, requests = 50, 1000
	h := newHarness(t, harnessOpts{
		fake: func(f *fakeUpstream) { f.Reorder() },
		cfg: func(c *Config) {
			c.Logger = discardLogger()
			c.RequestTimeout = time.Minute
		},
	})
	plans := make([]*stressPlan, clients)
	notes := map[string]bool{}
	for i := range plans {
		plans[i] = newStressPlan(i, requests)
		for _, n := range plans[i].notes {
			notes[n] = true
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, clients)
	for i, p := range plans {
		wg.Go(func() { errs[i] = p.run(h.URL) })
	}
	wg.Wait()
	t.Logf("%d clients x %d requests answered in %v", clients, requests, time.Since(start))
	for i, err := range errs {
		if err != nil {
			t.Errorf("client %d: %v", i, err)
		}
	}
	if t.Failed() {
		return
	}
	// Every notification reached the node, once.
	fc := h.fake.Conn(t, 1)
	h.fake.Wait(t, "every notification upstream", func() bool {
		n := 0
		for _, r := range fc.Reqs() {
			if r.IsNotification() {
				n++
			}
		}
		return n == len(notes)
	})
	for _, r := range fc.Reqs() {
		if !r.IsNotification() {
			continue
		}
		var params []string
		_ = json.Unmarshal(r.Params, &params)
		if len(params) != 1 || !notes[params[0]] {
			t.Fatalf("unexpected or repeated notification upstream: %s", r.Raw)
		}
		delete(notes, params[0])
	}
	if n := h.pendingLen(); n != 0 {
		t.Errorf("pending = %d at the end, want 0", n)
	}
	m := h.srv.Metrics()
	for r := DropReason(0); r < numDropReasons; r++ {
		if n := m.DroppedCount(r); n != 0 {
			t.Errorf("dropped %s = %v", r, n)
		}
	}
	if h.fake.NumConns() != 1 {
		t.Errorf("upstream connections = %d", h.fake.NumConns())
	}
}
