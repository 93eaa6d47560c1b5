package router

// ScanResponseHead reads only the head of a response frame laid out as
// nodes write one: an object whose members before "result" are "jsonrpc"
// and "id" (each at most once, in either order), "result" being the last
// member. The result is taken to run from its first byte to the frame's
// closing brace; those bytes are not scanned, since muxd forwards them
// untouched and trusts the node for their structure (as a relay trusts the
// whole frame). That is what keeps routing a large answer (a block, a
// trace, wide logs) from costing a pass over every byte of it.
//
// ok is false when the frame does not start that way (a batch, an error
// response, a push, another member first, bad syntax in the head, no id):
// the caller then scans it whole with ScanUpstream. When ok, the spans are
// those ScanUpstream would record for a well-formed frame of that shape.
func ScanResponseHead(frame []byte) (m Message, ok bool) {
	b := frame
	i := skipSpace(b, 0)
	end := len(b)
	for end > i && isSpace(b[end-1]) {
		end--
	}
	if i >= end || b[i] != '{' || b[end-1] != '}' {
		return Message{}, false
	}
	m.Start, m.End = i, end
	it := objectMembers(b[:end], i)
	for {
		key, ok, err := it.next()
		if err != nil || !ok {
			return Message{}, false
		}
		vstart := it.i
		switch mem := memberOf(key); mem {
		case memVersion, memID:
			dst := &m.ID
			if mem == memVersion {
				dst = &m.Version
			}
			if dst.Present() {
				return Message{}, false
			}
			if it.i, err = skipValue(b[:end], vstart, 1); err != nil {
				return Message{}, false
			}
			*dst = Span{vstart, it.i - vstart}
		case memResult:
			rend := end - 1 // the closing brace
			for rend > vstart && isSpace(b[rend-1]) {
				rend--
			}
			if !m.ID.Present() || rend <= vstart {
				return Message{}, false
			}
			m.Result = Span{vstart, rend - vstart}
			return m, true
		default:
			return Message{}, false
		}
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// TruncatedResponseID finds the id of a response from the first bytes of a
// message too large to keep (the rest discarded unread): the id member of
// the object the message starts with, or of the first element when it is an
// array (inArray). It reads the members within head in order and, as a full
// scan does, a later id member replaces an earlier one; members after head
// are not known, so an id is taken as found once a member's value (the
// result, usually) runs past head. What follows the id is not validated:
// the message is thrown away, only its id is wanted. ok is false when no
// whole id is among the members before that point (an id that comes after a
// result or error which runs past head, or an id cut by head's end), or when
// head does not start like a response at all.
func TruncatedResponseID(head []byte) (id Span, inArray, ok bool) {
	b := head
	i := skipSpace(b, 0)
	if i < len(b) && b[i] == '[' {
		inArray = true
		i = skipSpace(b, i+1)
	}
	if i >= len(b) || b[i] != '{' {
		return Span{}, false, false
	}
	var found Span
	it := objectMembers(b, i)
	for {
		key, more, err := it.next()
		if err != nil || !more {
			break // the object ends, or head ends, within or after a member
		}
		end, err := skipValue(b, it.i, 1)
		if memberOf(key) == memID {
			// A number that ends where head ends may have been cut: the
			// id is whole only when what follows it is in head.
			if j := skipSpace(b, end); err != nil || j >= len(b) || (b[j] != ',' && b[j] != '}') {
				return Span{}, false, false
			}
			found = Span{it.i, end - it.i}
		} else if err != nil {
			break // a value that runs past head
		}
		it.i = end
	}
	if !found.Present() {
		return Span{}, false, false
	}
	return found, inArray, true
}
