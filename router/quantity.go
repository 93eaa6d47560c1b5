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
