package core

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// sub is a client's eth_subscribe with id and params (raw JSON).
func sub(id, params string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"eth_subscribe","params":` + params + `}`
}

// unsub is a client's eth_unsubscribe of subscription id subID (raw JSON).
func unsub(id, subID string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"eth_unsubscribe","params":[` + subID + `]}`
}

// upSub is muxd's own eth_subscribe under upstream id uid.
func upSub(uid, params string) string {
	return `{"jsonrpc":"2.0","id":` + uid + `,"method":"eth_subscribe","params":` + params + `}`
}

// upUnsub is muxd's own eth_unsubscribe of the node's id upID.
func upUnsub(uid, upID string) string {
	return `{"jsonrpc":"2.0","id":` + uid + `,"method":"eth_unsubscribe","params":[` + upID + `]}`
}

// push is an eth_subscription push for subscription id subID (raw JSON).
func push(subID, result string) string {
	return `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":` + subID + `,"result":` + result + `}}`
}

const (
	heads    = `["newHeads"]`
	headsKey = `["newHeads"]`
)

// refusal is the node's error to eth_subscribe under id.
func refusal(id string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32000,"message":"no such subscription"}}`
}

// liveHeads is the start of a script where client 1 holds subscription
// 0xs1 of newHeads, live upstream as 0xaa (muxd's eth_subscribe had
// upstream id 1). Client 2 has joined too.
func liveHeads(more []step) []step {
	return append([]step{
		{do: "join"}, {do: "join"}, {do: "connect"},
		{do: "c1", in: sub("1", heads), want: []string{"up> " + upSub("1", heads)}},
		{do: "up", in: res("1", `"0xaa"`), want: []string{`c1< ` + res("1", `"0xs1"`)},
			keys: []string{headsKey + " live 1"}},
	}, more...)
}

// failedHeads goes on from liveHeads to a key that failed: the node
// refused the resubscribe after a reconnect (upstream id 2), while client
// 2 waited on it with its eth_subscribe 5 (subscription 0xs2).
func failedHeads(more []step) []step {
	return liveHeads(append([]step{
		{do: "lost", keys: []string{headsKey + " idle 1"}},
		{do: "connect", want: []string{"up> " + upSub("2", heads)}, keys: []string{headsKey + " resubscribing 1"}},
		{do: "c2", in: sub("5", heads), keys: []string{headsKey + " resubscribing 2"}},
		{do: "up", in: refusal("2"), want: []string{`c2< ` + refusal("5")}, keys: []string{headsKey + " failed 1"}},
	}, more...))
}

// TestKeyTransitions has one row per transition of a subscription key's
// state machine, as the comment on keyState lists them, named after it.
func TestKeyTransitions(t *testing.T) {
	runScripts(t, []scriptRow{
		{name: "new_to_idle", steps: []step{
			{do: "join"},
			{do: "c1", in: sub("1", heads), keys: []string{headsKey + " idle 1"}},
		}},
		{name: "idle_to_subscribing", steps: []step{
			{do: "join"},
			{do: "c1", in: sub("1", heads), keys: []string{headsKey + " idle 1"}},
			{do: "connect", want: []string{"up> " + upSub("1", heads)}, keys: []string{headsKey + " subscribing 1"}},
			{do: "up", in: res("1", `"0xaa"`), want: []string{`c1< ` + res("1", `"0xs1"`)}},
		}},
		{name: "idle_to_resubscribing", steps: liveHeads([]step{
			{do: "lost", keys: []string{headsKey + " idle 1"}},
			{do: "connect", want: []string{"up> " + upSub("2", heads)}, keys: []string{headsKey + " resubscribing 1"}},
		})},
		{name: "failed_to_resubscribing", steps: failedHeads([]step{
			// A new member asks while the key is failed: tried again at once.
			{do: "c2", in: sub("7", heads), want: []string{"up> " + upSub("3", heads)},
				keys: []string{headsKey + " resubscribing 2"}},
			{do: "up", in: res("3", `"0xcc"`), want: []string{`c2< ` + res("7", `"0xs3"`)},
				keys: []string{headsKey + " live 2"}},
			{do: "up", in: push(`"0xcc"`, "1"), want: []string{`c1< ` + push(`"0xs1"`, "1"), `c2< ` + push(`"0xs3"`, "1")}},
		})},
		{name: "subscribing_to_live", steps: []step{
			{do: "join"}, {do: "join"}, {do: "connect"},
			{do: "c1", in: sub("1", heads), want: []string{"up> " + upSub("1", heads)}, keys: []string{headsKey + " subscribing 1"}},
			{do: "c2", in: sub(`"x"`, `["newHeads"]`), keys: []string{headsKey + " subscribing 2"}},
			{do: "up", in: res("1", `"0xaa"`),
				want: []string{`c1< ` + res("1", `"0xs1"`), `c2< ` + res(`"x"`, `"0xs2"`)},
				keys: []string{headsKey + " live 2"}},
		}},
		{name: "resubscribing_to_live", steps: liveHeads([]step{
			{do: "lost"},
			{do: "connect", want: []string{"up> " + upSub("2", heads)}},
			{do: "c2", in: sub("5", heads)},
			// The member that had pushes keeps its id; the waiter gets its own.
			{do: "up", in: res("2", `"0xbb"`), want: []string{`c2< ` + res("5", `"0xs2"`)},
				keys: []string{headsKey + " live 2"}},
			{do: "up", in: push(`"0xbb"`, "7"), want: []string{`c1< ` + push(`"0xs1"`, "7"), `c2< ` + push(`"0xs2"`, "7")}},
			{do: "up", in: push(`"0xaa"`, "7"), want: []string{"drop unknown_subscription"}},
		})},
		{name: "subscribing_to_gone_refused", steps: []step{
			{do: "join"}, {do: "join"}, {do: "connect"},
			{do: "c1", in: sub("1", heads), want: []string{"up> " + upSub("1", heads)}},
			{do: "c2", in: sub("2", heads)},
			{do: "up", in: refusal("1"), want: []string{`c1< ` + refusal("1"), `c2< ` + refusal("2")}, keys: []string{}},
			// A later eth_subscribe starts over.
			{do: "c1", in: sub("3", heads), want: []string{"up> " + upSub("2", heads)}, keys: []string{headsKey + " subscribing 1"}},
		}},
		{name: "resubscribing_to_failed", steps: failedHeads([]step{
			// The member that stayed still gets pushes once the key is
			// live again, on the next connection.
			{do: "lost", keys: []string{headsKey + " idle 1"}},
			{do: "connect", want: []string{"up> " + upSub("3", heads)}},
			{do: "up", in: res("3", `"0xcc"`), keys: []string{headsKey + " live 1"}},
			{do: "up", in: push(`"0xcc"`, "1"), want: []string{`c1< ` + push(`"0xs1"`, "1")}},
		})},
		// Not in keyState's list: a refused subscribe whose key keeps a
		// member that has had no pushes yet, because its answer went into
		// a batch still open when the connection was lost. The member
		// stays, as a resubscribing key's do, and the key is failed.
		{name: "subscribing_to_failed_member_in_an_open_batch", steps: liveHeads([]step{
			{do: "c2", in: `[` + sub("1", heads) + `,` + req("2", "eth_chainId") + `]`, want: []string{`up> ` + req("2", "eth_chainId")}},
			{do: "c1", in: unsub("2", `"0xs1"`), want: []string{`c1< ` + res("2", "true")}, keys: []string{headsKey + " live 1"}},
			{do: "lost", keys: []string{headsKey + " idle 1"}},
			{do: "connect", want: []string{"up> " + upSub("3", heads), "up> " + req("2", "eth_chainId")}, keys: []string{headsKey + " subscribing 1"}},
			{do: "up", in: refusal("3"), keys: []string{headsKey + " failed 1"}},
			{do: "up", in: res("2", `"0x1"`), want: []string{`c2< [` + res("1", `"0xs2"`) + `,` + res("2", `"0x1"`) + `]`}},
			{do: "lost"},
			{do: "connect", want: []string{"up> " + upSub("4", heads)}, keys: []string{headsKey + " resubscribing 1"}},
		})},
		// failed -> subscribing needs a failed key none of whose members
		// has had pushes: the one above, before its batch is answered.
		{name: "failed_to_subscribing", steps: liveHeads([]step{
			{do: "c2", in: `[` + sub("1", heads) + `,` + req("2", "eth_chainId") + `]`, want: []string{`up> ` + req("2", "eth_chainId")}},
			{do: "c1", in: unsub("2", `"0xs1"`), want: []string{`c1< ` + res("2", "true")}},
			{do: "lost"},
			{do: "connect", want: []string{"up> " + upSub("3", heads), "up> " + req("2", "eth_chainId")}},
			{do: "up", in: refusal("3"), keys: []string{headsKey + " failed 1"}},
			{do: "c1", in: sub("3", heads), want: []string{"up> " + upSub("4", heads)}, keys: []string{headsKey + " subscribing 2"}},
			{do: "up", in: res("4", `"0xcc"`), want: []string{`c1< ` + res("3", `"0xs3"`)}, keys: []string{headsKey + " live 2"}},
			{do: "up", in: push(`"0xcc"`, "1"), want: []string{`c1< ` + push(`"0xs3"`, "1")}},
			// The push held for c2 follows its batch's array.
			{do: "up", in: res("2", `"0x1"`), want: []string{`c2< [` + res("1", `"0xs2"`) + `,` + res("2", `"0x1"`) + `]`, `c2< ` + push(`"0xs2"`, "1")}},
			{do: "up", in: push(`"0xcc"`, "2"), want: []string{`c2< ` + push(`"0xs2"`, "2"), `c1< ` + push(`"0xs3"`, "2")}},
		})},
		{name: "subscribing_to_idle_lost", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: sub("1", heads), want: []string{"up> " + upSub("1", heads)}},
			{do: "lost", keys: []string{headsKey + " idle 1"}},
			// Nobody had pushes: subscribing again, and the waiter is answered.
			{do: "connect", want: []string{"up> " + upSub("2", heads)}, keys: []string{headsKey + " subscribing 1"}},
			{do: "up", in: res("2", `"0xbb"`), want: []string{`c1< ` + res("1", `"0xs1"`)}},
		}},
		{name: "resubscribing_to_idle_lost", steps: liveHeads([]step{
			{do: "lost"},
			{do: "connect", want: []string{"up> " + upSub("2", heads)}, keys: []string{headsKey + " resubscribing 1"}},
			{do: "lost", keys: []string{headsKey + " idle 1"}},
			{do: "connect", want: []string{"up> " + upSub("3", heads)}, keys: []string{headsKey + " resubscribing 1"}},
		})},
		{name: "live_to_idle_lost", steps: liveHeads([]step{
			{do: "lost", keys: []string{headsKey + " idle 1"}},
			{do: "up 1", in: push(`"0xaa"`, "1")},
		})},
		{name: "failed_to_idle_lost", steps: failedHeads([]step{
			{do: "lost", keys: []string{headsKey + " idle 1"}},
		})},
		{name: "live_to_unsubscribing", steps: liveHeads([]step{
			{do: "c1", in: unsub("2", `"0xs1"`),
				want: []string{`c1< ` + res("2", "true"), "up> " + upUnsub("2", `"0xaa"`)},
				keys: []string{}},
			// The node's answer to muxd's own eth_unsubscribe goes nowhere.
			{do: "up", in: res("2", "true")},
			{do: "up", in: push(`"0xaa"`, "1"), want: []string{"drop unknown_subscription"}},
		})},
		{name: "live_to_unsubscribing_when_the_last_client_leaves", steps: liveHeads([]step{
			{do: "c2", in: sub("1", heads), want: []string{`c2< ` + res("1", `"0xs2"`)}, keys: []string{headsKey + " live 2"}},
			{do: "gone c1", keys: []string{headsKey + " live 1"}},
			{do: "gone c2", want: []string{"up> " + upUnsub("2", `"0xaa"`)}, keys: []string{}},
		})},
		{name: "idle_to_gone", steps: []step{
			{do: "join"},
			{do: "c1", in: sub("1", heads), keys: []string{headsKey + " idle 1"}},
			{do: "gone c1", keys: []string{}},
			{do: "connect"},
		}},
		{name: "subscribing_to_gone", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: sub("1", heads), want: []string{"up> " + upSub("1", heads)}},
			{do: "gone c1", keys: []string{}},
			// The node's late answer is unsubscribed at once.
			{do: "up", in: res("1", `"0xaa"`), want: []string{"up> " + upUnsub("2", `"0xaa"`)}},
		}},
		{name: "resubscribing_to_gone", steps: liveHeads([]step{
			{do: "lost"},
			{do: "connect", want: []string{"up> " + upSub("2", heads)}},
			{do: "c1", in: unsub("2", `"0xS1"`), want: []string{`c1< ` + res("2", "true")}, keys: []string{}},
			{do: "up", in: res("2", `"0xbb"`), want: []string{"up> " + upUnsub("3", `"0xbb"`)}},
		})},
		{name: "failed_to_gone", steps: failedHeads([]step{
			{do: "c1", in: unsub("2", `"0xs1"`), want: []string{`c1< ` + res("2", "true")}, keys: []string{}},
		})},
	})
}

// TestSubscribeAnswers covers the answers to eth_subscribe that do not
// belong to the key's current attempt, and waiters that time out.
func TestSubscribeAnswers(t *testing.T) {
	runScripts(t, []scriptRow{
		{name: "answer_to_an_earlier_attempt_is_unsubscribed", steps: []step{
			{do: "join"}, {do: "join"}, {do: "connect"},
			{do: "c1", in: sub("1", heads), want: []string{"up> " + upSub("1", heads)}},
			{do: "gone c1"},
			{do: "c2", in: sub("1", heads), want: []string{"up> " + upSub("2", heads)}},
			{do: "up", in: res("1", `"0xaa"`), want: []string{"up> " + upUnsub("3", `"0xaa"`)}, keys: []string{headsKey + " subscribing 1"}},
			{do: "up", in: res("2", `"0xbb"`), want: []string{`c2< ` + res("1", `"0xs2"`)}, keys: []string{headsKey + " live 1"}},
		}},
		{name: "refusal_of_an_earlier_attempt_changes_nothing", steps: []step{
			{do: "join"}, {do: "join"}, {do: "connect"},
			{do: "c1", in: sub("1", heads), want: []string{"up> " + upSub("1", heads)}},
			{do: "gone c1"},
			{do: "c2", in: sub("1", heads), want: []string{"up> " + upSub("2", heads)}},
			{do: "up", in: refusal("1"), keys: []string{headsKey + " subscribing 1"}},
			{do: "up", in: res("2", `"0xbb"`), want: []string{`c2< ` + res("1", `"0xs2"`)}},
		}},
		{name: "result_that_is_no_subscription_id_is_a_refusal", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: sub("1", heads), want: []string{"up> " + upSub("1", heads)}},
			{do: "up", in: res("1", "null"), want: []string{`c1< ` + res("1", "null")}, keys: []string{}},
		}},
		{name: "waiters_time_out_and_the_late_answer_is_unsubscribed", steps: []step{
			{do: "join"}, {do: "join"}, {do: "connect"},
			{do: "c1", in: sub("1", heads), want: []string{"up> " + upSub("1", heads)}},
			{do: "c2", in: sub("2", heads), at: 3 * sec},
			{do: "tick", at: 10 * sec,
				want: []string{`c1< {"jsonrpc":"2.0","id":1,"error":{"code":-32002,"message":"request timed out"}}`},
				keys: []string{headsKey + " subscribing 1"}},
			{do: "tick", at: 13 * sec,
				want: []string{`c2< {"jsonrpc":"2.0","id":2,"error":{"code":-32002,"message":"request timed out"}}`},
				keys: []string{}},
			{do: "up", in: res("1", `"0xaa"`), want: []string{"up> " + upUnsub("2", `"0xaa"`)}},
		}},
		{name: "waiter_times_out_without_upstream", steps: []step{
			{do: "join"},
			{do: "c1", in: sub("1", heads)},
			{do: "tick", at: 10 * sec,
				want: []string{`c1< {"jsonrpc":"2.0","id":1,"error":{"code":-32002,"message":"request timed out"}}`},
				keys: []string{}},
			{do: "connect"},
		}},
		{name: "live_key_keeps_its_members_when_a_waiter_times_out", steps: liveHeads([]step{
			{do: "lost"},
			{do: "connect", want: []string{"up> " + upSub("2", heads)}},
			{do: "c2", in: sub("5", heads), at: 1 * sec},
			{do: "tick", at: 11 * sec,
				want: []string{`c2< {"jsonrpc":"2.0","id":5,"error":{"code":-32002,"message":"request timed out"}}`},
				keys: []string{headsKey + " resubscribing 1"}},
		})},
	})
}

// TestSubscriptions covers layer 2 (DESIGN §2): keys shared by canonical
// params, pushes fanned out under each holder's id, eth_unsubscribe of a
// client's own subscriptions only, the subscription limit, and pushes held
// until a batch that subscribed has been answered.
func TestSubscriptions(t *testing.T) {
	logsA := `["logs",{"address":"0xAB","topics":["0xCD"]}]`
	logsB := `["logs", {"topics":["0xcd"], "address":"0xab"}]`
	logsKey := `["logs",{"address":"0xab","topics":["0xcd"]}]`
	runScripts(t, []scriptRow{
		{name: "identical_params_share_one_upstream_subscription", steps: []step{
			{do: "join"}, {do: "join"}, {do: "join"}, {do: "connect"},
			{do: "c1", in: sub("1", logsA), want: []string{"up> " + upSub("1", logsA)}},
			{do: "c2", in: sub("1", logsB), keys: []string{logsKey + " subscribing 2"}},
			{do: "c3", in: sub("1", heads), want: []string{"up> " + upSub("2", heads)}},
			{do: "up", in: res("1", `"0xaa"`), want: []string{`c1< ` + res("1", `"0xs1"`), `c2< ` + res("1", `"0xs2"`)}},
			{do: "up", in: res("2", `"0xbb"`), want: []string{`c3< ` + res("1", `"0xs3"`)}},
			// A live key answers a newcomer at once.
			{do: "c3", in: sub("2", logsB), want: []string{`c3< ` + res("2", `"0xs4"`)}, keys: []string{logsKey + " live 3", headsKey + " live 1"}},
			{do: "up", in: push(`"0xaa"`, `{"n":1}`), want: []string{
				`c1< ` + push(`"0xs1"`, `{"n":1}`), `c2< ` + push(`"0xs2"`, `{"n":1}`), `c3< ` + push(`"0xs4"`, `{"n":1}`),
			}, counts: map[string]int{"pushed": 3}},
			{do: "up", in: `[` + push(`"0xbb"`, "1") + `,` + push(`"0xaa"`, "2") + `]`, want: []string{
				`c3< ` + push(`"0xs3"`, "1"),
				`c1< ` + push(`"0xs1"`, "2"), `c2< ` + push(`"0xs2"`, "2"), `c3< ` + push(`"0xs4"`, "2"),
			}},
		}},
		{name: "unsubscribe_only_ones_own", steps: liveHeads([]step{
			{do: "c2", in: sub("1", heads), want: []string{`c2< ` + res("1", `"0xs2"`)}},
			{do: "c2", in: unsub("2", `"0xs1"`), want: []string{`c2< ` + res("2", "false")}, keys: []string{headsKey + " live 2"}},
			{do: "c2", in: unsub("3", `"0xs2"`), want: []string{`c2< ` + res("3", "true")}, keys: []string{headsKey + " live 1"}},
			{do: "c2", in: unsub("4", `"0xs2"`), want: []string{`c2< ` + res("4", "false")}},
			{do: "up", in: push(`"0xaa"`, "1"), want: []string{`c1< ` + push(`"0xs1"`, "1")}},
		})},
		// A client cannot unsubscribe a subscription it has not been told
		// of (ids are random in muxd; the counter here makes one
		// guessable): its eth_subscribe must still get exactly one answer.
		{name: "unsubscribe_of_a_subscription_still_being_set_up", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: sub("1", heads), want: []string{"up> " + upSub("1", heads)}},
			{do: "c1", in: unsub("2", `"0xs1"`), want: []string{`c1< ` + res("2", "false")}, keys: []string{headsKey + " subscribing 1"}},
			{do: "up", in: res("1", `"0xaa"`), want: []string{`c1< ` + res("1", `"0xs1"`)}},
			{do: "begin", want: []string{"idle"}},
		}},
		// A buggy node answers a second subscription (another key) with
		// the id of the live one: its pushes could not be told apart.
		// The key live first keeps the id and its pushes; the second
		// fails with muxd's error, and nothing is unsubscribed (that
		// would end the first).
		{name: "node_reuses_a_live_subscription_id", steps: liveHeads([]step{
			{do: "c2", in: sub("7", `["newPendingTransactions"]`), want: []string{"up> " + upSub("2", `["newPendingTransactions"]`)}},
			{do: "up", in: res("2", `"0xaa"`),
				want: []string{`c2< {"jsonrpc":"2.0","id":7,"error":{"code":-32002,"message":"upstream unavailable","data":{"reason":"upstream gave the subscription an id already in use"}}}`},
				keys: []string{headsKey + " live 1"}},
			{do: "up", in: push(`"0xaa"`, "1"), want: []string{`c1< ` + push(`"0xs1"`, "1")}},
			{do: "c2", in: sub("8", `["newPendingTransactions"]`), want: []string{"up> " + upSub("3", `["newPendingTransactions"]`)}},
			{do: "up", in: res("3", `"0xbb"`), want: []string{`c2< ` + res("8", `"0xs3"`)}},
		})},
		{name: "unsubscribe_with_bad_params", steps: liveHeads([]step{
			{do: "c1", in: `{"jsonrpc":"2.0","id":2,"method":"eth_unsubscribe"}`,
				want: []string{`c1< {"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"invalid params","data":{"reason":"eth_unsubscribe takes one subscription id"}}}`}},
			{do: "c1", in: `{"jsonrpc":"2.0","id":3,"method":"eth_unsubscribe","params":["0xs1","0xs2"]}`,
				want: []string{`c1< {"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"invalid params","data":{"reason":"eth_unsubscribe takes one subscription id"}}}`},
				keys: []string{headsKey + " live 1"}},
		})},
		{name: "subscribe_with_bad_params", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: `{"jsonrpc":"2.0","id":1,"method":"eth_subscribe"}`,
				want: []string{`c1< {"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"invalid params","data":{"reason":"eth_subscribe params must be an array starting with the subscription name"}}}`}},
			{do: "c1", in: sub("2", `[1]`),
				want: []string{`c1< {"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"invalid params","data":{"reason":"eth_subscribe params must be an array starting with the subscription name"}}}`},
				keys: []string{}},
		}},
		{name: "too_many_subscriptions", steps: liveHeads([]step{
			{do: "c1", in: sub("2", heads), want: []string{`c1< ` + res("2", `"0xs2"`)}},
			{do: "c1", in: sub("3", heads),
				want:   []string{`c1< {"jsonrpc":"2.0","id":3,"error":{"code":-32005,"message":"limit exceeded","data":{"reason":"too many subscriptions"}}}`},
				counts: map[string]int{"limit subscriptions": 1}},
			{do: "c1", in: unsub("4", `"0xs1"`), want: []string{`c1< ` + res("4", "true")}},
			{do: "c1", in: sub("5", heads), want: []string{`c1< ` + res("5", `"0xs3"`)}},
		})},
		{name: "pushes_held_until_the_subscribing_batch_is_answered", steps: liveHeads([]step{
			{do: "c2", in: `[` + sub("1", heads) + `,` + req("2", "eth_chainId") + `]`,
				want: []string{`up> ` + req("2", "eth_chainId")}},
			{do: "up", in: push(`"0xaa"`, "1"), want: []string{`c1< ` + push(`"0xs1"`, "1")}},
			{do: "up", in: push(`"0xaa"`, "2"), want: []string{`c1< ` + push(`"0xs1"`, "2")}},
			{do: "up", in: res("2", `"0x1"`), want: []string{
				`c2< [` + res("1", `"0xs2"`) + `,` + res("2", `"0x1"`) + `]`,
				`c2< ` + push(`"0xs2"`, "1"),
				`c2< ` + push(`"0xs2"`, "2"),
			}},
			{do: "up", in: push(`"0xaa"`, "3"), want: []string{`c1< ` + push(`"0xs1"`, "3"), `c2< ` + push(`"0xs2"`, "3")}},
		})},
		{name: "held_pushes_past_the_queue_bound_cut_the_client", steps: liveHeads([]step{
			{do: "c2", in: `[` + sub("1", heads) + `,` + req("2", "eth_chainId") + `]`,
				want: []string{`up> ` + req("2", "eth_chainId")}},
			{do: "up", in: push(`"0xaa"`, `"`+strings.Repeat("x", 100)+`"`), want: []string{`c1< ` + push(`"0xs1"`, `"`+strings.Repeat("x", 100)+`"`)}},
			{do: "up", in: push(`"0xaa"`, `"`+strings.Repeat("y", 100)+`"`), want: []string{`c1< ` + push(`"0xs1"`, `"`+strings.Repeat("y", 100)+`"`), "slow c2"}},
		})},
		{name: "batch_with_subscribe_answered_by_muxd_alone", steps: liveHeads([]step{
			{do: "c2", in: `[` + sub("1", heads) + `,` + req("2", "admin_peers") + `]`,
				want: []string{`c2< [` + res("1", `"0xs2"`) + `,{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"the method admin_peers does not exist/is not available","data":{"reason":"denied"}}}]`}},
			{do: "up", in: push(`"0xaa"`, "1"), want: []string{`c1< ` + push(`"0xs1"`, "1"), `c2< ` + push(`"0xs2"`, "1")}},
		})},
		{name: "batch_that_subscribes_a_new_key", steps: []step{
			{do: "join"}, {do: "connect"},
			{do: "c1", in: `[` + sub("1", heads) + `,` + req("2", "eth_chainId") + `]`,
				want: []string{"up> " + upSub("1", heads), `up> ` + req("2", "eth_chainId")}},
			{do: "up", in: res("2", `"0x1"`)},
			{do: "up", in: res("1", `"0xaa"`), want: []string{`c1< [` + res("1", `"0xs1"`) + `,` + res("2", `"0x1"`) + `]`}},
			{do: "up", in: push(`"0xaa"`, "1"), want: []string{`c1< ` + push(`"0xs1"`, "1")}},
		}},
	})
}

