package router

// IDFinder finds the id of a single request as its bytes stream past,
// without keeping them: for a message too large to keep, whose refusal
// should still carry the id its client will match (a client waits for its
// id; one answered under null cannot tell which call failed). Write it the
// message in any number of pieces, then ask ID.
//
// It follows the top level only: strings (escapes included) and nesting, so
// that an "id" inside params or inside a string is not taken for the
// request's own. It gives up (ID reports false) on anything but one JSON
// object, on any top-level member name spelled with escapes (a node may
// decode one to id), on an id seen twice, and on an id longer than
// maxFoundID. It does not check the rest of the message.
type IDFinder struct {
	started, failed bool
	depth           int
	inStr, esc      bool
	// At depth 1, outside strings: what comes next.
	want    idFinderWant
	key     []byte // the member name being read (quotes excluded), at most 2 bytes kept
	keyLong bool   // it was longer than 2 bytes, or had an escape
	inID    bool   // reading the id member's value
	seenID  bool
	id      []byte
	done    bool // the top-level object closed
}

type idFinderWant uint8

const (
	wantKey idFinderWant = iota
	wantColon
	wantValue
	wantComma
)

// maxFoundID bounds the id an IDFinder keeps.
const maxFoundID = 64 << 10

// Write feeds the next bytes of the message. It never fails.
func (f *IDFinder) Write(p []byte) (int, error) {
	for _, c := range p {
		if f.failed {
			break
		}
		f.step(c)
	}
	return len(p), nil
}

func (f *IDFinder) step(c byte) {
	if f.inID {
		f.id = append(f.id, c)
		if len(f.id) > maxFoundID {
			f.failed = true
			return
		}
	}
	if f.inStr {
		switch {
		case f.esc:
			f.esc = false
		case c == '\\':
			f.esc = true
			if f.depth == 1 && f.want == wantColon {
				// An escaped member name may be the id to the node
				// (geth decodes \u0069d): give up rather than guess.
				f.failed = true
			}
		case c == '"':
			f.inStr = false
		default:
			if f.depth == 1 && f.want == wantColon {
				if len(f.key) < 2 {
					f.key = append(f.key, c)
				} else {
					f.keyLong = true
				}
			}
		}
		return
	}
	if isSpace(c) {
		return
	}
	if !f.started {
		f.started = true
		if c != '{' {
			f.failed = true
			return
		}
		f.depth = 1
		f.want = wantKey
		return
	}
	if f.done {
		f.failed = true // something after the object
		return
	}
	if f.depth > 1 {
		switch c {
		case '"':
			f.inStr = true
		case '{', '[':
			f.depth++
		case '}', ']':
			f.depth--
			if f.depth == 1 {
				f.valueEnded()
			}
		}
		return
	}
	// depth 1, outside strings
	switch f.want {
	case wantKey:
		switch c {
		case '"':
			f.inStr = true
			f.key, f.keyLong = f.key[:0], false
			f.want = wantColon
		case '}':
			f.done = true
		default:
			f.failed = true
		}
	case wantColon:
		if c != ':' {
			f.failed = true
			return
		}
		f.want = wantValue
		if !f.keyLong && string(f.key) == "id" {
			if f.seenID {
				f.failed = true
				return
			}
			f.seenID, f.inID = true, true
		}
	case wantValue:
		f.want = wantComma
		switch c {
		case '"':
			f.inStr = true
		case '{', '[':
			f.depth++
			f.want = wantValue // until the nested value closes (valueEnded)
		}
		if f.inID {
			f.id = append(f.id[:0], c)
		}
	case wantComma:
		switch c {
		case ',':
			f.endID()
			f.want = wantKey
		case '}':
			f.endID()
			f.done = true
		default:
			// a scalar value's next byte (a number, true, false, null)
		}
	}
}

// valueEnded notes that a nested value at depth 1 has closed.
func (f *IDFinder) valueEnded() { f.want = wantComma }

// endID ends the id member's value when it was being read; the byte that
// ended it (',' or '}') was appended and is cut off.
func (f *IDFinder) endID() {
	if f.inID {
		f.inID = false
		f.id = f.id[:len(f.id)-1]
		for len(f.id) > 0 && isSpace(f.id[len(f.id)-1]) {
			f.id = f.id[:len(f.id)-1]
		}
	}
}

// ID returns the request's id as written, once the whole message has been
// written: one JSON string, number or null (what an answer may echo);
// false when it has none that can be told (see IDFinder) or another kind
// of value.
func (f *IDFinder) ID() ([]byte, bool) {
	if f.failed || !f.done || !f.seenID || f.inID || len(f.id) == 0 {
		return nil, false
	}
	switch f.id[0] {
	case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 'n':
	default:
		return nil, false
	}
	if end, err := skipValue(f.id, 0, 1); err != nil || end != len(f.id) {
		return nil, false
	}
	return f.id, true
}
