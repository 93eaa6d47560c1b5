package router

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
)

// Errors reported by the scanner. Callers test them with errors.Is.
var (
	// ErrParse means the frame is not valid JSON (JSON-RPC -32700).
	ErrParse = errors.New("parse error")
	// ErrEmptyBatch means the frame is the empty array [].
	ErrEmptyBatch = errors.New("empty batch")
	// ErrInvalid means a message is valid JSON but not a valid JSON-RPC 2.0
	// request (JSON-RPC -32600). Scanner errors wrap it with the reason.
	ErrInvalid = errors.New("invalid request")
	// ErrAmbiguous means a message from the node may be read more than one
	// way: it has a JSON-RPC member twice, and JSON parsers disagree on
	// which one counts (RFC 8259 leaves it open: encoding/json takes the
	// last, others the first, some refuse the message), or a member named
	// like one but for case or escapes, which a parser that folds case
	// (encoding/json, so any client library in Go) reads as that member.
	// Whom such an answer is for, and what its client would read in it,
	// cannot be told. Scanner errors wrap it with the reason.
	ErrAmbiguous = errors.New("ambiguous message")
)

// The reasons an upstream message is ambiguous, made once: a node that
// sends such messages without end costs the scanner no allocation.
var (
	errDuplicate = [...]error{
		memVersion: fmt.Errorf("%w: duplicate jsonrpc member", ErrAmbiguous),
		memID:      fmt.Errorf("%w: duplicate id member", ErrAmbiguous),
		memMethod:  fmt.Errorf("%w: duplicate method member", ErrAmbiguous),
		memParams:  fmt.Errorf("%w: duplicate params member", ErrAmbiguous),
		memResult:  fmt.Errorf("%w: duplicate result member", ErrAmbiguous),
		memError:   fmt.Errorf("%w: duplicate error member", ErrAmbiguous),
	}
	errLookalike          = fmt.Errorf("%w: %s", ErrAmbiguous, lookalikeMember)
	errDuplicateSubMember = fmt.Errorf("%w: duplicate params.subscription or params.result member", ErrAmbiguous)
	errLookalikeSubMember = fmt.Errorf("%w: params member name differs from subscription or result only in case or escapes", ErrAmbiguous)
)

// maxDepth bounds nesting so that a hostile frame cannot drive the recursive
// scanner into deep stacks. It is encoding/json's own limit (what geth
// decodes with), so every frame the node would accept passes muxd too: a
// frame nested 10000 deep is forwarded, one nested 10001 deep is a parse
// error both here and at the node. At this depth the scanner's stack is
// about 2 MiB, on the reader goroutine, and shrinks again at the next GC.
const maxDepth = 10000

// Span is where a JSON value sits in a frame: frame[Off:Off+Len]. A zero Len
// means the member is absent (a JSON value is never empty).
type Span struct{ Off, Len int }

// Present reports whether the member was there.
func (s Span) Present() bool { return s.Len > 0 }

// In returns the span's bytes in frame.
func (s Span) In(frame []byte) []byte { return frame[s.Off : s.Off+s.Len] }

// Message records where the members of one JSON-RPC object sit in its frame.
// All spans are offsets into the frame that was scanned, including for the
// elements of a batch, so that a batch element can be sliced out with
// frame[Start:End] and its id spliced in place.
type Message struct {
	Start, End int // the object itself

	Version Span // "jsonrpc"
	ID      Span // raw id bytes; absent for a notification
	Method  Span // raw method value, quotes included
	Params  Span
	Result  Span
	Error   Span

	// Subscription is params.subscription, set when params is an object
	// that has one (an eth_subscription push from the node).
	Subscription Span

	// Invalid is nil for a valid request. Otherwise it wraps ErrInvalid
	// (client frames) and says what is wrong; ID is then still set when the
	// id itself was readable and valid, so that the error can echo it.
	// In a frame from the node (ScanUpstream) it wraps ErrAmbiguous for a
	// message that may be read more than one way, which is nobody's
	// answer, and ErrInvalid for an array element that is no object; the
	// spans are then still recorded, the last of a repeated member winning.
	Invalid error
	// Ignored marks a notification (a valid jsonrpc and method, no id) that
	// the node would not run or would read otherwise than muxd: params
	// that are not an array or object, a result or error member, a
	// duplicate member. The node answers a notification nothing, whatever
	// it makes of it, so muxd neither answers nor forwards it.
	Ignored bool
}

