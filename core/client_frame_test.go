package core

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/muxd/muxd/router"
)

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
