package core

import (
	"strconv"
	"strings"
	"testing"

	"github.com/muxd/muxd/router"
)

// est is a client call of a method no rule of the harness touches (not
// coalesced, not cached, not denied).
func est(id string) string { return req(id, "eth_estimateGas") }

// sent is est's call as it goes upstream under upstream id uid.
func sent(uid int) string { return "up> " + est(strconv.Itoa(uid)) }

func bound(n int) func(*Config) { return func(c *Config) { c.MaxUpstreamInFlight = n } }

// TestFairShares covers DESIGN §5's bound on client calls at the node and
// its fair shares (fairshare.go): past the bound calls queue per client and
// go in deficit round robin order as slots free; orphans hold their slots;
// a departed client's queued calls are never sent; a queued call's
// deadline runs; subscriptions and muxd's own requests never queue.
func TestFairShares(t *testing.T) {
	runScripts(t, []scriptRow{
		{name: "under_the_bound_calls_go_as_they_arrive", cfg: bound(2), steps: []step{
			{do: "join"},
			{do: "connect"},
			{do: "c1", in: est(`"a"`), want: []string{sent(1)}},
			{do: "c1", in: est(`"b"`), want: []string{sent(2)}},
			{do: "up", in: res("1", "1"), want: []string{`c1< ` + res(`"a"`, "1")}},
			{do: "c1", in: est(`"c"`), want: []string{sent(3)}},
		}},
		{name: "past_the_bound_slots_go_round_robin", cfg: bound(2), steps: []step{
			{do: "join"},
			{do: "join"},
			{do: "connect"},
			{do: "c1", in: est(`"a"`), want: []string{sent(1)}},
			{do: "c1", in: est(`"b"`), want: []string{sent(2)}},
			{do: "c1", in: est(`"c"`)}, // queued: uid 3
			{do: "c1", in: est(`"d"`)}, // uid 4
			{do: "c2", in: est(`"v"`)}, // uid 5
			// Each answer frees one slot: c1's next, then c2's, then
			// c1's last.
			{do: "up", in: res("1", "1"), want: []string{`c1< ` + res(`"a"`, "1"), sent(3)}},
			{do: "up", in: res("2", "2"), want: []string{`c1< ` + res(`"b"`, "2"), sent(5)}, counts: map[string]int{"fair queued": 2}},
			{do: "up", in: res("3", "3"), want: []string{`c1< ` + res(`"c"`, "3"), sent(4)}},
			{do: "up", in: res("5", "5"), want: []string{`c2< ` + res(`"v"`, "5")}},
			{do: "up", in: res("4", "4"), want: []string{`c1< ` + res(`"d"`, "4")}},
		}},
		{name: "orphans_hold_their_slots_until_answered", cfg: bound(2), steps: []step{
			{do: "join"},
			{do: "join"},
			{do: "connect"},
			{do: "c1", in: est(`"a"`), want: []string{sent(1)}},
			{do: "c1", in: est(`"b"`), want: []string{sent(2)}},
			{do: "c2", in: est(`"v"`)},
			{do: "gone c1", counts: map[string]int{"orphaned": 2}},
			{do: "up", in: res("1", "1"), want: []string{sent(3)}, counts: map[string]int{"dropped client_gone": 1}},
		}},
		// A call the node does not answer holds its slot slotHold, not
		// until its deadline: a node that drops calls must not stop
		// everyone's for request_timeout.
		{name: "orphans_hold_their_slots_slot_hold_at_most", cfg: bound(1), steps: []step{
			{do: "join"},
			{do: "join"},
			{do: "connect"},
			{do: "c1", in: est(`"a"`), want: []string{sent(1)}},
			{do: "c2", in: est(`"v"`), at: 500 * msec},
			{do: "gone c1", at: sec, counts: map[string]int{"orphaned": 1}},
			{do: "tick", at: 1999 * msec},
			{do: "tick", at: 2 * sec, want: []string{sent(2)}, counts: map[string]int{"orphaned": 1}},
			{do: "up", in: res("1", "1"), counts: map[string]int{"orphaned": 0, "dropped client_gone": 1}},
		}},
		{name: "an_unanswered_call_holds_its_slot_slot_hold_at_most", cfg: bound(1), steps: []step{
			{do: "join"},
			{do: "join"},
			{do: "connect"},
			{do: "c1", in: est(`"a"`), want: []string{sent(1)}},
			{do: "c2", in: est(`"v"`), at: 500 * msec},
			{do: "tick", at: 2 * sec, want: []string{sent(2)}},
			{do: "up", in: res("1", "1"), want: []string{`c1< ` + res(`"a"`, "1")}},
		}},
		{name: "a_departed_clients_queued_calls_are_never_sent", cfg: bound(1), steps: []step{
			{do: "join"},
			{do: "join"},
			{do: "connect"},
			{do: "c1", in: est(`"a"`), want: []string{sent(1)}},
			{do: "c1", in: est(`"b"`)},
			{do: "c1", in: `[` + est(`"x"`) + `,` + est(`"y"`) + `]`},
			{do: "c2", in: est(`"v"`)}, // uid 5
			{do: "gone c1", counts: map[string]int{"orphaned": 1}},
			{do: "up", in: res("1", "1"), want: []string{sent(5)}},
			{do: "up", in: res("5", "5"), want: []string{`c2< ` + res(`"v"`, "5")}},
			{do: "tick", at: 11 * sec},
		}},
		{name: "a_queued_calls_deadline_runs", cfg: bound(1), steps: []step{
			{do: "join"},
			{do: "join"},
			{do: "connect"},
			{do: "c1", in: est(`"a"`), want: []string{sent(1)}},
			{do: "c1", in: est(`"b"`)},
			{do: "c2", in: est(`"v"`), at: 5 * sec},
			// a and b time out (b never sent); the slot goes to v.
			{do: "tick", at: 10 * sec, want: []string{`c1< ` + timedOut(`"a"`), `c1< ` + timedOut(`"b"`), sent(3)}},
			{do: "up", in: res("1", "1"), want: []string{"drop unknown_id"}},
			{do: "tick", at: 15 * sec, want: []string{`c2< ` + timedOut(`"v"`)}},
		}},
		{name: "a_batch_queues_as_one_unit_costing_its_elements", cfg: func(c *Config) { c.MaxUpstreamInFlight = 1 }, steps: []step{
			{do: "join"},
			{do: "join"},
			{do: "connect"},
			{do: "c1", in: est(`"a"`), want: []string{sent(1)}},
			{do: "c2", in: `[` + est(`"x"`) + `,` + est(`"y"`) + `]`}, // uids 2, 3
			{do: "c1", in: est(`"b"`)},                                // uid 4
			// The batch costs two rounds' credit: c1's single call goes
			// first, then the batch as one array.
			{do: "up", in: res("1", "1"), want: []string{`c1< ` + res(`"a"`, "1"), sent(4)}},
			{do: "up", in: res("4", "4"), want: []string{`c1< ` + res(`"b"`, "4"), "up> [" + est("2") + "," + est("3") + "]"}},
			{do: "up", in: "[" + res("2", "2") + "," + res("3", "3") + "]", want: []string{`c2< [` + res(`"x"`, "2") + "," + res(`"y"`, "3") + "]"}},
		}},
		{name: "subscriptions_do_not_queue", cfg: bound(1), steps: []step{
			{do: "join"},
			{do: "join"},
			{do: "connect"},
			{do: "c1", in: est(`"a"`), want: []string{sent(1)}},
			{do: "c1", in: est(`"b"`)},
			{do: "c2", in: sub(`"s"`, heads), want: []string{"up> " + sub("3", heads)}},
		}},
		{name: "the_loss_sends_queued_calls_again_whatever_their_method", cfg: bound(1), steps: []step{
			{do: "join"},
			{do: "connect"},
			{do: "c1", in: req(`"a"`, "eth_sendRawTransaction"), want: []string{"up> " + req("1", "eth_sendRawTransaction")}},
			{do: "c1", in: req(`"b"`, "eth_sendRawTransaction")},
			// a may have run: it fails; b never left muxd: it waits.
			{do: "lost", want: []string{`c1< ` + lostErr(`"a"`)}},
			{do: "connect", want: []string{"up> " + req("2", "eth_sendRawTransaction")}},
		}},
		{name: "a_switch_moves_queued_calls", cfg: bound(1), steps: []step{
			{do: "join"},
			{do: "connect"},
			{do: "c1", in: req(`"a"`, "eth_sendRawTransaction"), want: []string{"up> " + req("1", "eth_sendRawTransaction")}},
			{do: "c1", in: req(`"b"`, "eth_sendRawTransaction")},
			// a stays with the old connection, which drains; b goes on
			// the new one, whose slots are its own.
			{do: "switch", want: []string{"up> " + req("2", "eth_sendRawTransaction")}},
			{do: "up 1", in: res("1", "1"), want: []string{`c1< ` + res(`"a"`, "1"), "close 1"}},
			{do: "up", in: res("2", "2"), want: []string{`c1< ` + res(`"b"`, "2")}},
		}},
		{name: "queued_calls_wait_for_the_connection_the_bound_holds", cfg: func(c *Config) { c.MaxUpstreamInFlight = 1; c.MaxWaiting = 10 }, steps: []step{
			{do: "join"},
			{do: "c1", in: est(`"a"`)},
			{do: "c1", in: est(`"b"`)},
			{do: "connect", want: []string{sent(1)}},
			{do: "up", in: res("1", "1"), want: []string{`c1< ` + res(`"a"`, "1"), sent(2)}},
		}},
		{name: "shutdown_answers_queued_calls", cfg: bound(1), steps: []step{
			{do: "join"},
			{do: "connect"},
			{do: "c1", in: est(`"a"`), want: []string{sent(1)}},
			{do: "c1", in: est(`"b"`)},
			{do: "shutdown", want: []string{
				`c1< {"jsonrpc":"2.0","id":"a","error":{"code":-32002,"message":"upstream unavailable","data":{"reason":"shutdown"}}}`,
				`c1< {"jsonrpc":"2.0","id":"b","error":{"code":-32002,"message":"upstream unavailable","data":{"reason":"shutdown"}}}`,
				"idle",
				"answered 2",
			}},
			{do: "up", in: res("1", "1"), want: []string{"drop unknown_id", "idle"}},
		}},
	})
}

