package router

import (
	"testing"
	"time"
)

func TestThrottle(t *testing.T) {
	rows := []struct {
		name, err string
		want      bool
		wait      time.Duration
	}{
		{"infura_rate", `{"code":-32005,"message":"daily request count exceeded, request rate limited","data":{"see":"https://infura.io/dashboard","current_rps":13.3,"allowed_rps":10,"backoff_seconds":30}}`, true, 30 * time.Second},
		{"alchemy_cu", `{"code":429,"message":"Your app has exceeded its compute units per second capacity."}`, true, 0},
		{"minus_32029", `{"code":-32029,"message":"slow down"}`, true, 0},
		{"eip1474_limit", `{"code":-32005,"message":"limit exceeded"}`, true, 0},
		{"retry_after_string", `{"code":-32005,"message":"limit exceeded","data":{"retry_after":"1.5"}}`, true, 1500 * time.Millisecond},
		{"retry_after_camel", `{"code":429,"message":"x","data":{"retryAfter":2}}`, true, 2 * time.Second},
		{"retry_after_capped", `{"code":429,"message":"x","data":{"backoff_seconds":1e9}}`, true, MaxRetryAfter},
		{"retry_after_negative", `{"code":429,"message":"x","data":{"backoff_seconds":-5}}`, true, 0},
		{"message_only", `{"code":-32000,"message":"Too Many Requests"}`, true, 0},
		{"rate_limit_message", `{"code":-32603,"message":"rate limit reached for this key"}`, true, 0},
		{"getlogs_results", `{"code":-32005,"message":"query returned more than 10000 results"}`, false, 0},
		{"range_too_large", `{"code":-32005,"message":"block range too large"}`, false, 0},
		{"revert", `{"code":3,"message":"execution reverted","data":"0x08c379a0"}`, false, 0},
		{"plain_error", `{"code":-32000,"message":"nonce too low"}`, false, 0},
		{"not_json", `{"code":`, false, 0},
		{"not_an_object", `"rate limit"`, false, 0},
		{"data_not_an_object", `{"code":429,"message":"x","data":"backoff_seconds"}`, true, 0},
	}
	for _, row := range rows {
		got, wait := Throttle([]byte(row.err))
		if got != row.want || wait != row.wait {
			t.Errorf("%s: Throttle = %v, %v; want %v, %v", row.name, got, wait, row.want, row.wait)
		}
	}
}

func TestThrottledStatus(t *testing.T) {
	rows := []struct {
		status int
		after  string
		want   bool
		wait   time.Duration
	}{
		{429, "", true, 0},
		{429, "7", true, 7 * time.Second},
		{429, "Wed, 21 Oct 2015 07:28:00 GMT", true, 0},
		{429, `"}`, true, 0},
		{503, "7", false, 0},
		{101, "", false, 0},
	}
	for _, row := range rows {
		got, wait := ThrottledStatus(row.status, row.after)
		if got != row.want || wait != row.wait {
			t.Errorf("%d %q: %v, %v; want %v, %v", row.status, row.after, got, wait, row.want, row.wait)
		}
	}
}

// FuzzThrottle: any error member is classified without a panic, and a wait
// is only ever given with throttling, within its bound.
func FuzzThrottle(f *testing.F) {
	f.Add(`{"code":-32005,"message":"request rate limited","data":{"backoff_seconds":30}}`)
	f.Add(`{"code":429,"message":"x","data":{"retry_after":"1e400"}}`)
	f.Add(`{"code":1e99,"message":"rate limit"}`)
	f.Fuzz(func(t *testing.T, s string) {
		got, wait := Throttle([]byte(s))
		if wait < 0 || wait > MaxRetryAfter || (!got && wait != 0) {
			t.Fatalf("Throttle(%q) = %v, %v", s, got, wait)
		}
		if ok, w := ThrottledStatus(429, s); !ok || w < 0 || w > MaxRetryAfter {
			t.Fatalf("ThrottledStatus(429, %q) = %v, %v", s, ok, w)
		}
	})
}
