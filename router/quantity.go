package router

import "strconv"

// ParseQuantity reads a JSON-RPC quantity's text ("0x1a"): hex digits
// after 0x (or 0X), at most 64 bits.
func ParseQuantity(s string) (uint64, bool) {
	if len(s) < 3 || (s[:2] != "0x" && s[:2] != "0X") {
		return 0, false
	}
	n, err := strconv.ParseUint(s[2:], 16, 64)
	return n, err == nil
}

// ParseQuantityJSON reads a JSON string holding a quantity ("\"0x1a\"", as
// ParseQuantity reads its text) of at most 64 bits, without allocating: it
// runs for answers under the core's lock. Escapes are not read.
func ParseQuantityJSON(raw []byte) (uint64, bool) {
	if len(raw) < 5 || len(raw) > 20 || raw[0] != '"' || raw[len(raw)-1] != '"' || raw[1] != '0' || (raw[2] != 'x' && raw[2] != 'X') {
		return 0, false
	}
	var n uint64
	for _, ch := range raw[3 : len(raw)-1] {
		var d byte
		switch {
		case ch >= '0' && ch <= '9':
			d = ch - '0'
		case ch >= 'a' && ch <= 'f':
			d = ch - 'a' + 10
		case ch >= 'A' && ch <= 'F':
			d = ch - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | uint64(d)
	}
	return n, true
}