// TestFairShareFlood is the case: one client holds 2,000 calls
// beside another's single call. With the bound reached, the single call
// goes upstream after at most one of the flood's calls, whenever it comes
// (before the flood's queue was first served, or while it is), and the
// calls at the node never pass the bound.
func TestFairShareFlood(t *testing.T) {
	for _, served := range []int{0, 1, 500} {
		t.Run("after_"+strconv.Itoa(served)+"_served", func(t *testing.T) {
			fairShareFlood(t, served)
		})
	}
}

// fairShareFlood has the victim's call come after served slots freed.
func fairShareFlood(t *testing.T, served int) {
	const flood, limit = 2000, 16
	h := newHarness(t, func(c *Config) {
		c.MaxUpstreamInFlight = limit
		c.MaxInFlight = flood
		c.MaxHeldBytes = 1 << 30
	})
	h.join(false)
	h.join(false)
	h.connect()
	up := 0 // frames sent upstream
	for i := range flood {
		up += len(h.clientFrame(1, est(`"f`+strconv.Itoa(i)+`"`)))
	}
	if up != limit {
		t.Fatalf("%d of the flood's calls went upstream, want the bound %d", up, limit)
	}
	// sentUID is the upstream id of the call an answer's slot went to.
	sentUID := func(out []string) int {
		t.Helper()
		last := out[len(out)-1]
		rest, ok := strings.CutPrefix(last, `up> {"jsonrpc":"2.0","id":`)
		if !ok {
			t.Fatalf("a slot freed and nothing was sent: %v", out)
		}
		n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		return n
	}
	atNode := []int{}
	for uid := 1; uid <= limit; uid++ {
		atNode = append(atNode, uid)
	}
	answer := func() int {
		uid := atNode[0]
		atNode = atNode[1:]
		n := sentUID(h.upstreamFrame(0, res(strconv.Itoa(uid), "1"), false))
		atNode = append(atNode, n)
		if s := h.c.Stats(); s.UpstreamInFlight > limit {
			t.Fatalf("%d calls at the node, bound %d", s.UpstreamInFlight, limit)
		}
		return n
	}
	for range served {
		answer()
	}
	if got := h.clientFrame(2, est(`"victim"`)); len(got) != 0 {
		t.Fatalf("the victim's call went past the bound: %v", got)
	}
	victim := flood + 1
	before := 0 // the flood's calls sent after the victim's came
	for answer() != victim {
		before++
	}
	if before > 1 {
		t.Errorf("%d of the flood's calls went before the victim's, want at most 1", before)
	}
	for len(atNode) > 0 {
		uid := atNode[0]
		atNode = atNode[1:]
		out := h.upstreamFrame(0, res(strconv.Itoa(uid), "1"), false)
		if len(out) == 2 {
			atNode = append(atNode, sentUID(out))
		}
	}
	if s := h.c.Stats(); s.Pending != 0 || s.FairQueued != 0 || s.UpstreamInFlight != 0 {
		t.Fatalf("after every answer: %+v", s)
	}
	h.checkGauges()
}

