package core

import (
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/muxd/muxd/router"
)

// upstreamIDs finds the upstream ids of the calls in rendered upstream
// frames.
var upstreamIDs = regexp.MustCompile(`"id":([0-9]+),"method"`)

// TestFairShareRandom drives the fair shares with random events (calls,
// batches, answers in any order, deadlines, clients leaving, the
// connection lost and back) and checks what must always hold: the calls
// at the node never pass the bound by more than one batch, every slot
// taken is a call sent and not answered, nothing is sent twice on a connection,
// and every frame of a client still here gets exactly one answer.
func TestFairShareRandom(t *testing.T) {
	queued := 0 // events that left calls queued, over all seeds
	for seed := range uint64(40) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) { queued += fairShareRandom(t, seed) })
	}
	if queued == 0 {
		t.Error("no event left a call queued: the walk does not reach the bound")
	}
}

// fairShareRandom runs one seed and returns how many events left calls
// queued.
func fairShareRandom(t *testing.T, seed uint64) (queued int) {
	const limit = 3
	rng := rand.New(rand.NewPCG(seed, 36))
	h := newHarness(t, func(c *Config) {
		c.MaxUpstreamInFlight = limit
		c.MaxInFlight = 50
		c.MaxHeldBytes = 1 << 20
		c.MaxWaiting = 1000
		c.MaxClients = 4
	})
	sent := map[router.ClientID]int{}     // frames sent, per client here
	answered := map[router.ClientID]int{} // deliveries, per client
	gone := map[router.ClientID]bool{}
	atNode := map[int]bool{} // upstream ids sent on the current connection, not answered
	seen := map[int]bool{}   // every upstream id sent on the current connection
	var ids []router.ClientID
	for range 4 {
		ids = append(ids, h.join(false))
	}
	record := func(out []string) {
		t.Helper()
		for _, l := range out {
			if strings.HasPrefix(l, "up> ") {
				for _, m := range upstreamIDs.FindAllStringSubmatch(l, -1) {
					uid, _ := strconv.Atoi(m[1])
					if seen[uid] {
						t.Fatalf("seed %d: upstream id %d sent twice on one connection", seed, uid)
					}
					seen[uid], atNode[uid] = true, true
				}
			}
		}
		for _, d := range h.e.Deliveries {
			answered[d.Client]++
		}
		s := h.c.Stats()
		if s.FairQueued > 0 {
			queued++
		}
		if s.UpstreamInFlight > limit+h.c.cfg.UpstreamMaxBatch {
			t.Fatalf("seed %d: %d calls at the node, bound %d", seed, s.UpstreamInFlight, limit)
		}
		for uid := range h.c.fair.atNode {
			if !atNode[int(uid)] {
				t.Fatalf("seed %d: slot of upstream id %d, which is not at the node", seed, uid)
			}
		}
	}
	record(h.connect())
	n := 0
	for step := 0; step < 300; step++ {
		h.now = h.now.Add(time.Duration(rng.IntN(400)) * time.Millisecond)
		switch r := rng.IntN(100); {
		case r < 40:
			cl := ids[rng.IntN(len(ids))]
			if gone[cl] {
				continue
			}
			n++
			frame := est(`"r` + strconv.Itoa(n) + `"`)
			if rng.IntN(4) == 0 {
				k := 2 + rng.IntN(3)
				var elems []string
				for j := range k {
					elems = append(elems, est(`"b`+strconv.Itoa(n)+`-`+strconv.Itoa(j)+`"`))
				}
				frame = "[" + strings.Join(elems, ",") + "]"
			}
			sent[cl]++
			record(h.clientFrame(cl, frame))
		case r < 75 && len(atNode) > 0:
			uids := make([]int, 0, len(atNode))
			for uid := range atNode {
				uids = append(uids, uid)
			}
			uid := uids[rng.IntN(len(uids))]
			delete(atNode, uid)
			record(h.upstreamFrame(0, res(strconv.Itoa(uid), "1"), false))
		case r < 85:
			record(func() []string { h.c.Tick(&h.e, h.now); return h.render(nil) }())
		case r < 90:
			cl := ids[rng.IntN(len(ids))]
			if !gone[cl] {
				gone[cl] = true
				record(func() []string { h.c.ClientGone(&h.e, cl, h.now); return h.render(nil) }())
			}
		case r < 95 && h.c.Connected():
			h.c.UpstreamLost(&h.e, h.gen, h.now)
			record(h.render(nil))
			clear(atNode)
			clear(seen)
		default:
			if !h.c.Connected() {
				clear(seen)
				record(h.connect())
			}
		}
	}
	// Everything ends: connected, every call answered, every deadline past.
	if !h.c.Connected() {
		record(h.connect())
	}
	for len(atNode) > 0 {
		for uid := range atNode {
			delete(atNode, uid)
			record(h.upstreamFrame(0, res(strconv.Itoa(uid), "1"), false))
		}
	}
	h.now = h.now.Add(time.Minute)
	h.c.Tick(&h.e, h.now)
	record(h.render(nil))
	for _, cl := range ids {
		if !gone[cl] && answered[cl] != sent[cl] {
			t.Errorf("seed %d: client %d sent %d frames, got %d answers", seed, cl, sent[cl], answered[cl])
		}
	}
	if s := h.c.Stats(); s.FairQueued != 0 || s.UpstreamInFlight != 0 || s.InFlight != 0 {
		t.Errorf("seed %d: at the end %+v", seed, s)
	}
	h.checkGauges()
	return queued
}
