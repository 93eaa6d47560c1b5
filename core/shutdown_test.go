package core

import (
	"errors"
	"testing"
)

// shutdownErr is the answer Shutdown gives (see step "shutdown").
func shutdownErr(id string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32002,"message":"upstream unavailable","data":{"reason":"shutdown"}}}`
}

// TestShutdown covers BeginShutdown, Effects.Idle and Shutdown: a server
// stopping answers what it owes, or waits until nothing is owed.
func TestShutdown(t *testing.T) {
	runScripts(t, []scriptRow{
		{name: "idle_at_once_when_nothing_is_owed", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "begin", want: []string{"idle"}},
			{do: "join", want: []string{"err " + ErrClosed.Error()}},
		}},
		{name: "idle_with_the_last_answer", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: req("1", "eth_call"), want: []string{"up> " + req("1", "eth_call")}},
			{do: "c1", in: req("2", "eth_call"), want: []string{"up> " + req("2", "eth_call")}},
			{do: "begin"},
			{do: "up", in: res("1", "1"), want: []string{"c1< " + res("1", "1")}},
			{do: "up", in: res("2", "2"), want: []string{"c1< " + res("2", "2"), "idle"}},
		}},
		{name: "idle_when_the_last_owed_client_leaves", steps: []step{
			{do: "join"}, {do: "join"}, {do: "connect"},
			{do: "c1", in: req("1", "eth_call"), want: []string{"up> " + req("1", "eth_call")}},
			{do: "begin"},
			{do: "gone c2"},
			{do: "gone c1", want: []string{"idle"}},
		}},
		{name: "idle_when_a_waiting_request_gives_up", steps: []step{
			{do: "join"},
			{do: "c1", in: req("1", "eth_call")},
			{do: "begin"},
			{do: "tick", at: 5 * sec, want: []string{"c1< " + noUpstream("1"), "idle"}},
		}},
		{name: "muxd_own_requests_are_not_waited_for", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: sub("1", heads), want: []string{"up> " + upSub("1", heads)}},
			{do: "up", in: res("1", `"0xaa"`), want: []string{"c1< " + res("1", `"0xs1"`)}},
			{do: "c1", in: unsub("2", `"0xs1"`), want: []string{"c1< " + res("2", "true"), "up> " + upUnsub("2", `"0xaa"`)}},
			{do: "begin", want: []string{"idle"}},
		}},
		{name: "shutdown_answers_everything_owed", steps: []step{
			{do: "join"}, {do: "join"}, {do: "connect"},
			{do: "c1", in: req("1", "eth_call"), want: []string{"up> " + req("1", "eth_call")}},
			{do: "c2", in: sub("1", heads), want: []string{"up> " + upSub("2", heads)}},
			{do: "c1", in: "[" + req("2", "eth_call") + "," + req("3", "eth_call") + "]",
				want: []string{"up> [" + req("3", "eth_call") + "," + req("4", "eth_call") + "]"}},
			// eth_call is on the retry list: all three wait for the next
			// connection, and the subscription waiter for its key.
			{do: "lost", keys: []string{headsKey + " idle 1"}},
			{do: "begin"},
			{do: "shutdown", want: []string{
				"c1< " + shutdownErr("1"),
				"c1< [" + shutdownErr("2") + "," + shutdownErr("3") + "]",
				"c2< " + shutdownErr("1"),
				"idle", "answered 4",
			}, keys: []string{}},
		}},
		{name: "shutdown_answers_in_flight", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: req("1", "eth_call"), want: []string{"up> " + req("1", "eth_call")}},
			{do: "begin"},
			{do: "shutdown", want: []string{"c1< " + shutdownErr("1"), "idle", "answered 1"}},
			{do: "up", in: res("1", "1"), want: []string{"drop unknown_id", "idle"}},
		}},
		{name: "shutdown_skips_waiting_requests_of_gone_clients", steps: []step{
			{do: "join"}, {do: "join"},
			{do: "c1", in: req("1", "eth_call")},
			{do: "c2", in: req("2", "eth_call")},
			{do: "gone c1"},
			{do: "shutdown", want: []string{"c2< " + shutdownErr("2"), "idle", "answered 1"}},
		}},
	})
}

// TestShutState covers the core once Shutdown has run: a client that goes
// on sending gets -32002 (reason "shutdown") for every request at once, in
// a batch's array for its elements, eth_subscribe and eth_unsubscribe too;
// nothing of a client's goes upstream any more, and nothing is left owed.
// What muxd answers without the node is answered as always.
func TestShutState(t *testing.T) {
	runScripts(t, []scriptRow{
		{name: "request_answered_at_once_never_forwarded", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: req("1", "eth_call"), want: []string{"up> " + req("1", "eth_call")}},
			{do: "begin"},
			{do: "shutdown", want: []string{"c1< " + shutdownErr("1"), "idle", "answered 1"}},
			{do: "c1", in: req("2", "eth_call"), want: []string{"c1< " + shutdownErr("2"), "idle"},
				counts: map[string]int{"request eth_call": 2, "answered -32002 muxd": 1}},
			{do: "c1", in: req(`"x"`, "eth_sendRawTransaction"), want: []string{"c1< " + shutdownErr(`"x"`), "idle"}},
			// The node's answer to the request the sweep answered finds
			// nothing.
			{do: "up", in: res("1", "1"), want: []string{"drop unknown_id", "idle"}},
		}},
		{name: "batch_elements_answered_in_the_array", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "shutdown", want: []string{"idle", "answered 0"}},
			{do: "c1", in: "[" + req("1", "eth_call") + `,{"jsonrpc":"2.0","method":"eth_foo"},` +
				`{"jsonrpc":"2.0","id":3,"method":"eth_call","params":1},` + req("4", "admin_peers") + "," +
				sub("5", heads) + "]",
				want: []string{`c1< [` + shutdownErr("1") + "," +
					`{"jsonrpc":"2.0","id":3,"error":{"code":-32600,"message":"invalid request","data":{"reason":"params must be an array or object"}}},` +
					`{"jsonrpc":"2.0","id":4,"error":{"code":-32601,"message":"the method admin_peers does not exist/is not available","data":{"reason":"denied"}}},` +
					shutdownErr("5") + "]", "idle"},
				counts: map[string]int{"dropped no_upstream": 1}, keys: []string{}},
			{do: "c1", in: `[{"jsonrpc":"2.0","method":"eth_foo"}]`, want: []string{"idle", "no answer"},
				counts: map[string]int{"dropped no_upstream": 2}},
		}},
		{name: "subscribe_and_unsubscribe_answered_too", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: sub("1", heads), want: []string{"up> " + upSub("1", heads)}},
			{do: "up", in: res("1", `"0xaa"`), want: []string{"c1< " + res("1", `"0xs1"`)}},
			{do: "shutdown", want: []string{"idle", "answered 0"}},
			{do: "c1", in: sub("2", heads), want: []string{"c1< " + shutdownErr("2"), "idle"},
				keys: []string{headsKey + " live 1"}},
			{do: "c1", in: unsub("3", `"0xs1"`), want: []string{"c1< " + shutdownErr("3"), "idle"},
				keys: []string{headsKey + " live 1"}},
			// Pushes go on while the session lasts; its end releases the
			// subscription upstream (muxd's own request).
			{do: "up", in: push(`"0xaa"`, "1"), want: []string{"c1< " + push(`"0xs1"`, "1"), "idle"}},
			{do: "gone c1", want: []string{"up> " + upUnsub("2", `"0xaa"`), "idle"}, keys: []string{}},
		}},
		{name: "notification_dropped", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "shutdown", want: []string{"idle", "answered 0"}},
			{do: "c1", in: `{"jsonrpc":"2.0","method":"eth_foo","params":[1]}`, want: []string{"idle", "no answer"},
				counts: map[string]int{"dropped no_upstream": 1}},
		}},
		{name: "muxd_own_answers_as_always", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "shutdown", want: []string{"idle", "answered 0"}},
			{do: "c1", in: `{"jsonrpc":"2.0","id":1,`,
				want: []string{`c1< {"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`}},
			{do: "c1", in: req("2", "admin_peers"),
				want: []string{`c1< {"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"the method admin_peers does not exist/is not available","data":{"reason":"denied"}}}`, "idle"}},
		}},
		{name: "nothing_waits_for_a_later_connection", steps: []step{
			{do: "join"},
			{do: "c1", in: req("1", "eth_call")},
			{do: "shutdown", want: []string{"c1< " + shutdownErr("1"), "idle", "answered 1"}},
			{do: "c1", in: req("2", "eth_call"), want: []string{"c1< " + shutdownErr("2"), "idle"}},
			{do: "connect"},
			{do: "tick", at: 6 * sec, want: []string{"idle"}},
		}},
		{name: "no_session_once_shut", steps: []step{
			{do: "join"},
			{do: "shutdown", want: []string{"idle", "answered 0"}},
			{do: "join", want: []string{"err " + ErrClosed.Error()}},
		}},
	})
}

