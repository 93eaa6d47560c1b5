package core

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/muxd/muxd/gapfill"
	"github.com/muxd/muxd/router"
)

// This file connects the core to package gapfill, the pure state machine
// that decides what a subscription key has missed and how to fill it. It
// only turns the machine's events and effects into the core's terms:
//
//   - events: a push for a live key (push), a key becoming live
//     (subscribeAnswered), the answer to one of the machine's requests
//     (response, Kind router.KindBackfill), Tick, the connection lost
//     (UpstreamLost), a key's last subscriber gone (detach);
//   - effects: requests sent as muxd's own (router.Internal, with a
//     deadline so the pending table cannot keep them), pushes fanned out to
//     the key's members in order, counters.

// applyGap carries out the machine's effects. live is the push of the
// event (nil for other events).
func (c *Core) applyGap(e *Effects, g gapfill.Effects, live *sharedPush, now time.Time) {
	for _, r := range g.Sends {
		if c.gen == 0 {
			// No connection: the machine times it out and retries or
			// gives up (in practice it is told of the loss first).
			continue
		}
		c.sendGap(e, r, now)
	}
	for _, d := range g.Deliveries {
		if mem := c.hist[d.Key]; mem != nil {
			c.deliverHistory(e, mem, d, live)
			continue
		}
		sh := c.subs.byKey[d.Key]
		if sh == nil {
			continue
		}
		if d.Live {
			if live != nil {
				c.fanout(e, sh, *live)
			}
			continue
		}
		msg, at := gapPushFrame(d.Result)
		c.fanout(e, sh, sharedPush{msg: msg, at: at})
	}
	if g.HeadsBackfilled > 0 {
		c.obs.Backfilled("newHeads", g.HeadsBackfilled)
	}
	if g.LogsBackfilled > 0 {
		c.obs.Backfilled("logs", g.LogsBackfilled)
	}
	if g.HistoryHeads > 0 {
		c.obs.HistoryDelivered("newHeads", g.HistoryHeads)
	}
	if g.HistoryLogs > 0 {
		c.obs.HistoryDelivered("logs", g.HistoryLogs)
	}
	for _, gap := range g.Gaps {
		if sh := c.subs.byKey[gap.Key]; sh != nil && c.cfg.GapNotices {
			msg, at := gapNoticeFrame(gap)
			c.fanout(e, sh, sharedPush{msg: msg, at: at})
		} else if mem := c.hist[gap.Key]; mem != nil && c.cfg.GapNotices {
			msg, at := gapNoticeFrame(gap)
			c.deliverTo(e, mem, sharedPush{msg: msg, at: at})
		}
		c.obs.BackfillGap(gap.Kind, gap.Reason)
		args := []any{"kind", gap.Kind, "reason", gap.Reason, "key", logKey(gap.Key)}
		if gap.From > 0 {
			args = append(args, "missed_from", gap.From)
		}
		if gap.To > 0 {
			// Alone: the gap starts deeper than the machine remembers.
			args = append(args, "missed_to", gap.To)
		}
		e.note("subscription gap not closed", args...)
	}
	for _, d := range g.Durations {
		c.obs.BackfillDuration(d)
	}
	if len(c.histBounded) > 0 {
		c.historyBounds()
	}
	c.paceHistory(e, now)
}

// gapPushFrame builds an eth_subscription push for result as geth lays one
// out; the subscription id is a placeholder at the returned span, which
// each member's delivery replaces with its own id.
func gapPushFrame(result []byte) ([]byte, router.Span) {
	const head = `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":`
	const placeholder = `""`
	b := make([]byte, 0, len(head)+len(placeholder)+len(`,"result":`)+len(result)+2)
	b = append(b, head...)
	at := router.Span{Off: len(b), Len: len(placeholder)}
	b = append(b, placeholder...)
	b = append(b, `,"result":`...)
	b = append(b, result...)
	b = append(b, "}}"...)
	return b, at
}

// GapNoticeMethod is the method of the notification a client gets, when
// gap notices are on, for a gap in one of its subscriptions that muxd
// could not close. It does not end in "_subscription": clients route
// those by subscription id as pushes of the subscription's own kind
// (go-ethereum's rpc client does by that suffix), and one they cannot
// decode would end the subscription.
const GapNoticeMethod = "muxd_subscriptionGap"

// gapNoticeFrame builds the notification for gap, laid out as a push (the
// subscription id is a placeholder at the returned span, which each
// member's delivery replaces with its own): params.result holds the
// subscription kind, the reason, and the blocks it is about as fromBlock
// and toBlock when known (toBlock alone: the gap starts deeper than muxd
// remembers).
func gapNoticeFrame(gap gapfill.Gap) ([]byte, router.Span) {
	const head = `{"jsonrpc":"2.0","method":"` + GapNoticeMethod + `","params":{"subscription":`
	const placeholder = `""`
	b := make([]byte, 0, 192)
	b = append(b, head...)
	at := router.Span{Off: len(b), Len: len(placeholder)}
	b = append(b, placeholder...)
	b = append(b, `,"result":{"kind":`...)
	b = strconv.AppendQuote(b, gap.Kind)
	b = append(b, `,"reason":`...)
	b = strconv.AppendQuote(b, gap.Reason)
	if gap.From > 0 {
		b = append(b, `,"fromBlock":"0x`...)
		b = strconv.AppendUint(b, gap.From, 16)
		b = append(b, '"')
	}
	if gap.To > 0 {
		b = append(b, `,"toBlock":"0x`...)
		b = strconv.AppendUint(b, gap.To, 16)
		b = append(b, '"')
	}
	b = append(b, "}}}"...)
	return b, at
}

// backfillAnswered hands the node's answer to a backfill request to the
// machine.
func (c *Core) backfillAnswered(e *Effects, frame []byte, m *router.Message, uid uint64, now time.Time) {
	if c.historyAnswered(e, frame, m, uid, now) {
		return
	}
	id, ok := c.gapReqs[uid]
	if !ok {
		return
	}
	delete(c.gapReqs, uid)
	c.historySettled(uid)
	if m.Error.Present() {
		// The machine halves an eth_getLogs range the node says is too
		// large; anything else counts as failed.
		var rpcErr struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(m.Error.In(frame), &rpcErr)
		c.applyGap(e, c.gap.AnswerError(id, rpcErr.Message, now), nil, now)
		return
	}
	var result []byte
	if m.Result.Present() && !m.Error.Present() {
		result = m.Result.In(frame)
	}
	c.applyGap(e, c.gap.Answer(id, result, now), nil, now)
}
