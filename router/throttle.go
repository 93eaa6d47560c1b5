package router

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"
)

// MaxRetryAfter bounds the wait a throttling answer may ask for (Throttle):
// a provider's error data is not a reason to stall for hours.
const MaxRetryAfter = 10 * time.Minute

// Throttle reports whether errObj, the error member of a node's answer,
// says the node or its provider is limiting the request rate, and the wait
// it asks for (0: none said). Throttling is:
//
//   - code 429 (HTTP's Too Many Requests as a JSON-RPC code) or -32029;
//   - code -32005 (EIP-1474's "limit exceeded"), unless the message is
//     about an answer's size or a query's range ("query returned more
//     than 10000 results", "block range too large"), which waiting does not
//     change;
//   - any code whose message says so: "rate limit", "too many requests",
//     "request rate", "capacity", "throughput".
//
// The wait is data.backoff_seconds (Infura), data.retry_after or
// data.retryAfter, in seconds (a number or a string of one), within 0 and
// MaxRetryAfter. Malformed input is not throttling.
func Throttle(errObj []byte) (throttled bool, retryAfter time.Duration) {
	var e struct {
		Code    json.Number     `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(errObj, &e); err != nil {
		return false, 0
	}
	code, _ := strconv.ParseInt(e.Code.String(), 10, 64)
	msg := bytes.ToLower([]byte(e.Message))
	switch {
	case code == 429 || code == -32029:
		throttled = true
	case code == -32005:
		throttled = !containsAny(msg, "more than", "range", "size", "too large", "results")
	}
	if !throttled && !containsAny(msg, "rate limit", "rate-limit", "ratelimit", "too many requests", "request rate", "capacity", "throughput") {
		return false, 0
	}
	return true, retryAfterOf(e.Data)
}

func containsAny(s []byte, subs ...string) bool {
	for _, sub := range subs {
		if bytes.Contains(s, []byte(sub)) {
			return true
		}
	}
	return false
}

// retryAfterOf reads the wait from an error's data (see Throttle).
func retryAfterOf(data json.RawMessage) time.Duration {
	var d map[string]json.RawMessage
	if len(data) == 0 || json.Unmarshal(data, &d) != nil {
		return 0
	}
	for _, k := range []string{"backoff_seconds", "retry_after", "retryAfter"} {
		raw, ok := d[k]
		if !ok {
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			raw = []byte(s)
		}
		secs, err := strconv.ParseFloat(string(bytes.TrimSpace(raw)), 64)
		if err != nil || math.IsNaN(secs) || secs <= 0 {
			continue
		}
		if secs >= MaxRetryAfter.Seconds() {
			return MaxRetryAfter
		}
		return time.Duration(secs * float64(time.Second))
	}
	return 0
}

// ThrottledStatus reports whether an HTTP status refusing a WebSocket
// handshake is throttling (429 Too Many Requests), and the wait its
// Retry-After header value asks for in seconds (0: none, or an HTTP date,
// which muxd does not read), within MaxRetryAfter.
func ThrottledStatus(status int, retryAfter string) (bool, time.Duration) {
	if status != 429 {
		return false, 0
	}
	return true, retryAfterOf(json.RawMessage(`{"retry_after":` + strconv.Quote(retryAfter) + `}`))
}