// TestFairShareWeightedClientsAlternate checks the order over many clients
// with calls queued: one per client per round, in the order they queued.
func TestFairShareWeightedClientsAlternate(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.MaxUpstreamInFlight = 1
		c.MaxClients = 3
		c.MaxInFlight = 10
	})
	for range 3 {
		h.join(false)
	}
	h.connect()
	h.clientFrame(1, est(`"first"`)) // uid 1, takes the slot
	uid := 2
	owner := map[int]string{}
	for k := range 3 {
		for cl := 1; cl <= 3; cl++ {
			h.clientFrame(router.ClientID(cl), est(`"x"`))
			owner[uid] = "c" + strconv.Itoa(cl) + "#" + strconv.Itoa(k)
			uid++
		}
	}
	var order []string
	answer := 1
	for range 9 {
		out := h.upstreamFrame(0, res(strconv.Itoa(answer), "1"), false)
		last := out[len(out)-1]
		rest, ok := strings.CutPrefix(last, `up> {"jsonrpc":"2.0","id":`)
		if !ok {
			t.Fatalf("answer %d sent nothing: %v", answer, out)
		}
		n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		order = append(order, owner[n])
		answer = n
	}
	want := "c1#0 c2#0 c3#0 c1#1 c2#1 c3#1 c1#2 c2#2 c3#2"
	if got := strings.Join(order, " "); got != want {
		t.Errorf("slots went to %s, want %s", got, want)
	}
}

