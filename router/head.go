package router

import "errors"

// ErrNoResponseID means the first bytes of a message too large to keep
// hold no whole response id (TruncatedResponseID).
var ErrNoResponseID = errors.New("no whole response id in the bytes kept")

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
// response, a push, another member first, a member twice or named like a
// JSON-RPC one but for case or escapes, bad syntax in the head, no id), or
// when the result's last byte is not one a value of its kind ends with, as
// when a member (an id above all: muxd's are numbers) follows the result:
// the caller then scans it whole with ScanUpstream, which marks such a
// frame ambiguous. A member after the result is seen only that way: one
// whose value ends as the result's kind does (a string member after a
// string result) passes as part of the result. When ok, the spans are
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
			if !m.ID.Present() || rend <= vstart || !endsAsItBegins(b[vstart], b[rend-1]) {
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

// endsAsItBegins reports whether a JSON value whose first byte is first may
// end with the byte last: a test in constant time that what runs to the
// frame's closing brace is one value, which catches most members written
// after it (",\"id\":2" ends in a digit, not the '}' of an object).
func endsAsItBegins(first, last byte) bool {
	switch first {
	case '{':
		return last == '}'
	case '[':
		return last == ']'
	case '"':
		return last == '"'
	case 't', 'f':
		return last == 'e'
	case 'n':
		return last == 'l'
	}
	return last >= '0' && last <= '9' // a number
}

// TruncatedResponseID finds the id of a response from the first bytes of a
// message too large to keep (the rest discarded unread): the id member of
// the object the message starts with, or of the first element when it is an
// array (inArray). It reads the members within head in order, as a full
// scan does; members after head are not known, so an id is taken as found
// once a member's value (the result, usually) runs past head. What follows
// the id is not validated: the message is thrown away, only its id is
// wanted. The error wraps ErrAmbiguous when the members read make the
// message one ScanUpstream marks ambiguous (a JSON-RPC member twice, one
// named like it but for case or escapes, params.subscription or
// params.result twice): it is nobody's answer. It is ErrNoResponseID when
// no whole id is among the members before that point (an id that comes
// after a result or error which runs past head, or an id cut by head's
// end), or when head does not start like a response at all.
func TruncatedResponseID(head []byte) (id Span, inArray bool, err error) {
	b := head
	i := skipSpace(b, 0)
	if i < len(b) && b[i] == '[' {
		inArray = true
		i = skipSpace(b, i+1)
	}
	if i >= len(b) || b[i] != '{' {
		return Span{}, false, ErrNoResponseID
	}
	var (
		found Span
		seen  [memLookalikeID + 1]bool
		m     Message // params.subscription and result, as scanParams finds them
	)
	it := objectMembers(b, i)
	for {
		key, more, err := it.next()
		if err != nil || !more {
			break // the object ends, or head ends, within or after a member
		}
		mem := memberOf(key)
		switch {
		case mem == memLookalike || mem == memLookalikeID:
			return Span{}, false, errLookalike
		case mem != memOther && seen[mem]:
			return Span{}, false, errDuplicate[mem]
		}
		seen[mem] = true
		var end int
		if mem == memParams && it.i < len(b) && b[it.i] == '{' {
			m.Subscription = Span{}
			end, err = scanParams(b, it.i, 1, &m)
			if m.Invalid != nil {
				return Span{}, false, m.Invalid
			}
		} else {
			end, err = skipValue(b, it.i, 1)
		}
		if mem == memID {
			// A number that ends where head ends may have been cut: the
			// id is whole only when what follows it is in head.
			if j := skipSpace(b, end); err != nil || j >= len(b) || (b[j] != ',' && b[j] != '}') {
				return Span{}, false, ErrNoResponseID
			}
			found = Span{it.i, end - it.i}
		} else if err != nil {
			break // a value that runs past head
		}
		it.i = end
	}
	if !found.Present() {
		return Span{}, false, ErrNoResponseID
	}
	return found, inArray, nil
}
