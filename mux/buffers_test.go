package mux

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestReadMessage(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name    string
		r       io.Reader
		max     int64
		want    string
		wantErr error
	}{
		{"empty", strings.NewReader(""), 10, "", nil},
		{"short", strings.NewReader("hello"), 10, "hello", nil},
		{"exactly max", strings.NewReader("0123456789"), 10, "0123456789", nil},
		// one byte past max is how the caller learns it is too large
		{"one past max", strings.NewReader("0123456789A"), 10, "0123456789A", nil},
		{"far past max stops at max+1", strings.NewReader(strings.Repeat("x", 5000)), 10, strings.Repeat("x", 11), nil},
		{"no max", strings.NewReader(strings.Repeat("y", 100000)), -1, strings.Repeat("y", 100000), nil},
		{"one byte per read", iotest.OneByteReader(strings.NewReader("slow reader")), 100, "slow reader", nil},
		{"error is wrapped", iotest.ErrReader(boom), 10, "", boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readMessage(make([]byte, 0, 3), tt.r, tt.max)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if string(got) != tt.want {
				t.Errorf("got %d bytes %.20q, want %d bytes %.20q", len(got), got, len(tt.want), tt.want)
			}
		})
	}
}

// TestReadMessageReusesBuffer: a buffer with room is filled in place, so a
// reader that reuses it allocates nothing per message.
func TestReadMessageReusesBuffer(t *testing.T) {
	buf := make([]byte, 0, 64)
	msg := []byte(`{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}`)
	r := bytes.NewReader(msg)
	allocs := testing.AllocsPerRun(100, func() {
		r.Reset(msg)
		out, err := readMessage(buf, r, 1<<20)
		if err != nil || !bytes.Equal(out, msg) {
			t.Fatalf("readMessage = %q, %v", out, err)
		}
		buf = reuse(out, maxKeptSessionBuf)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per message, want 0", allocs)
	}
	if big := reuse(make([]byte, 0, maxKeptSessionBuf+1), maxKeptSessionBuf); big != nil {
		t.Errorf("a buffer past the bound was kept (cap %d)", cap(big))
	}
	if kept := reuse(make([]byte, 5, maxKeptSessionBuf), maxKeptSessionBuf); kept == nil || len(kept) != 0 {
		t.Errorf("a buffer within the bound was not kept empty: %v", kept)
	}
}