// TestNamedClients covers names.go: a configured name's sessions share one
// flow with the name's weight, a bulk name's calls queue behind the latency
// class, and the name's in-flight bound and request rate hold across its
// sessions; an unknown name is unnamed.
func TestNamedClients(t *testing.T) {
	classes := func(n int, cls map[string]ClientClass) func(*Config) {
		return func(c *Config) { c.MaxUpstreamInFlight = n; c.Clients = cls; c.MaxInFlight = 10 }
	}
	limitErr := func(id, why string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32005,"message":"limit exceeded","data":{"reason":"` + why + `"}}}`
	}
	rows := []struct {
		name  string
		cfg   func(*Config)
		names []string // each session's name, c1 first
		steps []step
	}{
		{
			name:  "a_names_sessions_share_one_flow",
			cfg:   classes(1, map[string]ClientClass{"bot": {}}),
			names: []string{"bot", "bot", ""},
			steps: []step{
				{do: "connect"},
				{do: "c1", in: est(`"a"`), want: []string{sent(1)}},
				{do: "c1", in: est(`"b"`)}, // uid 2
				{do: "c2", in: est(`"c"`)}, // uid 3: the same flow as c1's
				{do: "c3", in: est(`"v"`)}, // uid 4: a flow of its own
				{do: "up", in: res("1", "1"), want: []string{`c1< ` + res(`"a"`, "1"), sent(2)}},
				{do: "up", in: res("2", "2"), want: []string{`c1< ` + res(`"b"`, "2"), sent(4)}},
				{do: "up", in: res("4", "4"), want: []string{`c3< ` + res(`"v"`, "4"), sent(3)}},
			},
		},
		{
			name:  "weight_gives_a_name_more_turns",
			cfg:   classes(1, map[string]ClientClass{"big": {Weight: 2}}),
			names: []string{"big", ""},
			steps: []step{
				{do: "connect"},
				{do: "c2", in: est(`"a"`), want: []string{sent(1)}},
				{do: "c2", in: est(`"b"`)}, // uid 2
				{do: "c2", in: est(`"c"`)}, // uid 3
				{do: "c1", in: est(`"x"`)}, // uid 4
				{do: "c1", in: est(`"y"`)}, // uid 5
				{do: "c1", in: est(`"z"`)}, // uid 6
				{do: "up", in: res("1", "1"), want: []string{`c2< ` + res(`"a"`, "1"), sent(2)}},
				{do: "up", in: res("2", "2"), want: []string{`c2< ` + res(`"b"`, "2"), sent(4)}},
				{do: "up", in: res("4", "4"), want: []string{`c1< ` + res(`"x"`, "4"), sent(5)}},
				{do: "up", in: res("5", "5"), want: []string{`c1< ` + res(`"y"`, "5"), sent(3)}},
			},
		},
		{
			name:  "bulk_waits_for_the_latency_class",
			cfg:   classes(1, map[string]ClientClass{"indexer": {Bulk: true}}),
			names: []string{"indexer", ""},
			steps: []step{
				{do: "connect"},
				{do: "c1", in: est(`"a"`), want: []string{sent(1)}},
				{do: "c1", in: est(`"b"`)}, // uid 2
				{do: "c2", in: est(`"v"`)}, // uid 3
				{do: "c2", in: est(`"w"`)}, // uid 4
				{do: "up", in: res("1", "1"), want: []string{`c1< ` + res(`"a"`, "1"), sent(3)}},
				{do: "up", in: res("3", "3"), want: []string{`c2< ` + res(`"v"`, "3"), sent(4)}},
				{do: "up", in: res("4", "4"), want: []string{`c2< ` + res(`"w"`, "4"), sent(2)}},
			},
		},
		{
			name:  "max_in_flight_holds_across_a_names_sessions",
			cfg:   classes(0, map[string]ClientClass{"bot": {MaxInFlight: 2}}),
			names: []string{"bot", "bot", "other"},
			steps: []step{
				{do: "connect"},
				{do: "c1", in: est(`"a"`), want: []string{sent(1)}},
				{do: "c2", in: est(`"b"`), want: []string{sent(2)}},
				{do: "c2", in: est(`"c"`), want: []string{`c2< ` + limitErr(`"c"`, "too many requests in flight for this client name")}, counts: map[string]int{"limit client_in_flight": 1}},
				{do: "c3", in: est(`"d"`), want: []string{sent(3)}}, // an unknown name is unnamed
				{do: "up", in: res("1", "1"), want: []string{`c1< ` + res(`"a"`, "1")}},
				{do: "c2", in: est(`"e"`), want: []string{sent(4)}},
				{do: "gone c2"},
				{do: "c1", in: est(`"f"`), want: []string{sent(5)}},
			},
		},
		{
			name:  "rate_is_a_token_bucket",
			cfg:   classes(0, map[string]ClientClass{"bot": {Rate: 2}}),
			names: []string{"bot", "bot"},
			steps: []step{
				{do: "connect"},
				{do: "c1", in: est(`"a"`), want: []string{sent(1)}},
				{do: "c2", in: est(`"b"`), want: []string{sent(2)}},
				{do: "c1", in: est(`"c"`), want: []string{`c1< ` + limitErr(`"c"`, "request rate limit exceeded for this client name")}, counts: map[string]int{"limit client_rate": 1}},
				{do: "c1", in: est(`"d"`), at: 499 * msec, want: []string{`c1< ` + limitErr(`"d"`, "request rate limit exceeded for this client name")}},
				{do: "c1", in: est(`"e"`), at: 500 * msec, want: []string{sent(3)}},
				// Idle for long, it holds one second's worth, no more.
				{do: "c1", in: `[` + est(`"f"`) + `,` + est(`"g"`) + `,` + est(`"h"`) + `]`, at: 60 * sec, want: []string{
					"up> [" + est("4") + "," + est("5") + "]",
				}},
			},
		},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			h := newHarness(t, row.cfg)
			for _, name := range row.names {
				if _, _, err := h.c.JoinAs(false, name); err != nil {
					t.Fatal(err)
				}
			}
			h.run(row.steps)
			h.checkGauges()
		})
	}
}

// TestThrottleCounted: a node's answer saying it limits the rate is
// counted (router.Throttle) and passed on as the node wrote it, alone or in
// a batch's array; other errors are not counted.
func TestThrottleCounted(t *testing.T) {
	limited := `{"jsonrpc":"2.0","id":%s,"error":{"code":-32005,"message":"daily request count exceeded, request rate limited","data":{"backoff_seconds":30}}}`
	lim := func(id string) string { return strings.Replace(limited, "%s", id, 1) }
	revert := func(id string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":3,"message":"execution reverted"}}`
	}
	runScripts(t, []scriptRow{
		{name: "single_and_batch", steps: []step{
			{do: "join"},
			{do: "connect"},
			{do: "c1", in: est(`"a"`), want: []string{sent(1)}},
			{do: "up", in: lim("1"), want: []string{"c1< " + lim(`"a"`)}, counts: map[string]int{"throttled": 1}},
			{do: "c1", in: est(`"b"`), want: []string{sent(2)}},
			{do: "up", in: revert("2"), want: []string{"c1< " + revert(`"b"`)}, counts: map[string]int{"throttled": 1}},
			{do: "c1", in: `[` + est(`"x"`) + `,` + est(`"y"`) + `]`, want: []string{"up> [" + est("3") + "," + est("4") + "]"}},
			{do: "up", in: "[" + lim("3") + "," + lim("4") + "]", want: []string{"c1< [" + lim(`"x"`) + "," + lim(`"y"`) + "]"}, counts: map[string]int{"throttled": 3}},
		}},
	})
}
