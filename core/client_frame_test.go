package core

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/muxd/muxd/router"
)

// TestClientFrames covers DESIGN §1 and §4: what muxd answers itself, what
// it forwards, and how ids are rewritten on the way up and restored on the
// way back.
func TestClientFrames(t *testing.T) {
	runScripts(t, []scriptRow{
		{name: "id_rewritten_and_restored_byte_identical", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: `{"jsonrpc":"2.0","id":"a\"b","method":"eth_chainId"}`,
				want:   []string{`up> {"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`},
				counts: map[string]int{"request eth_chainId": 1}},
			{do: "c1", in: `{"id":18446744073709551616,"jsonrpc":"2.0","method":"eth_blockNumber","params":[]}`,
				want: []string{`up> {"id":2,"jsonrpc":"2.0","method":"eth_blockNumber","params":[]}`}},
			{do: "c1", in: `{"jsonrpc":"2.0","id":1.0,"method":"eth_gasPrice"}`,
				want: []string{`up> {"jsonrpc":"2.0","id":3,"method":"eth_gasPrice"}`}},
			{do: "c1", in: `{"jsonrpc":"2.0","id":null,"method":"eth_syncing"}`,
				want: []string{`up> {"jsonrpc":"2.0","id":4,"method":"eth_syncing"}`}},
			// Answers come in any order; position never counts.
			{do: "up", in: `{"jsonrpc":"2.0","id":3,"result":"0x3b9aca00"}`,
				want:   []string{`c1< {"jsonrpc":"2.0","id":1.0,"result":"0x3b9aca00"}`},
				counts: map[string]int{"answered 0 upstream": 1}},
			{do: "up", in: `{"jsonrpc":"2.0","id":1,"result":"0x1"}`,
				want: []string{`c1< {"jsonrpc":"2.0","id":"a\"b","result":"0x1"}`}},
			{do: "up", in: `{"jsonrpc":"2.0","id":4,"result":false}`,
				want: []string{`c1< {"jsonrpc":"2.0","id":null,"result":false}`}},
			{do: "up", in: `{"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"boom"}}`,
				want:   []string{`c1< {"jsonrpc":"2.0","id":18446744073709551616,"error":{"code":-32000,"message":"boom"}}`},
				counts: map[string]int{"answered -32000 upstream": 1}},
		}},
		{name: "same_id_from_two_clients_each_gets_its_own", steps: []step{
			{do: "join"}, {do: "join"}, {do: "connect"},
			{do: "c1", in: `{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`,
				want: []string{`up> {"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`}},
			{do: "c2", in: `{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`,
				want: []string{`up> {"jsonrpc":"2.0","id":2,"method":"eth_chainId"}`}},
			{do: "up", in: `{"jsonrpc":"2.0","id":2,"result":"0x2"}`,
				want: []string{`c2< {"jsonrpc":"2.0","id":1,"result":"0x2"}`}},
			{do: "up", in: `{"jsonrpc":"2.0","id":1,"result":"0x1"}`,
				want: []string{`c1< {"jsonrpc":"2.0","id":1,"result":"0x1"}`}},
			{do: "up", in: `{"jsonrpc":"2.0","id":1,"result":"0x1"}`,
				want: []string{`drop unknown_id`}, counts: map[string]int{"dropped unknown_id": 1}},
		}},
		{name: "notification_forwarded_never_answered", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: `{"jsonrpc":"2.0","method":"eth_foo","params":[1]}`,
				want: []string{`up> {"jsonrpc":"2.0","method":"eth_foo","params":[1]}`, "no answer"}},
		}},
		{name: "notification_the_node_would_not_run_ignored", steps: []step{
			// The node answers no notification, whatever it makes of it:
			// muxd answers none either, and forwards none it reads
			// otherwise than the node.
			{do: "join"}, {do: "connect"},
			{do: "c1", in: `{"jsonrpc":"2.0","method":"eth_chainId","params":1}`, want: []string{"no answer"}},
			{do: "c1", in: `{"jsonrpc":"2.0","method":"eth_chainId","result":1}`, want: []string{"no answer"}},
			{do: "c1", in: `{"jsonrpc":"2.0","method":"eth_chainId","error":{}}`, want: []string{"no answer"}},
			{do: "c1", in: `{"jsonrpc":"2.0","method":"eth_chainId","method":"eth_foo"}`, want: []string{"no answer"}},
			// A member named like a JSON-RPC one but for case or escapes
			// (never forwarded: a node may read it as that member), in a
			// message no node reads as having an id.
			{do: "c1", in: `{"jsonrpc":"2.0","method":"eth_chainId","params":[],"Result":1}`, want: []string{"no answer"}},
			{do: "c1", in: `{"jsonrpc":"2.0","method":"eth_chainId","params":[],"para\u006ds":[]}`, want: []string{"no answer"}},
			{do: "c1", in: `[{"jsonrpc":"2.0","method":"admin_peers"},{"jsonrpc":"2.0","method":"eth_chainId","params":"x"}]`,
				want: []string{"no answer"}, counts: map[string]int{"dropped ignored_notification": 7}},
			// One a node may read as the id makes a request: answered.
			{do: "c1", in: `{"jsonrpc":"2.0","ID":1,"method":"eth_chainId"}`,
				want: []string{`c1< {"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request","data":{"reason":"member name differs from a JSON-RPC member only in case or escapes"}}}`}},
			// With an id they are requests, and invalid ones.
			{do: "c1", in: `{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":1}`,
				want: []string{`c1< {"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"invalid request","data":{"reason":"params must be an array or object"}}}`}},
			// A wrong version or method is answered even without an id,
			// as the node does.
			{do: "c1", in: `{"jsonrpc":"1.0","method":"eth_chainId","params":1}`,
				want: []string{`c1< {"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request","data":{"reason":"jsonrpc must be \"2.0\""}}}`}},
		}},
		{name: "notification_without_upstream_dropped", steps: []step{
			{do: "join"},
			{do: "c1", in: `{"jsonrpc":"2.0","method":"eth_foo"}`,
				want: []string{"no answer"}, counts: map[string]int{"dropped no_upstream": 1}},
		}},
		{name: "subscribe_as_notification_dropped", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: `{"jsonrpc":"2.0","method":"eth_subscribe","params":["newHeads"]}`,
				want: []string{"no answer"}},
			{do: "c1", in: `{"jsonrpc":"2.0","method":"eth_unsubscribe","params":["0xs1"]}`,
				want: []string{"no answer"}, counts: map[string]int{"dropped subscribe_notification": 2}},
		}},
		{name: "parse_error", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: `{"jsonrpc":"2.0","id":1,`,
				want:   []string{`c1< {"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`},
				counts: map[string]int{"answered -32700 muxd": 1}},
		}},
		{name: "empty_batch_is_one_error_object", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: ` [ ] `,
				want: []string{`c1< {"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"empty batch"}}`}},
		}},
		{name: "invalid_request_id_echoed_with_reason", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: `{"jsonrpc":"1.0","id":3,"method":"eth_chainId"}`,
				want: []string{`c1< {"jsonrpc":"2.0","id":3,"error":{"code":-32600,"message":"invalid request","data":{"reason":"jsonrpc must be \"2.0\""}}}`}},
		}},
		{name: "top_level_scalar_is_invalid", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: `42`,
				want: []string{`c1< {"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request","data":{"reason":"not an object"}}}`}},
		}},
		{name: "batch_of_non_objects", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: `[1,"x"]`,
				want: []string{`c1< [{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request","data":{"reason":"batch element is not an object"}}},{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request","data":{"reason":"batch element is not an object"}}}]`}},
		}},
		{name: "denied_method_never_sent", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: `{"jsonrpc":"2.0","id":2,"method":"ADMIN_peers"}`,
				want: []string{`c1< {"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"the method ADMIN_peers does not exist/is not available","data":{"reason":"denied"}}}`}},
			{do: "c1", in: `{"jsonrpc":"2.0","method":"admin_addPeer","params":["enode://x"]}`,
				want: []string{"no answer"}},
			{do: "c1", in: `{"jsonrpc":"2.0","id":3,"method":"debug_traceTransaction","params":["0x1"]}`,
				want: []string{`up> {"jsonrpc":"2.0","id":1,"method":"debug_traceTransaction","params":["0x1"]}`}},
		}},
		{name: "foreign_subscriptions_never_sent", steps: []step{
			// A node takes any *_subscribe/*_unsubscribe for one: forwarded,
			// an unsubscribe could cancel the subscription muxd holds for
			// everyone on the shared connection.
			{do: "join"}, {do: "connect"},
			{do: "c1", in: `{"jsonrpc":"2.0","id":1,"method":"debug_subscribe","params":["traceChain","0x1","0x2"]}`,
				want: []string{`c1< {"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"the method debug_subscribe does not exist/is not available","data":{"reason":"only eth_subscribe and eth_unsubscribe are shared"}}}`}},
			{do: "c1", in: `{"jsonrpc":"2.0","id":2,"method":"foo_unsubscribe","params":["0xs1"]}`,
				want: []string{`c1< {"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"the method foo_unsubscribe does not exist/is not available","data":{"reason":"only eth_subscribe and eth_unsubscribe are shared"}}}`}},
			{do: "c1", in: `[{"jsonrpc":"2.0","id":3,"method":"ETH_unsubscribe","params":["0xs1"]},{"jsonrpc":"2.0","id":4,"method":"eth_Subscribe","params":["newHeads"]}]`,
				want: []string{`c1< [{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"the method ETH_unsubscribe does not exist/is not available","data":{"reason":"only eth_subscribe and eth_unsubscribe are shared"}}},{"jsonrpc":"2.0","id":4,"error":{"code":-32601,"message":"the method eth_Subscribe does not exist/is not available","data":{"reason":"only eth_subscribe and eth_unsubscribe are shared"}}}]`}},
			{do: "c1", in: `{"jsonrpc":"2.0","id":5,"method":"eth_\u0075nsubscribe_x"}`,
				want: []string{`up> {"jsonrpc":"2.0","id":1,"method":"eth_\u0075nsubscribe_x"}`}},
			{do: "c1", in: `{"jsonrpc":"2.0","method":"shh_unsubscribe","params":["0xs1"]}`,
				want: []string{"no answer"}, counts: map[string]int{"dropped subscribe_notification": 1}},
			{do: "c1", in: `{"jsonrpc":"2.0","id":6,"method":"debug_\u0075nsubscribe","params":["0xs1"]}`,
				want: []string{`c1< {"jsonrpc":"2.0","id":6,"error":{"code":-32601,"message":"the method debug_unsubscribe does not exist/is not available","data":{"reason":"only eth_subscribe and eth_unsubscribe are shared"}}}`}},
		}},
		{name: "denied_by_a_custom_pattern", cfg: func(c *Config) { c.DenyMethods = []string{"x?_*"} }, steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: `{"jsonrpc":"2.0","id":1,"method":"xY_anything/at all"}`,
				want: []string{`c1< {"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"the method xY_anything/at all does not exist/is not available","data":{"reason":"denied"}}}`}},
			{do: "c1", in: `{"jsonrpc":"2.0","id":2,"method":"admin_peers"}`,
				want: []string{`up> {"jsonrpc":"2.0","id":1,"method":"admin_peers"}`}},
		}},
		{name: "refused_frame", steps: []step{
			{do: "join"},
			{do: "refuse c1",
				want: []string{`c1< {"jsonrpc":"2.0","id":null,"error":{"code":-32005,"message":"limit exceeded","data":{"reason":"message too large"}}}`}},
			{do: "refuse c2"},
		}},
		{name: "frame_from_unknown_client", steps: []step{
			{do: "connect"},
			{do: "c7", in: `{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`, want: []string{"no answer"}},
		}},
		{name: "subscriptions_refused_over_http", steps: []step{
			{do: "join http"}, {do: "connect"},
			{do: "c1", in: `{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}`,
				want: []string{`c1< {"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"notifications not supported"}}`}},
			{do: "c1", in: `{"jsonrpc":"2.0","id":2,"method":"eth_unsubscribe","params":["0xs1"]}`,
				want: []string{`c1< {"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"notifications not supported"}}`}},
		}},
	})
}