// HasID reports whether the message carries an id member (a request or a
// response, not a notification).
func (m *Message) HasID() bool { return m.ID.Present() }

// MethodName returns the method as a string. It allocates; on the hot path
// compare MethodIs or look it up with string(m.Method...) in a map instead.
func (m *Message) MethodName(frame []byte) string {
	if !m.Method.Present() {
		return ""
	}
	raw := m.Method.In(frame)
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1])
	}
	// Decode as the node will: strconv.Unquote rejects JSON's \/ and
	// surrogate pairs.
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return string(raw[1 : len(raw)-1])
	}
	return s
}

// MethodIs reports whether the method is exactly name (unescaped form).
func (m *Message) MethodIs(frame []byte, name string) bool {
	if !m.Method.Present() {
		return false
	}
	raw := m.Method.In(frame)
	if len(raw) == len(name)+2 && string(raw[1:len(raw)-1]) == name {
		return true
	}
	return bytes.IndexByte(raw, '\\') >= 0 && m.MethodName(frame) == name
}

// Frame is the result of scanning one frame.
type Frame struct {
	Batch    bool      // the frame is a JSON array
	Messages []Message // one per element of a batch, or one for an object
}

// mode selects which rules the scanner applies.
type mode uint8

const (
	modeClient   mode = iota // validate as a JSON-RPC 2.0 request
	modeUpstream             // only locate members; the node is trusted for structure
)

// ScanClient scans a frame sent by a client and validates every request in it.
//
// It returns ErrParse when the frame is not valid JSON and ErrEmptyBatch for
// []; a top-level value that is neither object nor array is one invalid
// message. Otherwise each message's Invalid field says whether it may be
// forwarded. msgs is reused for the result when it has room, so a caller that
// keeps it between frames does not allocate.
func ScanClient(frame []byte, msgs []Message) (Frame, error) {
	return scanFrame(frame, msgs[:0], modeClient)
}

// ScanUpstream scans a frame received from the node. It checks JSON syntax
// (ErrParse) and locates id, method, params.subscription, result and error in
// each message; it does not enforce request rules. A message that may be
// read more than one way is marked (Message.Invalid wraps ErrAmbiguous): a
// JSON-RPC member twice, a member named like one but for case or escapes
// (as ScanClient refuses them), and, in an object params, subscription or
// result twice or so named. In an array only the element concerned is.
func ScanUpstream(frame []byte, msgs []Message) (Frame, error) {
	return scanFrame(frame, msgs[:0], modeUpstream)
}

func scanFrame(b []byte, msgs []Message, md mode) (Frame, error) {
	i := skipSpace(b, 0)
	if i >= len(b) {
		return Frame{}, ErrParse
	}
	var f Frame
	switch b[i] {
	case '{':
		msgs = append(msgs, Message{})
		end, err := scanObject(b, i, 0, md, &msgs[len(msgs)-1])
		if err != nil {
			return Frame{}, err
		}
		if skipSpace(b, end) != len(b) {
			return Frame{}, ErrParse
		}
		f.Messages = msgs
	case '[':
		f.Batch = true
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == ']' {
			if skipSpace(b, i+1) != len(b) {
				return Frame{}, ErrParse
			}
			return Frame{Batch: true}, ErrEmptyBatch
		}
		for {
			if i >= len(b) {
				return Frame{}, ErrParse
			}
			// Each message is scanned where it will stay: a Message is
			// 144 bytes, copied twice per element when returned by value.
			msgs = append(msgs, Message{})
			m := &msgs[len(msgs)-1]
			if b[i] == '{' {
				end, err := scanObject(b, i, 1, md, m)
				if err != nil {
					return Frame{}, err
				}
				i = end
			} else {
				end, err := skipValue(b, i, 1)
				if err != nil {
					return Frame{}, err
				}
				*m = Message{Start: i, End: end, Invalid: fmt.Errorf("%w: batch element is not an object", ErrInvalid)}
				i = end
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return Frame{}, ErrParse
			}
			if b[i] == ']' {
				i++
				break
			}
			if b[i] != ',' {
				return Frame{}, ErrParse
			}
			i = skipSpace(b, i+1)
		}
		if skipSpace(b, i) != len(b) {
			return Frame{}, ErrParse
		}
		f.Messages = msgs
	default:
		end, err := skipValue(b, i, 0)
		if err != nil {
			return Frame{}, err
		}
		if skipSpace(b, end) != len(b) {
			return Frame{}, ErrParse
		}
		f.Messages = append(msgs, Message{Start: i, End: end, Invalid: fmt.Errorf("%w: not an object", ErrInvalid)})
	}
	return f, nil
}

