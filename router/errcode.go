package router

// ErrorCode reads the "code" member of a JSON-RPC error object (the raw
// bytes of a response's error member). It reports false when there is none
// or it is not an integer.
func ErrorCode(errObj []byte) (int, bool) {
	i := skipSpace(errObj, 0)
	if i >= len(errObj) || errObj[i] != '{' {
		return 0, false
	}
	it := objectMembers(errObj, i)
	for {
		key, ok, err := it.next()
		if err != nil || !ok {
			return 0, false
		}
		vstart := it.i
		if it.i, err = skipValue(errObj, vstart, 1); err != nil {
			return 0, false
		}
		if string(key) == `"code"` {
			return parseInt(errObj[vstart:it.i])
		}
	}
}

func parseInt(b []byte) (int, bool) {
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg, b = true, b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}
