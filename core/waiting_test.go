package core

import "testing"

// TestWaitEndsOnDialVerdict covers DESIGN §3's upstream_wait: past it a
// waiting request gives up when a dial fails (away), not while a dial is
// at a node (reached) for up to ReachedHold, and DialGrace after it when no
// dial said either.
func TestWaitEndsOnDialVerdict(t *testing.T) {
	send := func(id string) string { return req(id, "eth_sendRawTransaction") }
	grace := func(c *Config) { c.DialGrace = sec }
	runScripts(t, []scriptRow{
		{name: "no_grace_gives_up_at_upstream_wait", steps: []step{
			{do: "join"},
			{do: "c1", in: send("1")},
			{do: "tick", at: 5 * sec, want: []string{"c1< " + noUpstream("1")}},
		}},
		{name: "a_dial_at_the_node_holds_it_past_upstream_wait", steps: []step{
			{do: "join"},
			{do: "c1", in: send("1")},
			{do: "reached", at: 4900 * msec},
			{do: "tick", at: 5 * sec},
			{do: "tick", at: 7900 * msec},
			{do: "connect", at: 7950 * msec, want: []string{"up> " + send("1")}},
		}},
		// "At a node" is a TCP connection: a hung node's kernel or a
		// proxy with its backend gone takes it and never answers.
		{name: "a_dial_at_the_node_holds_it_reached_hold_at_most", steps: []step{
			{do: "join"},
			{do: "c1", in: send("1")},
			{do: "reached", at: 4900 * msec},
			{do: "tick", at: 7999 * msec},
			{do: "tick", at: 8 * sec, want: []string{"c1< " + noUpstream("1")}},
		}},
		{name: "the_dial_at_the_node_fails", steps: []step{
			{do: "join"},
			{do: "c1", in: send("1")},
			{do: "reached", at: 4900 * msec},
			{do: "tick", at: 5 * sec},
			{do: "unreached", at: 5200 * msec},
			{do: "away", want: []string{"c1< " + noUpstream("1")}},
		}},
		{name: "a_failed_dial_does_not_end_it_while_another_is_at_a_node", cfg: grace, steps: []step{
			{do: "join"},
			{do: "c1", in: send("1")},
			{do: "reached", at: 4900 * msec},
			{do: "away", at: 5200 * msec},
			{do: "tick", at: 7 * sec},
			{do: "unreached", at: 7100 * msec},
			{do: "tick", want: []string{"c1< " + noUpstream("1")}},
		}},
		{name: "the_deadline_bounds_a_dial_at_the_node", cfg: func(c *Config) { c.UpstreamWait = 9 * sec }, steps: []step{
			{do: "join"},
			{do: "c1", in: send("1")},
			{do: "reached", at: 8900 * msec},
			{do: "tick", at: 10 * sec, want: []string{"c1< " + timedOut("1")}},
		}},
		{name: "a_failed_dial_after_the_wait_ends_it", cfg: grace, steps: []step{
			{do: "join"},
			{do: "c1", in: send("1")},
			{do: "away", at: 4900 * msec},
			{do: "tick", at: 5 * sec},
			{do: "tick", at: 5200 * msec},
			{do: "away", at: 5250 * msec, want: []string{"c1< " + noUpstream("1")}},
		}},
		{name: "a_failed_dial_as_the_wait_ends_ends_it", cfg: grace, steps: []step{
			{do: "join"},
			{do: "c1", in: send("1")},
			{do: "away", at: 5 * sec, want: []string{"c1< " + noUpstream("1")}},
		}},
		{name: "the_node_back_before_the_next_dial_fails_gets_it", cfg: grace, steps: []step{
			{do: "join"},
			{do: "c1", in: send("1")},
			{do: "away", at: 4900 * msec},
			{do: "tick", at: 5100 * msec},
			{do: "connect", at: 5150 * msec, want: []string{"up> " + send("1")}},
		}},
		{name: "no_verdict_gives_up_after_the_grace", cfg: grace, steps: []step{
			{do: "join"},
			{do: "c1", in: send("1")},
			{do: "tick", at: 5999 * msec},
			{do: "tick", at: 6 * sec, want: []string{"c1< " + noUpstream("1")}},
		}},
		{name: "only_requests_whose_wait_ended_give_up", cfg: grace, steps: []step{
			{do: "join"},
			{do: "c1", in: send("1")},
			{do: "c1", in: send("2"), at: sec},
			{do: "away", at: 5250 * msec, want: []string{"c1< " + noUpstream("1")}},
			{do: "connect", at: 5500 * msec, want: []string{"up> " + send("2")}},
		}},
		{name: "a_verdict_from_before_a_retry_began_to_wait_does_not_count", cfg: grace, steps: []step{
			{do: "join"},
			{do: "away", at: 500 * msec},
			{do: "connect"},
			{do: "c1", in: req("1", "eth_chainId"), want: []string{"up> " + req("1", "eth_chainId")}},
			{do: "lost", at: sec},
			{do: "tick", at: 6 * sec},
			{do: "away", at: 6200 * msec, want: []string{"c1< " + noUpstream("1")}},
		}},
	})
}
