package core

import "testing"

// TestUpstreamSwitch covers UpstreamSwitch (switch.go): what moves to the
// new connection as on a loss, what stays with the old one to be answered
// there, and when the old one is closed.
func TestUpstreamSwitch(t *testing.T) {
	send := func(id string) string { return req(id, "eth_sendRawTransaction") }
	runScripts(t, []scriptRow{
		{name: "send_stays_and_is_answered_by_the_old_connection", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: send("1"), want: []string{"up> " + send("1")}},
			{do: "c1", in: req("2", "eth_chainId"), want: []string{"up> " + req("2", "eth_chainId")}},
			// The read goes again on connection 2; the send stays on 1.
			{do: "switch", want: []string{"up> " + req("2", "eth_chainId")}, counts: map[string]int{"retried": 1}},
			{do: "c1", in: req("3", "eth_blockNumber"), want: []string{"up> " + req("3", "eth_blockNumber")}},
			// The old connection's answer to the read that moved is ignored
			// (not counted as a drop: it is what a switch leads to).
			{do: "up 1", in: res("2", `"0x1"`)},
			{do: "up 1", in: res("1", `"0xhash"`), want: []string{"c1< " + res("1", `"0xhash"`), "close 1"}},
			{do: "up", in: res("2", `"0x1"`), want: []string{"c1< " + res("2", `"0x1"`)}},
			{do: "up", in: res("3", `"0x5"`), want: []string{"c1< " + res("3", `"0x5"`)}},
		}},
		{name: "nothing_to_drain_closes_the_old_connection_at_once", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: req("1", "eth_call"), want: []string{"up> " + req("1", "eth_call")}},
			{do: "switch", want: []string{"up> " + req("1", "eth_call"), "close 1"}},
			// Closed: the drain is over, so a late answer is a drop again.
			{do: "up 1", in: res("1", `"0x"`), want: []string{"drop unknown_id"}},
			{do: "up", in: res("1", `"0x"`), want: []string{"c1< " + res("1", `"0x"`)}},
		}},
		{name: "subscriptions_move_and_the_old_pushes_are_ignored", steps: liveHeads([]step{
			{do: "switch", want: []string{"up> " + upSub("2", heads), "close 1"}, keys: []string{headsKey + " resubscribing 1"}},
			{do: "up 1", in: push(`"0xaa"`, `{"number":"0x5"}`)},
			{do: "up", in: res("2", `"0xbb"`), keys: []string{headsKey + " live 1"}},
			{do: "up", in: push(`"0xbb"`, `{"number":"0x6"}`), want: []string{"c1< " + push(`"0xs1"`, `{"number":"0x6"}`)}},
		})},
		{name: "loss_of_the_old_connection_fails_what_it_owes", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: send("1"), want: []string{"up> " + send("1")}},
			{do: "switch"},
			{do: "lost 1", want: []string{"c1< " + lostErr("1")}},
			{do: "up 1", in: res("1", `"0xhash"`), want: []string{"drop unknown_id"}},
		}},
		{name: "loss_of_the_new_connection_leaves_the_old_one_draining", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: send("1"), want: []string{"up> " + send("1")}},
			{do: "c1", in: send("2"), want: []string{"up> " + send("2")}},
			{do: "switch"},
			{do: "c1", in: send("3"), want: []string{"up> " + send("3")}},
			{do: "lost", want: []string{"c1< " + lostErr("3")}},
			{do: "up 1", in: res("1", `"0xa"`), want: []string{"c1< " + res("1", `"0xa"`)}},
			{do: "connect"},
			{do: "up 1", in: res("2", `"0xb"`), want: []string{"c1< " + res("2", `"0xb"`), "close 1"}},
		}},
		{name: "second_switch_gives_up_the_first_drain", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: send("1"), want: []string{"up> " + send("1")}},
			{do: "switch"},
			{do: "c1", in: send("2"), want: []string{"up> " + send("2")}},
			{do: "switch", want: []string{"c1< " + lostErr("1"), "close 1"}},
			{do: "up 1", in: res("1", `"0xa"`), want: []string{"drop unknown_id"}},
			{do: "up 2", in: res("2", `"0xb"`), want: []string{"c1< " + res("2", `"0xb"`), "close 2"}},
		}},
		{name: "drained_request_times_out_and_the_connection_closes", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: send("1"), want: []string{"up> " + send("1")}},
			{do: "switch"},
			{do: "tick", at: 10 * sec, want: []string{"c1< " + timedOut("1"), "close 1"}},
		}},
		{name: "client_gone_ends_the_drain", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: send("1"), want: []string{"up> " + send("1")}},
			{do: "switch"},
			{do: "gone c1", want: []string{"close 1"}},
		}},
		{name: "a_batch_with_a_send_stays_whole_with_the_old_connection", steps: []step{
			{do: "join"}, {do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + send("1") + "," + req("2", "eth_chainId") + "]", want: []string{"up> [" + send("1") + "," + req("2", "eth_chainId") + "]"}},
			{do: "c2", in: "[" + req("3", "eth_call") + "," + req("4", "eth_chainId") + "]", want: []string{"up> [" + req("3", "eth_call") + "," + req("4", "eth_chainId") + "]"}},
			// The reads-only batch goes again on connection 2, as one
			// array; the batch with the send stays whole on 1.
			{do: "switch", want: []string{"up> [" + req("3", "eth_call") + "," + req("4", "eth_chainId") + "]"}, counts: map[string]int{"retried": 2}},
			{do: "up 1", in: "[" + res("1", `"0xhash"`) + "," + res("2", `"0x1"`) + "]", want: []string{"c1< [" + res("1", `"0xhash"`) + "," + res("2", `"0x1"`) + "]", "close 1"}},
			{do: "up", in: "[" + res("3", `"0x"`) + "," + res("4", `"0x1"`) + "]", want: []string{"c2< [" + res("3", `"0x"`) + "," + res("4", `"0x1"`) + "]"}},
		}},
		{name: "a_batch_that_stayed_fails_whole_with_the_old_connection", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + send("1") + "," + req("2", "eth_chainId") + "]", want: []string{"up> [" + send("1") + "," + req("2", "eth_chainId") + "]"}},
			{do: "switch"},
			{do: "lost 1", want: []string{"c1< [" + lostErr("1") + "," + lostErr("2") + "]"}},
		}},
		{name: "a_batch_whose_send_was_answered_moves", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + send("1") + "," + req("2", "eth_chainId") + "]", want: []string{"up> [" + send("1") + "," + req("2", "eth_chainId") + "]"}},
			{do: "up", in: res("1", `"0xhash"`)},
			// Alone in its array now, the read goes as a single request.
			{do: "switch", want: []string{"up> " + req("2", "eth_chainId"), "close 1"}},
			{do: "up", in: res("2", `"0x1"`), want: []string{"c1< [" + res("1", `"0xhash"`) + "," + res("2", `"0x1"`) + "]"}},
		}},
		{name: "switch_without_a_current_connection_connects", steps: []step{
			{do: "join"},
			{do: "c1", in: send("1")},
			{do: "switch", want: []string{"up> " + send("1")}},
			{do: "up", in: res("1", `"0xa"`), want: []string{"c1< " + res("1", `"0xa"`)}},
		}},
	})
}