// member names the scanner knows.
const (
	memOther = iota
	memVersion
	memID
	memMethod
	memParams
	memResult
	memError
	memLookalike   // differs only in case or escapes from a reserved name
	memLookalikeID // the same, of "id": a node may read the message as a request

	memUnknown = -1 // not yet classified (memberCursor.plain)
)

func memberOf(key []byte) int {
	switch string(key) {
	case `"jsonrpc"`:
		return memVersion
	case `"id"`:
		return memID
	case `"method"`:
		return memMethod
	case `"params"`:
		return memParams
	case `"result"`:
		return memResult
	case `"error"`:
		return memError
	}
	// encoding/json, and so geth, matches member names without regard to
	// case (Unicode simple folding, so "paramſ" is params) and decodes
	// escapes in them: {"ID":1} or {"\u0069d":1} is an id to the node. Such
	// keys must not slip past the scanner.
	name := keyName(key)
	for _, n := range [...]string{"jsonrpc", "id", "method", "params", "result", "error"} {
		if bytes.EqualFold(name, []byte(n)) {
			if n == "id" {
				return memLookalikeID
			}
			return memLookalike
		}
	}
	return memOther
}

// scanObject scans the message object at b[i], which sits inside depth
// containers (0 at the top level, 1 in a batch), into m, which is zero, and
// returns the offset past it.
func scanObject(b []byte, i, depth int, md mode, m *Message) (int, error) {
	m.Start = i
	var seen [memLookalikeID + 1]bool
	var problem string
	dup := memOther // the first member seen twice
	idLike := false // a member a node may read as the id
	it := objectMembers(b, i)
	n := 0
	for {
		key, ok, err := it.next()
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		n++
		mem := it.plain
		if mem == memUnknown {
			mem = memberOf(key)
		}
		vstart := it.i
		if mem == memParams {
			m.Subscription = Span{} // a later params member replaces an earlier one
		}
		if mem == memParams && md == modeUpstream && vstart < len(b) && b[vstart] == '{' {
			it.i, err = scanParams(b, vstart, depth+1, m)
		} else if mem == memVersion && len(b)-vstart >= 5 && string(b[vstart:vstart+5]) == `"2.0"` {
			it.i = vstart + 5 // the version as nearly every message writes it
		} else {
			it.i, err = skipValue(b, vstart, depth+1)
		}
		if err != nil {
			return 0, err
		}
		sp := Span{vstart, it.i - vstart}
		if seen[mem] && mem != memOther && problem == "" {
			problem = "duplicate member"
			dup = mem
		}
		seen[mem] = true
		switch mem {
		case memVersion:
			m.Version = sp
		case memID:
			m.ID = sp
		case memMethod:
			m.Method = sp
		case memParams:
			m.Params = sp
		case memResult:
			m.Result = sp
		case memError:
			m.Error = sp
		case memLookalike, memLookalikeID:
			if problem == "" {
				problem = lookalikeMember
			}
			idLike = idLike || mem == memLookalikeID
		}
	}
	m.End = it.i
	switch {
	case md == modeClient && n == 0:
		m.Invalid = fmt.Errorf("%w: empty object", ErrInvalid)
	case md == modeClient:
		m.Invalid = validateRequest(b, m, problem, idLike)
	case problem == lookalikeMember:
		m.Invalid = errLookalike
	case problem != "":
		m.Invalid = errDuplicate[dup]
	}
	// Else an upstream message keeps what scanParams found, if anything.
	return it.i, nil
}