// TestLimits covers DESIGN §5's per-client and global limits.
func TestLimits(t *testing.T) {
	call := func(id string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"eth_blockNumber"}`
	}
	big := `{"jsonrpc":"2.0","id":1,"method":"eth_call","params":["` + strings.Repeat("a", 1100) + `"]}`
	runScripts(t, []scriptRow{
		{name: "batch_too_large", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: "[" + strings.Repeat(call("1")+",", 6) + call("1") + "]",
				want:   []string{`c1< {"jsonrpc":"2.0","id":null,"error":{"code":-32005,"message":"limit exceeded","data":{"reason":"batch too large"}}}`},
				counts: map[string]int{"limit batch_size": 1}},
		}},
		{name: "too_many_in_flight", steps: []step{
			{do: "join"}, {do: "join"}, {do: "connect"},
			{do: "c1", in: call("1"), want: []string{`up> {"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}`}},
			{do: "c1", in: call("2"), want: []string{`up> {"jsonrpc":"2.0","id":2,"method":"eth_blockNumber"}`}},
			{do: "c1", in: call("3"), want: []string{`up> {"jsonrpc":"2.0","id":3,"method":"eth_blockNumber"}`}},
			{do: "c1", in: call("4"), want: []string{`up> {"jsonrpc":"2.0","id":4,"method":"eth_blockNumber"}`}},
			{do: "c1", in: call("5"),
				want:   []string{`c1< {"jsonrpc":"2.0","id":5,"error":{"code":-32005,"message":"limit exceeded","data":{"reason":"too many requests in flight"}}}`},
				counts: map[string]int{"limit in_flight": 1}},
			// Another client is not held back.
			{do: "c2", in: call("5"), want: []string{`up> {"jsonrpc":"2.0","id":5,"method":"eth_blockNumber"}`}},
			{do: "up", in: `{"jsonrpc":"2.0","id":1,"result":"0x1"}`, want: []string{`c1< {"jsonrpc":"2.0","id":1,"result":"0x1"}`}},
			{do: "c1", in: call("6"), want: []string{`up> {"jsonrpc":"2.0","id":6,"method":"eth_blockNumber"}`}},
		}},
		{name: "held_bytes_one_request_always_passes", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: big, want: []string{`up> ` + big}},
			{do: "c1", in: call("2"),
				want:   []string{`c1< {"jsonrpc":"2.0","id":2,"error":{"code":-32005,"message":"limit exceeded","data":{"reason":"too many request bytes in flight"}}}`},
				counts: map[string]int{"limit held_bytes": 1}},
			{do: "up", in: `{"jsonrpc":"2.0","id":1,"result":"0x"}`, want: []string{`c1< {"jsonrpc":"2.0","id":1,"result":"0x"}`}},
			// A refused request took no upstream id.
			{do: "c1", in: call("3"), want: []string{`up> {"jsonrpc":"2.0","id":2,"method":"eth_blockNumber"}`}},
		}},
		{name: "held_bytes_total_bounds_all_clients", cfg: func(c *Config) { c.MaxHeldBytesTotal = 2000 }, steps: []step{
			{do: "join"}, {do: "join"}, {do: "connect"},
			{do: "c1", in: big, want: []string{`up> ` + big}},
			// c2 holds nothing, but all clients together would hold
			// past max_held_bytes_total.
			{do: "c2", in: big,
				want:   []string{`c2< {"jsonrpc":"2.0","id":1,"error":{"code":-32005,"message":"limit exceeded","data":{"reason":"too many request bytes in flight"}}}`},
				counts: map[string]int{"limit held_bytes_total": 1}},
			{do: "c2", in: call("2"), want: []string{`up> {"jsonrpc":"2.0","id":2,"method":"eth_blockNumber"}`}},
			{do: "up", in: `{"jsonrpc":"2.0","id":1,"result":"0x"}`, want: []string{`c1< {"jsonrpc":"2.0","id":1,"result":"0x"}`}},
			{do: "up", in: `{"jsonrpc":"2.0","id":2,"result":"0x1"}`, want: []string{`c2< {"jsonrpc":"2.0","id":2,"result":"0x1"}`}},
			// Answered, c1's request no longer counts.
			{do: "c2", in: big, want: []string{`up> {"jsonrpc":"2.0","id":3,"method":"eth_call","params":["` + strings.Repeat("a", 1100) + `"]}`}},
		}},
		{name: "too_many_waiting", steps: []step{
			{do: "join"}, {do: "join"},
			{do: "c1", in: call("1")},
			{do: "c1", in: call("2")},
			{do: "c2", in: call("3")},
			{do: "c2", in: call("4"),
				want:   []string{`c2< {"jsonrpc":"2.0","id":4,"error":{"code":-32002,"message":"upstream unavailable","data":{"reason":"too many requests waiting for the upstream"}}}`},
				counts: map[string]int{"limit waiting": 1}},
			// What waited goes out, in arrival order, on the next connection.
			{do: "connect", want: []string{
				`up> {"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}`,
				`up> {"jsonrpc":"2.0","id":2,"method":"eth_blockNumber"}`,
				`up> {"jsonrpc":"2.0","id":3,"method":"eth_blockNumber"}`,
			}},
		}},
		{name: "too_many_clients", steps: []step{
			{do: "join"}, {do: "join"}, {do: "join"},
			{do: "join", want: []string{"err " + ErrTooManyClients.Error()}, counts: map[string]int{"limit clients": 1}},
			{do: "gone c2"},
			{do: "join"},
		}},
	})
}

