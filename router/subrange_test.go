package router

import (
	"errors"
	"testing"
)

func TestSplitSubscribeRange(t *testing.T) {
	tests := []struct {
		name     string
		params   string
		history  bool
		err      bool
		stripped string
		r        SubscribeRange
	}{
		{name: "plain logs", params: `["logs",{"address":"0x01"}]`},
		{name: "no filter", params: `["logs"]`},
		{name: "newHeads plain", params: `["newHeads"]`},
		{name: "fromBlock latest", params: `["logs",{"fromBlock":"latest"}]`},
		{name: "fromBlock earliest is the node's", params: `["logs",{"fromBlock":"earliest","toBlock":"0x5"}]`},
		{name: "fromBlock null", params: `["logs",{"fromBlock":null}]`},
		{name: "other subscription", params: `["syncing",{"fromBlock":"0x1"}]`},
		{name: "from", params: `["logs",{"address":"0x01","fromBlock":"0x10","topics":[]}]`, history: true,
			stripped: `["logs",{"address":"0x01","topics":[]}]`, r: SubscribeRange{From: 16}},
		{name: "from and to", params: `["logs",{"FROMBLOCK":"0x10","toBlock":"0x20"}]`, history: true,
			stripped: `["logs",{}]`, r: SubscribeRange{From: 16, To: 32, HasTo: true}},
		{name: "fromBlock 0x0 is ethclient's absent", params: `["logs",{"fromBlock":"0x0","toBlock":"latest"}]`},
		{name: "to latest", params: `["logs",{"fromBlock":"0x1","toBlock":"latest"}]`, history: true,
			stripped: `["logs",{}]`, r: SubscribeRange{From: 1}},
		{name: "newHeads from 0", params: `["newHeads",{"fromBlock":"0x0"}]`, history: true,
			stripped: `["newHeads"]`, r: SubscribeRange{}},
		{name: "to equal from", params: `["logs",{"fromBlock":"0x7","toBlock":"0x7"}]`, history: true,
			stripped: `["logs",{}]`, r: SubscribeRange{From: 7, To: 7, HasTo: true}},
		{name: "newHeads from", params: `["newHeads",{"fromBlock":"0xff"}]`, history: true,
			stripped: `["newHeads"]`, r: SubscribeRange{From: 255}},
		{name: "to below from", params: `["logs",{"fromBlock":"0x10","toBlock":"0xf"}]`, history: true, err: true},
		{name: "garbage from", params: `["logs",{"fromBlock":"banana"}]`, history: true, err: true},
		{name: "decimal from", params: `["logs",{"fromBlock":"16"}]`, history: true, err: true},
		{name: "number from", params: `["logs",{"fromBlock":16}]`, history: true, err: true},
		{name: "too big", params: `["logs",{"fromBlock":"0x8000000000000000"}]`, history: true, err: true},
		{name: "to pending", params: `["logs",{"fromBlock":"0x1","toBlock":"pending"}]`, history: true, err: true},
		{name: "to garbage", params: `["logs",{"fromBlock":"0x1","toBlock":{}}]`, history: true, err: true},
		{name: "blockHash", params: `["logs",{"fromBlock":"0x1","blockHash":"0x00"}]`, history: true, err: true},
		{name: "twice folded", params: `["logs",{"fromBlock":"0x1","FromBlock":"0x2"}]`, history: true, err: true},
		{name: "newHeads other member", params: `["newHeads",{"fromBlock":"0x1","full":true}]`, history: true, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stripped, r, history, err := SplitSubscribeRange([]byte(tt.params))
			if history != tt.history || (err != nil) != tt.err {
				t.Fatalf("history %v err %v, want history %v err %v", history, err, tt.history, tt.err)
			}
			if err != nil {
				if !errors.Is(err, ErrSubscribeRange) {
					t.Fatalf("error %v does not wrap ErrSubscribeRange", err)
				}
				return
			}
			if !history {
				return
			}
			if string(stripped) != tt.stripped || r != tt.r {
				t.Fatalf("got %s %+v, want %s %+v", stripped, r, tt.stripped, tt.r)
			}
		})
	}
}

// FuzzSplitSubscribeRange: any params either pass through (not history),
// or give an error wrapping ErrSubscribeRange, or give stripped params
// that key like any subscription, hold no range any more and a range with
// To >= From.
func FuzzSplitSubscribeRange(f *testing.F) {
	for _, s := range []string{
		`["logs",{"address":"0x01","fromBlock":"0x10","topics":[]}]`,
		`["logs",{"fromBlock":"0x10","toBlock":"0x20"}]`,
		`["newHeads",{"fromBlock":"0xff"}]`,
		`["logs",{"fromBlock":"latest"}]`,
		`["logs",{"fromBlock":"0x1","FromBlock":"0x2"}]`,
		`["logs",{"fromBlock":"0x10","toBlock":"0xf"}]`,
		`[]`, `{}`, `null`, `["logs",null]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, params []byte) {
		stripped, r, history, err := SplitSubscribeRange(params)
		if err != nil {
			if !history || !errors.Is(err, ErrSubscribeRange) {
				t.Fatalf("error %v with history %v", err, history)
			}
			return
		}
		if !history {
			return
		}
		if _, err := SubscriptionKey(stripped); err != nil {
			t.Fatalf("stripped params %s do not key: %v", stripped, err)
		}
		if s2, _, again, err := SplitSubscribeRange(stripped); again || err != nil || s2 != nil {
			t.Fatalf("stripped params %s still hold a range", stripped)
		}
		if r.HasTo && r.To < r.From {
			t.Fatalf("range %+v ends below its start", r)
		}
	})
}