// scanParams skips the params object of an upstream message, which sits
// inside depth containers, recording params.subscription on the way. A
// push is routed by its subscription and its result is what the client
// reads, so either twice, or a member named like either but for case or
// escapes (encoding/json reads "Subscription" as subscription), makes the
// message ambiguous (m.Invalid).
func scanParams(b []byte, i, depth int, m *Message) (int, error) {
	it := objectMembers(b, i)
	result := false
	for {
		key, ok, err := it.next()
		if err != nil || !ok {
			return it.i, err
		}
		vstart := it.i
		if it.i, err = skipValue(b, vstart, depth+1); err != nil {
			return 0, err
		}
		switch {
		case string(key) == `"subscription"`:
			if m.Subscription.Present() && m.Invalid == nil {
				m.Invalid = errDuplicateSubMember
			}
			m.Subscription = Span{vstart, it.i - vstart}
		case string(key) == `"result"`:
			if result && m.Invalid == nil {
				m.Invalid = errDuplicateSubMember
			}
			result = true
		case m.Invalid == nil && pushMemberLookalike(key):
			m.Invalid = errLookalikeSubMember
		}
	}
}

// pushMemberLookalike reports whether key, quotes included, is not
// "subscription" or "result" as written but names either to a parser that
// decodes escapes and folds case.
func pushMemberLookalike(key []byte) bool {
	name := keyName(key)
	return bytes.EqualFold(name, []byte("subscription")) || bytes.EqualFold(name, []byte("result"))
}

// keyName returns the member name that key (quotes included) stands for,
// without its quotes and with its escapes decoded as the node decodes
// them. The key's escapes are valid JSON (skipString checked them);
// strconv rejects only \/ and surrogate halves, which never decode to the
// letters of a member name: such a key's name is returned as written.
func keyName(key []byte) []byte {
	name := key[1 : len(key)-1]
	if bytes.IndexByte(name, '\\') < 0 {
		return name
	}
	s, err := strconv.Unquote(string(key))
	if err != nil {
		return name
	}
	return []byte(s)
}

// memberCursor walks the members of one JSON object, checking the syntax
// between them; the caller skips (or scans) each value and sets i past it.
// It is how every object in this package is read, so the grammar lives in
// one place.
type memberCursor struct {
	b       []byte
	i       int  // offset of the next token: a value after next, else a separator
	started bool // a member has been returned
	plain   int  // the last key's kind when plainMember matched it, else memUnknown
}

// objectMembers returns a cursor for the object whose '{' is at b[i].
func objectMembers(b []byte, i int) memberCursor { return memberCursor{b: b, i: i + 1} }

// next moves to the next member and returns its key, quotes included, with
// i at the start of its value. At the closing brace it returns ok false and
// leaves i just past the object.
func (c *memberCursor) next() (key []byte, ok bool, err error) {
	b := c.b
	i := skipSpace(b, c.i)
	if i >= len(b) {
		return nil, false, ErrParse
	}
	if b[i] == '}' {
		c.i = i + 1
		return nil, false, nil
	}
	if c.started {
		if b[i] != ',' {
			return nil, false, ErrParse
		}
		i = skipSpace(b, i+1)
	}
	if i >= len(b) || b[i] != '"' {
		return nil, false, ErrParse
	}
	c.started = true
	if mem, end := plainMember(b, i); end > 0 {
		c.plain = mem
		c.i = skipSpace(b, end)
		return b[i : end-1], true, nil
	}
	c.plain = memUnknown
	kend, err := skipString(b, i)
	if err != nil {
		return nil, false, err
	}
	j := skipSpace(b, kend)
	if j >= len(b) || b[j] != ':' {
		return nil, false, ErrParse
	}
	c.i = skipSpace(b, j+1)
	return b[i:kend], true, nil
}

