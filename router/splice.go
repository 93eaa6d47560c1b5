package router

import "strconv"

// AppendSpliced appends msg to dst with the bytes at span at (an offset into
// msg) replaced by repl. It is how ids are rewritten: every other byte of the
// message is copied as it is.
func AppendSpliced(dst, msg []byte, at Span, repl []byte) []byte {
	dst = append(dst, msg[:at.Off]...)
	dst = append(dst, repl...)
	return append(dst, msg[at.Off+at.Len:]...)
}

// Element returns the bytes of m within frame, and m's id span rebased to
// those bytes, so that a batch element can be spliced on its own. The span
// is zero when m has no id.
func Element(frame []byte, m *Message) ([]byte, Span) {
	id := m.ID
	if id.Present() {
		id.Off -= m.Start
	}
	return frame[m.Start:m.End], id
}

// AppendUpstreamID appends the decimal form of an upstream id.
func AppendUpstreamID(dst []byte, id uint64) []byte {
	return strconv.AppendUint(dst, id, 10)
}

// ParseUpstreamID reads an id that muxd wrote upstream. Anything but plain
// decimal digits that fit a uint64 (null, a string, a float, a number with a
// sign or leading zero) is not one of ours.
func ParseUpstreamID(raw []byte) (uint64, bool) {
	if len(raw) == 0 || len(raw) > 20 || (raw[0] == '0' && len(raw) > 1) {
		return 0, false
	}
	var n uint64
	for _, c := range raw {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// IsNull reports whether raw is the JSON literal null.
func IsNull(raw []byte) bool { return string(raw) == "null" }
