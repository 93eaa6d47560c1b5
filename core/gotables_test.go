package core

import (
	"fmt"
	"strings"
	"testing"
)

// scriptRow is a script written as a Go table rather than a testdata file:
// the rule books added while the scripts moved to testdata/*.txt (fair
// shares, history subscriptions, an answer past the read limit) are still
// Go tables, played by runScripts with the same closing invariants as
// TestScripts. They move to testdata when their config can be written as
// text (config Field=value).
type scriptRow struct {
	name  string
	cfg   func(*Config)
	steps []step
}

// runScripts plays each row on a fresh harness, as a subtest, checks the
// harness's closing invariants, and plays it again without an Observer
// (counting must not change what the core does).
func runScripts(t *testing.T, rows []scriptRow) {
	t.Helper()
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			h := newHarness(t, row.cfg)
			h.run(row.steps)
			h.checkGauges()
			h = newHarness(t, func(c *Config) {
				if row.cfg != nil {
					row.cfg(c)
				}
				c.Observer = nil
			})
			h.run(withoutCounts(row.steps))
		})
	}
}

// timedOut and lostErr are muxd's -32002 answers for id.
func timedOut(id string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32002,"message":"request timed out"}}`
}

func lostErr(id string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32002,"message":"upstream unavailable","data":{"reason":"connection lost"}}}`
}

// upSub is muxd's own eth_subscribe under upstream id uid.
func upSub(uid, params string) string {
	return `{"jsonrpc":"2.0","id":` + uid + `,"method":"eth_subscribe","params":` + params + `}`
}

// mined is a log of block n (whose hash is 64 times h) at index idx.
func mined(n, idx int, h string) string {
	return fmt.Sprintf(`{"address":"0x01","topics":[],"data":"0x","blockNumber":"0x%x","blockHash":"0x%s",`+
		`"transactionHash":"0x%s","transactionIndex":"0x0","logIndex":"0x%x","removed":false}`,
		n, strings.Repeat(h, 64), strings.Repeat("f", 64), idx)
}

// unsub is a client's eth_unsubscribe of subID (raw JSON) under id.
func unsub(id, subID string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"eth_unsubscribe","params":[` + subID + `]}`
}