// plainMember matches, at the quote b[i], a JSON-RPC member name written
// plainly and followed at once by its colon, such as "id": , as nearly
// every client and node writes them. It returns the member's kind and the
// offset past the colon, or end 0 when the key is anything else, which is
// then scanned as a string and classified by memberOf. Each comparison is
// with a constant of at most 10 bytes, which the compiler does in one or
// two loads.
func plainMember(b []byte, i int) (mem, end int) {
	if len(b)-i < 5 {
		return memOther, 0
	}
	r := b[i:]
	switch r[1] {
	case 'i':
		if string(r[:5]) == `"id":` {
			return memID, i + 5
		}
	case 'j':
		if len(r) >= 10 && string(r[:10]) == `"jsonrpc":` {
			return memVersion, i + 10
		}
	case 'm':
		if len(r) >= 9 && string(r[:9]) == `"method":` {
			return memMethod, i + 9
		}
	case 'p':
		if len(r) >= 9 && string(r[:9]) == `"params":` {
			return memParams, i + 9
		}
	case 'r':
		if len(r) >= 9 && string(r[:9]) == `"result":` {
			return memResult, i + 9
		}
	case 'e':
		if len(r) >= 8 && string(r[:8]) == `"error":` {
			return memError, i + 8
		}
	}
	return memOther, 0
}

// isVersion2 reports whether raw, a jsonrpc member's value, is the string
// "2.0", escapes decoded as the node decodes them ("2\u002e0" is "2.0").
func isVersion2(raw []byte) bool {
	if string(raw) == `"2.0"` {
		return true
	}
	if len(raw) == 0 || raw[0] != '"' || bytes.IndexByte(raw, '\\') < 0 {
		return false
	}
	var s string
	return json.Unmarshal(raw, &s) == nil && s == "2.0"
}

// lookalikeMember is the problem of a member named like a JSON-RPC member
// but for case or escapes: a node may read it as that member (geth reads
// "i\u0064" as the id). Such a message is never forwarded. One with an id,
// or with a member a node may read as the id (idLike), may be a request and
// is answered; one without is a notification to any node, and is ignored.
const lookalikeMember = "member name differs from a JSON-RPC member only in case or escapes"

func validateRequest(b []byte, m *Message, problem string, idLike bool) error {
	// The id is judged first: a valid id is echoed in the error for any
	// other problem, an invalid one is not.
	if m.ID.Present() {
		switch b[m.ID.Off] {
		case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 'n':
		default:
			m.ID = Span{}
			return fmt.Errorf("%w: id must be a string, number or null", ErrInvalid)
		}
	}
	if problem == lookalikeMember && (m.ID.Present() || idLike) {
		return fmt.Errorf("%w: %s", ErrInvalid, problem)
	}
	// A wrong version or method makes the node answer even without an id.
	if !m.Version.Present() || !isVersion2(m.Version.In(b)) {
		return fmt.Errorf("%w: jsonrpc must be \"2.0\"", ErrInvalid)
	}
	if !m.Method.Present() || b[m.Method.Off] != '"' {
		return fmt.Errorf("%w: method must be a string", ErrInvalid)
	}
	if m.Method.Len == 2 {
		return fmt.Errorf("%w: method is empty", ErrInvalid)
	}
	if problem == "" && m.Params.Present() {
		switch b[m.Params.Off] {
		case '[', '{', 'n':
		default:
			problem = "params must be an array or object"
		}
	}
	if problem == "" && (m.Result.Present() || m.Error.Present()) {
		problem = "a request carries no result or error"
	}
	switch {
	case problem == "":
		return nil
	case !m.ID.Present():
		m.Ignored = true // a notification: see Message.Ignored
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalid, problem)
}

func skipSpace(b []byte, i int) int {
	if i < len(b) && b[i] > ' ' { // no space: the common case, one test
		return i
	}
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipValue validates the JSON value starting at b[i] and returns the offset
// just past it.
func skipValue(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return 0, ErrParse
	}
	switch c := b[i]; {
	case c == '"':
		return skipString(b, i)
	case c == '{':
		if depth >= maxDepth {
			return 0, ErrParse
		}
		it := objectMembers(b, i)
		for {
			_, ok, err := it.next()
			if err != nil || !ok {
				return it.i, err
			}
			if it.i, err = skipValue(b, it.i, depth+1); err != nil {
				return 0, err
			}
		}
	case c == '[':
		if depth >= maxDepth {
			return 0, ErrParse
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1, nil
		}
		for {
			var err error
			if i, err = skipValue(b, i, depth+1); err != nil {
				return 0, err
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return 0, ErrParse
			}
			if b[i] == ']' {
				return i + 1, nil
			}
			if b[i] != ',' {
				return 0, ErrParse
			}
			i = skipSpace(b, i+1)
		}
	case c == '-' || (c >= '0' && c <= '9'):
		return skipNumber(b, i)
	case c == 't':
		return skipLiteral(b, i, "true")
	case c == 'f':
		return skipLiteral(b, i, "false")
	case c == 'n':
		return skipLiteral(b, i, "null")
	}
	return 0, ErrParse
}

