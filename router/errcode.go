package router

// ErrorCode reads the "code" member of a JSON-RPC error object (the raw
// bytes of a response's error member). It reports false when there is none
// or it is not an integer.
func ErrorCode(errObj []byte) (int, bool) {
	i := skipSpace(errObj, 0)
	if i >= len(errObj) || errObj[i] != '{' {
		return 0, false
	}
	i = skipSpace(errObj, i+1)
	for i < len(errObj) && errObj[i] == '"' {
		kend, err := skipString(errObj, i)
		if err != nil {
			return 0, false
		}
		isCode := string(errObj[i:kend]) == `"code"`
		i = skipSpace(errObj, kend)
		if i >= len(errObj) || errObj[i] != ':' {
			return 0, false
		}
		i = skipSpace(errObj, i+1)
		vstart := i
		if i, err = skipValue(errObj, i, 1); err != nil {
			return 0, false
		}
		if isCode {
			return parseInt(errObj[vstart:i])
		}
		i = skipSpace(errObj, i)
		if i >= len(errObj) || errObj[i] != ',' {
			return 0, false
		}
		i = skipSpace(errObj, i+1)
	}
	return 0, false
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
