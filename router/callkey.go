package router

import (
	"bytes"
	"slices"
)

// CallKey canonicalises a call (method and params, nil when absent) into
// the key under which identical calls are coalesced and cached: the method,
// a NUL, and params with whitespace dropped and object members in key
// order. Everything else stays as written: numbers keep their text, strings
// their escapes and case (hex included), so two calls share a key only when
// the node must read them as the same call (calls written differently are
// merely kept apart). Absent params and [] are different keys. It works on
// the bytes in one pass, without decoding: it runs for every request on
// the coalescing and cache lists.
func CallKey(method string, params []byte) (string, error) {
	var stack [256]byte
	dst := append(append(stack[:0], method...), 0)
	if params == nil {
		return string(dst), nil
	}
	dst, i, err := appendCanonical(dst, params, skipSpace(params, 0), 0)
	if err != nil {
		return "", err
	}
	if skipSpace(params, i) != len(params) {
		return "", ErrCallParams
	}
	return string(dst), nil
}

// maxCanonicalDepth bounds the nesting appendCanonical follows, as the
// scanner does (maxDepth).
const maxCanonicalDepth = maxDepth

// canonicalMember is where one object member went in dst: its key (quotes
// included) at key, the whole "key":value at whole.
type canonicalMember struct{ key, whole Span }

// appendCanonical appends the JSON value at b[i:] to dst without
// whitespace and with object members in key order, and returns dst and the
// index after the value. Arrays and objects are handled here rather than
// in functions of their own so that the recursion stays within one
// function: a slice that passes through the results of mutually recursive
// functions escapes to the heap, and CallKey's stack buffer with it.
func appendCanonical(dst, b []byte, i, depth int) ([]byte, int, error) {
	if i >= len(b) || depth > maxCanonicalDepth {
		return dst, i, ErrCallParams
	}
	switch b[i] {
	case '[':
		dst = append(dst, '[')
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == ']' {
			return append(dst, ']'), i + 1, nil
		}
		for {
			var err error
			if dst, i, err = appendCanonical(dst, b, i, depth+1); err != nil {
				return dst, i, err
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return dst, i, ErrCallParams
			}
			switch b[i] {
			case ',':
				dst = append(dst, ',')
				i = skipSpace(b, i+1)
			case ']':
				return append(dst, ']'), i + 1, nil
			default:
				return dst, i, ErrCallParams
			}
		}
	case '{':
		base := len(dst)
		dst = append(dst, '{')
		var local [8]canonicalMember
		members := local[:0]
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == '}' {
			return append(dst, '}'), i + 1, nil
		}
		for {
			if len(members) > 0 {
				dst = append(dst, ',')
			}
			start := len(dst)
			if i >= len(b) || b[i] != '"' {
				return dst, i, ErrCallParams
			}
			end, err := skipString(b, i)
			if err != nil {
				return dst, i, ErrCallParams
			}
			dst = append(dst, b[i:end]...)
			key := Span{start, len(dst) - start}
			i = skipSpace(b, end)
			if i >= len(b) || b[i] != ':' {
				return dst, i, ErrCallParams
			}
			dst = append(dst, ':')
			if dst, i, err = appendCanonical(dst, b, skipSpace(b, i+1), depth+1); err != nil {
				return dst, i, err
			}
			members = append(members, canonicalMember{key, Span{start, len(dst) - start}})
			i = skipSpace(b, i)
			if i >= len(b) {
				return dst, i, ErrCallParams
			}
			if b[i] == '}' {
				break
			}
			if b[i] != ',' {
				return dst, i, ErrCallParams
			}
			i = skipSpace(b, i+1)
		}
		return appendSorted(dst, base, members), i + 1, nil
	}
	// A string, number or literal, as written.
	end, err := skipValue(b, i, depth)
	if err != nil {
		return dst, i, ErrCallParams
	}
	return append(dst, b[i:end]...), end, nil
}

// appendSorted closes the object whose "{" is dst[base] and whose members
// follow it, laid out as members records, with the members in key order;
// or in the order written when two of them may name the same field
// (mayShareField): the node then reads the last one, so their order is part
// of the call.
func appendSorted(dst []byte, base int, members []canonicalMember) []byte {
	if mayShareField(dst, members) {
		return append(dst, '}')
	}
	sorted := slices.IsSortedFunc(members, func(x, y canonicalMember) int {
		return bytes.Compare(x.key.In(dst), y.key.In(dst))
	})
	if !sorted {
		// Lay the members out again in key order, from a copy.
		region := bytes.Clone(dst[base+1:])
		for k := range members {
			members[k].key.Off -= base + 1
			members[k].whole.Off -= base + 1
		}
		slices.SortStableFunc(members, func(x, y canonicalMember) int {
			return bytes.Compare(x.key.In(region), y.key.In(region))
		})
		dst = dst[:base+1]
		for k, m := range members {
			if k > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, m.whole.In(region)...)
		}
	}
	return append(dst, '}')
}

// maxComparedMembers bounds the members of one object whose keys
// mayShareField compares pairwise; an object with more keeps its order.
const maxComparedMembers = 16

// mayShareField reports whether two of an object's member keys (quoted, as
// written, in dst) may name the same field for the node. geth decodes
// params with encoding/json, which matches a field by name ignoring case
// (with Unicode folding: "ſ" is "s", the Kelvin sign is "k") after
// unescaping, the last member winning. So members whose keys are equal
// under ASCII case folding may share a field, and any key with an escape
// or a non-ASCII byte is taken to share one with every other key rather
// than decoded here.
func mayShareField(dst []byte, members []canonicalMember) bool {
	if len(members) < 2 {
		return false
	}
	if len(members) > maxComparedMembers {
		return true
	}
	for _, m := range members {
		for _, c := range m.key.In(dst) {
			if c == '\\' || c >= 0x80 {
				return true
			}
		}
	}
	for x := range members {
		for y := x + 1; y < len(members); y++ {
			if bytes.EqualFold(members[x].key.In(dst), members[y].key.In(dst)) {
				return true
			}
		}
	}
	return false
}