func skipLiteral(b []byte, i int, lit string) (int, error) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, ErrParse
	}
	return i + len(lit), nil
}

// skipString validates the string starting at the quote b[i] and returns the
// offset past its closing quote. Invalid UTF-8 is let through, as
// encoding/json does (it substitutes U+FFFD); control characters are not.
func skipString(b []byte, i int) (int, error) {
	i++
	for {
		// Jump over the plain run in one go: this is where long hex
		// strings in results spend their time.
		j := plainRun(b, i)
		if j >= len(b) {
			return 0, ErrParse
		}
		switch c := b[j]; {
		case c == '"':
			return j + 1, nil
		case c < 0x20:
			return 0, ErrParse
		}
		// backslash
		if j+1 >= len(b) {
			return 0, ErrParse
		}
		switch b[j+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i = j + 2
		case 'u':
			if j+6 > len(b) {
				return 0, ErrParse
			}
			for _, h := range b[j+2 : j+6] {
				if !isHex(h) {
					return 0, ErrParse
				}
			}
			i = j + 6
		default:
			return 0, ErrParse
		}
	}
}

// Word-at-a-time constants: a byte of ones, and the high bit of each byte.
const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// plainRun returns the index of the first byte at or after i that ends a
// plain run inside a JSON string: '"', '\\' or a control character (or
// len(b)). Eight bytes are tested at once (stopBytes); at a word whose
// lowest flagged byte is ' ' or '!' (plain, but flagged by that cheaper
// test) the string is text, and the rest of it is tested exactly
// (exactPlainRun).
func plainRun(b []byte, i int) int {
	for i+8 <= len(b) {
		m := stopBytes(binary.LittleEndian.Uint64(b[i:]))
		if m == 0 {
			i += 8
			continue
		}
		j := i + bits.TrailingZeros64(m)>>3
		if c := b[j]; c != ' ' && c != '!' {
			return j
		}
		// Text: the rest of the string is tested exactly.
		return exactPlainRun(b, i)
	}
	return bytePlainRun(b, i)
}

// exactPlainRun is plainRun with the exact test for every word, for a
// string that turned out to be text.
func exactPlainRun(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		if m := exactStopBytes(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	return bytePlainRun(b, i)
}

// bytePlainRun is plainRun a byte at a time, for the tail shorter than a
// word.
func bytePlainRun(b []byte, i int) int {
	for i < len(b) && b[i] != '"' && b[i] != '\\' && b[i] >= 0x20 {
		i++
	}
	return i
}

// stopBytes flags, in its high bit, each byte of the word x under 0x23
// (the control characters, ' ', '!' and '"') or equal to '\\': v-lsb&^v has
// a high bit set below any zero byte of v, so with v = x^'\\'s it finds a
// backslash, and (x-0x23*lsb)&^x does the same for the bytes under 0x23.
// One subtraction covers the control characters and '"' together, at the
// price of ' ' and '!', rare in the hex strings nodes mostly send. The
// lowest flagged byte is always one of those (a false flag needs a borrow
// from a flagged byte below it); bytes above it may be false.
func stopBytes(x uint64) uint64 {
	e := x ^ (lsb * '\\')
	return ((x-lsb*0x23)&^x | (e-lsb)&^e) & msb
}

// exactStopBytes is stopBytes without ' ' and '!': the lowest flagged byte
// is '"', '\\' or a control character.
func exactStopBytes(x uint64) uint64 {
	q := x ^ (lsb * '"')
	e := x ^ (lsb * '\\')
	return ((q-lsb)&^q | (e-lsb)&^e | (x-lsb*0x20)&^x) & msb
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func skipNumber(b []byte, i int) (int, error) {
	if b[i] == '-' {
		i++
	}
	if i >= len(b) {
		return 0, ErrParse
	}
	switch {
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return 0, ErrParse
	}
	if i < len(b) && b[i] == '.' {
		i++
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == start {
			return 0, ErrParse
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == start {
			return 0, ErrParse
		}
	}
	return i, nil
}
