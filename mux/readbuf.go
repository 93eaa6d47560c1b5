package mux

import (
	"fmt"
	"io"
)

// maxKeptReadBuf is the largest read buffer a reader keeps for the next
// message; one that grew past it for a large message (a block trace) is let
// go, so that one big answer does not pin memory for the life of a session.
const maxKeptReadBuf = 1 << 20

// readMessage reads r to its end into dst (reused from the previous message)
// and returns it, reading at most max bytes when max >= 0: a message longer
// than max comes back as its first max+1 bytes, for the caller to answer
// "too large". The readers of muxd reuse the result for the next message, so
// whoever is handed it must not keep a reference to it (dispatch and route
// copy what they keep).
func readMessage(dst []byte, r io.Reader, max int64) ([]byte, error) {
	dst = dst[:0]
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		room := dst[len(dst):cap(dst)]
		if max >= 0 && int64(len(dst)+len(room)) > max+1 {
			room = room[:max+1-int64(len(dst))]
		}
		n, err := r.Read(room)
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, fmt.Errorf("read message: %w", err)
		}
		if max >= 0 && int64(len(dst)) > max {
			return dst, nil
		}
	}
}

// keepReadBuf returns buf for reuse, or nil when it grew too large to keep.
func keepReadBuf(buf []byte) []byte {
	if cap(buf) > maxKeptReadBuf {
		return nil
	}
	return buf[:0]
}
