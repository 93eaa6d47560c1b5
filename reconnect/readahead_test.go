package reconnect

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
)

// chunkConn is a net.Conn whose reads return the given chunks, one per
// call (cut to the caller's buffer, the rest kept for the next call), then
// err; it records the size of every read asked of it.
type chunkConn struct {
	net.Conn
	chunks [][]byte
	err    error
	asked  []int
}

func (c *chunkConn) Read(p []byte) (int, error) {
	c.asked = append(c.asked, len(p))
	if len(c.chunks) == 0 {
		return 0, c.err
	}
	n := copy(p, c.chunks[0])
	if n < len(c.chunks[0]) {
		c.chunks[0] = c.chunks[0][n:]
		return n, nil
	}
	c.chunks = c.chunks[1:]
	if len(c.chunks) == 0 && c.err != nil {
		return n, c.err // the last bytes come with the error
	}
	return n, nil
}

func TestReadAhead(t *testing.T) {
	big := bytes.Repeat([]byte("x"), readAheadSize+10)
	tests := []struct {
		name   string
		chunks [][]byte
		reads  []int // the size of each Read the caller makes
		want   []string
		asked  []int // reads the socket saw
	}{
		{
			name:   "small reads share one socket read",
			chunks: [][]byte{[]byte("abcdefgh")},
			reads:  []int{3, 3, 3},
			want:   []string{"abc", "def", "gh"},
			asked:  []int{readAheadSize},
		},
		{
			name:   "a read of readAheadSize or more goes straight to the socket",
			chunks: [][]byte{big},
			reads:  []int{len(big)},
			want:   []string{string(big)},
			asked:  []int{len(big)},
		},
		{
			name:   "buffered bytes first, then straight to the socket",
			chunks: [][]byte{[]byte("head"), big},
			reads:  []int{2, readAheadSize + 10, readAheadSize + 10},
			want:   []string{"he", "ad", string(big)},
			asked:  []int{readAheadSize, readAheadSize + 10},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &chunkConn{chunks: tc.chunks, err: io.EOF}
			var ra readAhead
			for i, size := range tc.reads {
				p := make([]byte, size)
				n, _, err := ra.read(c, p)
				if err != nil && n == 0 { // io.Reader: bytes may come with the error
					t.Fatalf("read %d: %v", i, err)
				}
				if got := string(p[:n]); got != tc.want[i] {
					t.Fatalf("read %d: got %.20q (%d bytes), want %.20q (%d bytes)", i, got, len(got), tc.want[i], len(tc.want[i]))
				}
			}
			if !equalInts(c.asked, tc.asked) {
				t.Errorf("socket reads asked for %v, want %v", c.asked, tc.asked)
			}
		})
	}
}

// An error that comes with bytes is returned after the bytes, each of them
// once.
func TestReadAheadErrorAfterBytes(t *testing.T) {
	boom := errors.New("boom")
	c := &chunkConn{chunks: [][]byte{[]byte("abcdef")}, err: boom}
	var ra readAhead
	var got []byte
	for range 10 {
		p := make([]byte, 4)
		n, _, err := ra.read(c, p)
		got = append(got, p[:n]...)
		if err != nil {
			if !errors.Is(err, boom) {
				t.Fatalf("err %v, want boom", err)
			}
			if string(got) != "abcdef" {
				t.Fatalf("read %q before the error, want abcdef", got)
			}
			return
		}
	}
	t.Fatal("no error after the bytes")
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