// TestAccessors covers what the shell asks of the core between events.
func TestAccessors(t *testing.T) {
	h := newHarness(t, nil)
	id := h.join(false)
	if h.c.Connected() {
		t.Error("Connected before any connection")
	}
	frame := req("1", "eth_call")
	h.clientFrame(id, frame)
	if inflight, seq := h.c.Owed(id); inflight != 1 || seq != 0 {
		t.Errorf("Owed = %d, %d; want 1, 0", inflight, seq)
	}
	// What a request holds is its upstream frame: its bytes with upstream
	// id 1 in place of the client's 1.
	if got := h.c.Held(id); got != len(frame) {
		t.Errorf("Held = %d, want %d", got, len(frame))
	}
	h.connect()
	if !h.c.Connected() {
		t.Error("not Connected after UpstreamConnected")
	}
	h.upstreamFrame(0, res("1", "1"), false)
	if inflight, seq := h.c.Owed(id); inflight != 0 || seq != 1 {
		t.Errorf("Owed = %d, %d; want 0, 1", inflight, seq)
	}
	if h.c.Held(id) != 0 {
		t.Errorf("Held = %d after the answer, want 0", h.c.Held(id))
	}
	if inflight, seq := h.c.Owed(99); inflight != 0 || seq != 0 || h.c.Held(99) != 0 {
		t.Error("Owed/Held of an unknown client are not zero")
	}
	if _, err := h.c.Join(false); err != nil {
		t.Fatal(err)
	}
	if !h.c.BeginShutdown() {
		t.Error("BeginShutdown not idle with nothing owed")
	}
	if _, err := h.c.Join(false); !errors.Is(err, ErrClosed) {
		t.Errorf("Join after BeginShutdown: %v, want ErrClosed", err)
	}
}
