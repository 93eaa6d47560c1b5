package gethtest

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestMessagesAtTheNodesLimit: muxd's ids are longer than a client's, so a
// message the client sends at nearly the node's WebSocket limit (32 MiB,
// geth's, and max_message_bytes by default) would pass it once rewritten,
// and geth closes the shared connection on a message too big, failing
// every client's calls in flight. A single request that would is refused
// with -32005; a batch goes as arrays that do not pass it, every element
// answered as geth answers it directly. The upstream connection is never
// lost.
func TestMessagesAtTheNodesLimit(t *testing.T) {
	const (
		limit   = 32 << 20 // geth's WebSocket read limit
		closing = `"]}`
	)
	h := newHarness(t, nil)
	m := h.srv.Metrics()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	roundTrip := func(url string, msg []byte) []byte {
		t.Helper()
		c, _, err := websocket.Dial(ctx, url, nil)
		if err != nil {
			t.Fatalf("dial %s: %v", url, err)
		}
		defer c.CloseNow()
		c.SetReadLimit(64 << 20)
		if err := c.Write(ctx, websocket.MessageText, msg); err != nil {
			t.Fatalf("write: %v", err)
		}
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("%s: read: %v", url, err)
		}
		return b
	}

	// A batch of 1000 web3_sha3 calls adding up to limit-1000 bytes,
	// all under id 1: rewritten to upstream ids of up to four digits,
	// they grow by 1893 bytes, past the limit: muxd sends them as two
	// arrays.
	const n = 1000
	// Each element is per bytes and its comma, whitespace inside it (which
	// muxd keeps) making up what the hex digits cannot.
	per := (limit-1000-1)/n - 1
	var batch bytes.Buffer
	batch.WriteByte('[')
	for i := range n {
		if i > 0 {
			batch.WriteByte(',')
		}
		e := `{"jsonrpc":"2.0","id":1,"method":"web3_sha3","params":["0x`
		hex := (per - len(e) - len(closing)) &^ 1
		batch.WriteString(e)
		batch.WriteString(strings.Repeat("cd", hex/2))
		batch.WriteString(`"]`)
		batch.WriteString(strings.Repeat(" ", per-len(e)-hex-len(closing)))
		batch.WriteByte('}')
	}
	batch.WriteByte(']')
	if batch.Len() > limit-1000 || batch.Len() < limit-2000 {
		t.Fatalf("batch of %d bytes, want about %d", batch.Len(), limit-1000)
	}
	direct := roundTrip(h.node.WSURL, batch.Bytes())
	framesBefore := counterValue(t, m.UpstreamFramesOut)
	through := roundTrip(h.WSURL, batch.Bytes())
	if frames := counterValue(t, m.UpstreamFramesOut) - framesBefore; frames != 2 {
		t.Errorf("the batch went upstream as %v frames, want 2 arrays", frames)
	}
	// The answers in any order (all under id 1, and all the same).
	sorted := func(answers []byte) []string {
		var arr []json.RawMessage
		if err := json.Unmarshal(answers, &arr); err != nil {
			t.Fatalf("batch answer %.200s: %v", answers, err)
		}
		out := make([]string, len(arr))
		for i, a := range arr {
			out[i] = string(a)
		}
		slices.Sort(out)
		return out
	}
	want, gotBatch := sorted(direct), sorted(through)
	if len(want) != n || !slices.Equal(gotBatch, want) {
		t.Fatalf("batch: %d answers through muxd (first %.120s), %d directly (first %.120s)", len(gotBatch), first(gotBatch), len(want), first(want))
	}

	// Then one web3_sha3 call of limit-2 bytes under id 1: muxd's
	// upstream ids are past 1000 by now.
	head := `{"jsonrpc":"2.0","id":1,"method":"web3_sha3","params":["0x`
	hexLen := (limit - 2 - len(head) - len(closing)) &^ 1
	pad := limit - 2 - len(head) - hexLen - len(closing)
	single := []byte(head + strings.Repeat("ab", hexLen/2) + `"]` + strings.Repeat(" ", pad) + "}")
	if len(single) != limit-2 {
		t.Fatalf("single request of %d bytes, want %d", len(single), limit-2)
	}
	got := roundTrip(h.WSURL, single)
	if want := `{"jsonrpc":"2.0","id":1,"error":{"code":-32005,"message":"limit exceeded","data":{"reason":"message too large"}}}`; string(got) != want {
		t.Fatalf("single request of %d bytes: %.200s, want %s", len(single), got, want)
	}

	if v := counterValue(t, m.UpstreamReconnects); v != 0 {
		t.Errorf("upstream reconnects = %v, want 0: geth closed the shared connection", v)
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}