// TestNewRejectsBadConfig checks New's own errors.
func TestNewRejectsBadConfig(t *testing.T) {
	cfg := testConfig()
	cfg.NewSubscriptionID = func() string { return `"0x1"` }
	cfg.DenyMethods = []string{"admin _*"}
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), ErrDenyPattern.Error()) {
		t.Errorf("New with a bad deny pattern: %v, want %v", err, ErrDenyPattern)
	}
	cfg.DenyMethods = nil
	cfg.NewSubscriptionID = nil
	if _, err := New(cfg); err == nil {
		t.Error("New without NewSubscriptionID: no error")
	}
	cfg.NewSubscriptionID = func() string { return `"0x1"` }
	c, err := New(cfg) // no Observer: counts nothing, works all the same
	if err != nil {
		t.Fatal(err)
	}
	id, _ := c.Join(false)
	var e Effects
	frame := []byte(`{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}`)
	f, scanErr := router.ScanClient(frame, nil)
	c.ClientFrame(&e, id, frame, f, scanErr, t0)
	if c.Stats().Waiting != 1 {
		t.Errorf("Stats().Waiting = %d, want 1", c.Stats().Waiting)
	}
}

// TestClientFrameOtherScanError checks that a scan error other than the
// scanner's parse and empty-batch errors is answered as an invalid request.
func TestClientFrameOtherScanError(t *testing.T) {
	h := newHarness(t, nil)
	id := h.join(false)
	frame := []byte(`{}`)
	if !h.c.ClientFrame(&h.e, id, frame, router.Frame{}, fmt.Errorf("%w: odd", router.ErrInvalid), t0) {
		t.Error("ClientFrame reports no answer for a frame it answered")
	}
	want := []string{`c1< {"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request"}}`}
	if got := h.render(frame); !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestDropReasonNames checks the label of each drop reason's series.
func TestDropReasonNames(t *testing.T) {
	want := []string{"unknown_id", "null_id", "unknown_subscription", "malformed", "unexpected", "no_upstream", "subscribe_notification", "ignored_notification", "client_gone", "reason_9"}
	for r := DropUnknownID; r <= NumDropReasons; r++ {
		if got := r.String(); got != want[r] {
			t.Errorf("DropReason(%d) = %q, want %q", r, got, want[r])
		}
	}
}

// TestReleasedLargeRequests: the bytes of a request of 1 MiB or more are
// reported as released (Effects.Released) by the event that ends it, so
// that the shell hands that memory back to the OS; small ones are not.
func TestReleasedLargeRequests(t *testing.T) {
	large := `{"jsonrpc":"2.0","id":1,"method":"eth_call","params":["` + strings.Repeat("a", 1<<20) + `"]}`
	small := `{"jsonrpc":"2.0","id":2,"method":"eth_call","params":["a"]}`
	h := newHarness(t, func(c *Config) { c.MaxHeldBytes = 4 << 20 })
	h.run([]step{{do: "join"}, {do: "connect"}})
	h.run([]step{{do: "c1", in: large, want: []string{"up> " + large}}, {do: "c1", in: small, want: []string{"up> " + small}}})
	held := h.c.Held(1)
	h.run([]step{{do: "up", in: `{"jsonrpc":"2.0","id":2,"result":"0x"}`, want: []string{`c1< {"jsonrpc":"2.0","id":2,"result":"0x"}`}}})
	if h.e.Released != 0 {
		t.Errorf("a small request's end released %d, want 0", h.e.Released)
	}
	rest := h.c.Held(1)
	if rest >= held || rest < 1<<20 {
		t.Fatalf("held %d, then %d", held, rest)
	}
	h.run([]step{{do: "up", in: `{"jsonrpc":"2.0","id":1,"result":"0x"}`, want: []string{`c1< {"jsonrpc":"2.0","id":1,"result":"0x"}`}}})
	if h.e.Released != rest || h.c.Held(1) != 0 {
		t.Errorf("the large request's end released %d (held now %d), want %d", h.e.Released, h.c.Held(1), rest)
	}
}