// TestSubscriptionParamsHeld: a subscription holds its params against
// max_held_bytes for as long as it lives, so a client cannot make muxd hold
// more through subscriptions (a logs filter padded with members the node
// ignores) than through requests. The first passes whatever its size; one
// that would take the client past the bound gets -32005; an unsubscribe
// gives the bytes back.
func TestSubscriptionParamsHeld(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxHeldBytes = 1000 })
	h.join(false)
	h.connect()
	fat := func(id, addr string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"eth_subscribe","params":["logs",{"address":"` + addr + `","junk":"` + strings.Repeat("j", 600) + `"}]}`
	}
	has := func(out []string, s string) bool {
		return slices.ContainsFunc(out, func(l string) bool { return strings.Contains(l, s) })
	}
	if out := h.clientFrame(1, fat("1", "0xa1")); !has(out, "up> ") {
		t.Fatalf("first subscription: %v, want it sent upstream", out)
	}
	h.upstreamFrame(0, res("1", `"0xaa"`), false)
	if held := h.c.Held(1); held < 1200 {
		t.Fatalf("held %d after a subscription with 600 bytes of params, want its params and key", held)
	}
	if out := h.clientFrame(1, fat("2", "0xa2")); !has(out, "-32005") || !has(out, "too many request bytes in flight") || has(out, "up> ") {
		t.Fatalf("second subscription: %v, want -32005 too many request bytes in flight", out)
	}
	if out := h.clientFrame(1, `{"jsonrpc":"2.0","id":3,"method":"eth_unsubscribe","params":["0xs1"]}`); !has(out, `"result":true`) {
		t.Fatalf("unsubscribe: %v", out)
	}
	if held := h.c.Held(1); held != 0 {
		t.Fatalf("held %d after the unsubscribe, want 0", held)
	}
	if out := h.clientFrame(1, fat("4", "0xa3")); !has(out, "up> ") {
		t.Fatalf("subscription after the unsubscribe: %v, want it sent upstream", out)
	}
}

// TestRefusedSubscriptionNote: the warning for a subscription the node
// refused is one a client can cause at will, with params of its choosing,
// so it is marked for the shell's rate limit and carries the key cut to
// maxLoggedKey bytes, whatever the params' size.
func TestRefusedSubscriptionNote(t *testing.T) {
	for _, pad := range []int{0, 4 << 20} {
		t.Run(strconv.Itoa(pad), func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.MaxHeldBytes = 64 << 20 })
			h.join(false)
			h.connect()
			params := `["logs",{"address":"0xzz","pad":"` + strings.Repeat("A", pad) + `"}]`
			h.clientFrame(1, sub("1", params))
			h.upstreamFrame(0, refusal("1"), false)
			var found bool
			for _, n := range h.e.Notes {
				if n.Msg != "upstream refused a subscription" {
					continue
				}
				found = true
				if n.Limited != LimitedSubscriptionRefused || n.Drop || n.Info {
					t.Errorf("note kind: Limited %v Drop %v Info %v, want a limited warning", n.Limited, n.Drop, n.Info)
				}
				args := map[any]any{}
				for i := 0; i+1 < len(n.Args); i += 2 {
					args[n.Args[i]] = n.Args[i+1]
				}
				key, _ := args["key"].(string)
				if len(key) > maxLoggedKey+len("…") || !strings.HasPrefix(key, `["logs",`) {
					t.Errorf("key in the note: %d bytes, %.40q…; want at most %d and the key's start", len(key), key, maxLoggedKey+len("…"))
				}
				if kb, _ := args["key_bytes"].(int); kb < pad {
					t.Errorf("key_bytes %d, want the whole key's length (at least %d)", kb, pad)
				}
			}
			if !found {
				t.Fatalf("no note for the refusal; notes: %v", h.e.Notes)
			}
		})
	}
}
