package core

import (
	"testing"
)

// timedOut, lostErr and noUpstream are muxd's -32002 answers for id.
func timedOut(id string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32002,"message":"request timed out"}}`
}

func lostErr(id string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32002,"message":"upstream unavailable","data":{"reason":"connection lost"}}}`
}

func noUpstream(id string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32002,"message":"upstream unavailable","data":{"reason":"no upstream connected"}}}`
}

// TestConnectionLifecycle covers DESIGN §2-3: the pending table is scoped
// to one connection; on its loss the retry list goes again under the same
// upstream ids and everything else fails at once; requests wait at most
// UpstreamWait for an upstream.
func TestConnectionLifecycle(t *testing.T) {
	send := func(id string) string { return req(id, "eth_sendRawTransaction") }
	runScripts(t, []scriptRow{
		{name: "retry_list_goes_again_the_rest_fails", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: req("1", "eth_chainId"), want: []string{"up> " + req("1", "eth_chainId")}},
			{do: "c1", in: send("2"), want: []string{"up> " + send("2")}},
			{do: "lost", want: []string{"c1< " + lostErr("2")}, counts: map[string]int{"retried": 1}},
			{do: "connect", want: []string{"up> " + req("1", "eth_chainId")}},
			{do: "up", in: res("1", `"0x1"`), want: []string{"c1< " + res("1", `"0x1"`)}},
		}},
		{name: "no_retry_past_the_deadline", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: req("1", "eth_chainId"), want: []string{"up> " + req("1", "eth_chainId")}},
			{do: "lost", at: 10 * sec, want: []string{"c1< " + lostErr("1")}},
		}},
		{name: "no_retry_past_max_waiting", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: req("1", "eth_chainId"), want: []string{"up> " + req("1", "eth_chainId")}},
			{do: "c1", in: req("2", "eth_chainId"), want: []string{"up> " + req("2", "eth_chainId")}},
			{do: "c1", in: req("3", "eth_chainId"), want: []string{"up> " + req("3", "eth_chainId")}},
			{do: "c1", in: req("4", "eth_chainId"), want: []string{"up> " + req("4", "eth_chainId")}},
			{do: "lost", want: []string{"c1< " + lostErr("4")}, counts: map[string]int{"retried": 3}},
			{do: "connect", want: []string{"up> " + req("1", "eth_chainId"), "up> " + req("2", "eth_chainId"), "up> " + req("3", "eth_chainId")}},
		}},
		{name: "retried_batch_goes_again_as_one_array", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + req("1", "eth_chainId") + "," + send("2") + "," + req("3", "eth_blockNumber") + "]",
				want: []string{"up> [" + req("1", "eth_chainId") + "," + send("2") + "," + req("3", "eth_blockNumber") + "]"}},
			{do: "lost"},
			{do: "connect", want: []string{"up> [" + req("1", "eth_chainId") + "," + req("3", "eth_blockNumber") + "]"}},
			{do: "up", in: "[" + res("3", `"0x3"`) + "," + res("1", `"0x1"`) + "]",
				want: []string{"c1< [" + res("1", `"0x1"`) + "," + lostErr("2") + "," + res("3", `"0x3"`) + "]"}},
		}},
		{name: "unsent_array_of_a_batch_goes_whatever_its_method", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + send("1") + "," + send("2") + "," + send("3") + "," + send("4") + "]",
				want: []string{"up> [" + send("1") + "," + send("2") + "," + send("3") + "]"}},
			{do: "lost"},
			{do: "connect", want: []string{"up> " + send("4")}},
			{do: "up", in: res("4", `"0x4"`),
				want: []string{"c1< [" + lostErr("1") + "," + lostErr("2") + "," + lostErr("3") + "," + res("4", `"0x4"`) + "]"}},
		}},
		{name: "loss_of_an_old_connection_changes_nothing", steps: []step{
			{do: "join"}, {do: "connect"}, {do: "connect"},
			{do: "c1", in: send("1"), want: []string{"up> " + send("1")}},
			{do: "lost 1"},
			{do: "up", in: res("1", `"0x1"`), want: []string{"c1< " + res("1", `"0x1"`)}},
		}},
		{name: "waiting_request_gives_up_after_upstream_wait", steps: []step{
			{do: "join"},
			{do: "c1", in: send("1")},
			{do: "tick", at: 4999 * msec},
			{do: "tick", at: 5 * sec, want: []string{"c1< " + noUpstream("1")}},
			{do: "connect"},
		}},
		{name: "waiting_request_times_out_first_when_its_deadline_is_sooner", cfg: func(c *Config) { c.UpstreamWait = 20 * sec }, steps: []step{
			{do: "join"},
			{do: "c1", in: send("1")},
			{do: "tick", at: 10 * sec, want: []string{"c1< " + timedOut("1")}},
		}},
		{name: "waiting_batch_goes_as_one_array", steps: []step{
			{do: "join"},
			{do: "c1", in: "[" + send("1") + "," + req("2", "admin_peers") + "," + send("3") + "]"},
			{do: "connect", want: []string{"up> [" + send("1") + "," + send("2") + "]"}},
			{do: "up", in: "[" + res("1", "1") + "," + res("2", "3") + "]",
				want: []string{`c1< [` + res("1", "1") + `,{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"the method admin_peers does not exist/is not available","data":{"reason":"denied"}}},` + res("3", "3") + "]"}},
		}},
		{name: "waiting_batch_gives_up_whole", steps: []step{
			{do: "join"},
			{do: "c1", in: "[" + send("1") + "," + send("2") + "]"},
			{do: "tick", at: 5 * sec, want: []string{"c1< [" + noUpstream("1") + "," + noUpstream("2") + "]"}},
			{do: "connect"},
		}},
		{name: "retried_request_waits_upstream_wait_again", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: req("1", "eth_chainId"), want: []string{"up> " + req("1", "eth_chainId")}},
			{do: "lost", at: 1 * sec},
			{do: "tick", at: 6 * sec, want: []string{"c1< " + noUpstream("1")}},
		}},
	})
}

// TestTimeouts covers Tick for requests in flight (DESIGN §4's
// "request timed out").
func TestTimeouts(t *testing.T) {
	runScripts(t, []scriptRow{
		{name: "in_flight_request_times_out_at_its_deadline", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: req("1", "eth_call"), want: []string{"up> " + req("1", "eth_call")}},
			{do: "c1", in: req("2", "eth_call"), at: 2 * sec, want: []string{"up> " + req("2", "eth_call")}},
			{do: "tick", at: 9999 * msec},
			{do: "tick", at: 10 * sec, want: []string{"c1< " + timedOut("1")}, counts: map[string]int{"answered -32002 upstream": 1}},
			{do: "up", in: res("1", "1"), want: []string{"drop unknown_id"}},
			{do: "up", in: res("2", "2"), want: []string{"c1< " + res("2", "2")}},
			{do: "tick", at: 20 * sec},
		}},
		// The calls of the array in flight and of the one not sent yet
		// share a deadline: the whole batch times out in one tick, in
		// upstream id order (one group of the pending table), and
		// nothing more goes upstream.
		{name: "batch_times_out_whole_with_its_unsent_array", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + req("1", "eth_call") + "," + req("2", "eth_call") + "," + req("3", "eth_call") + "," + req("4", "eth_call") + "]",
				want: []string{"up> [" + req("1", "eth_call") + "," + req("2", "eth_call") + "," + req("3", "eth_call") + "]"}},
			{do: "tick", at: 10 * sec,
				want: []string{"c1< [" + timedOut("1") + "," + timedOut("2") + "," + timedOut("3") + "," + timedOut("4") + "]"}},
		}},
	})
}
