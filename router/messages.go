package router

import "strconv"

// JSON-RPC error codes muxd answers with itself (DESIGN.md section 4).
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeUnavailable    = -32002 // EIP-1474 "resource unavailable"; geth uses it for timeouts
	CodeLimitExceeded  = -32005 // EIP-1474 "limit exceeded"
)

// RPCError is an error response muxd produces itself. Reason, when set, goes
// out as error.data.reason: a short machine-readable word for scripts.
type RPCError struct {
	Code    int
	Message string
	Reason  string
}

// The errors of DESIGN.md section 4.
var (
	ErrorParse           = RPCError{CodeParseError, "parse error", ""}
	ErrorInvalidRequest  = RPCError{CodeInvalidRequest, "invalid request", ""}
	ErrorEmptyBatch      = RPCError{CodeInvalidRequest, "empty batch", ""}
	ErrorNoNotifications = RPCError{CodeMethodNotFound, "notifications not supported", ""}
	ErrorTimeout         = RPCError{CodeUnavailable, "request timed out", ""}
	ErrorUnavailable     = RPCError{CodeUnavailable, "upstream unavailable", ""}
	ErrorLimit           = RPCError{CodeLimitExceeded, "limit exceeded", ""}
)

// MethodDenied is the error for a method muxd's policy refuses
// (deny_methods): geth's own words for a method it does not serve, so that
// clients treat it as they treat the node's (ethers classifies -32601 as
// an unsupported operation only by that wording), and error.data.reason
// "denied" to say that muxd refused it.
func MethodDenied(method string) RPCError {
	return RPCError{CodeMethodNotFound, "the method " + method + " does not exist/is not available", "denied"}
}

// Because returns a copy of e carrying reason as error.data.reason.
func (e RPCError) Because(reason string) RPCError {
	e.Reason = reason
	return e
}

// Error makes RPCError usable as a Go error in logs and tests.
func (e RPCError) Error() string {
	if e.Reason != "" {
		return e.Message + " (" + e.Reason + ")"
	}
	return e.Message
}

// AppendErrorResponse appends the response object for e to dst. id is the
// raw id to echo, byte for byte; nil or empty means null.
func AppendErrorResponse(dst, id []byte, e RPCError) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	if len(id) == 0 {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, id...)
	}
	dst = append(dst, `,"error":{"code":`...)
	dst = strconv.AppendInt(dst, int64(e.Code), 10)
	dst = append(dst, `,"message":`...)
	dst = appendJSONString(dst, e.Message)
	if e.Reason != "" {
		dst = append(dst, `,"data":{"reason":`...)
		dst = appendJSONString(dst, e.Reason)
		dst = append(dst, '}')
	}
	return append(dst, "}}"...)
}

// ErrorResponse is AppendErrorResponse into a new slice.
func ErrorResponse(id []byte, e RPCError) []byte {
	return AppendErrorResponse(make([]byte, 0, 96+len(id)), id, e)
}

// AppendResultResponse appends {"jsonrpc":"2.0","id":id,"result":result}.
// result must be valid JSON.
func AppendResultResponse(dst, id, result []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	if len(id) == 0 {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, id...)
	}
	dst = append(dst, `,"result":`...)
	dst = append(dst, result...)
	return append(dst, '}')
}

// AppendRequest appends {"jsonrpc":"2.0","id":id,"method":method,"params":params}:
// the requests muxd sends upstream on its own behalf. params must be valid
// JSON.
func AppendRequest(dst []byte, id uint64, method string, params []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = AppendUpstreamID(dst, id)
	dst = append(dst, `,"method":`...)
	dst = appendJSONString(dst, method)
	dst = append(dst, `,"params":`...)
	dst = append(dst, params...)
	return append(dst, '}')
}

const hexDigits = "0123456789abcdef"

func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}
