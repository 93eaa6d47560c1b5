package reconnect

import "testing"

func TestRedact(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"plain host", "wss://mainnet.example.com", "wss://mainnet.example.com"},
		{"host and port", "ws://127.0.0.1:8546", "ws://127.0.0.1:8546"},
		{"root path", "ws://127.0.0.1:8546/", "ws://127.0.0.1:8546"},
		{"ipv6", "ws://[::1]:8546", "ws://[::1]:8546"},
		{"userinfo", "wss://user:s3cret@mainnet.example.com", "wss://mainnet.example.com"},
		{"userinfo key only", "wss://APIKEY@mainnet.example.com:443", "wss://mainnet.example.com:443"},
		{"path api key", "wss://mainnet.example.com/v3/0123456789abcdef", "wss://mainnet.example.com/…"},
		{"query key", "wss://mainnet.example.com?apikey=0123456789abcdef", "wss://mainnet.example.com/…"},
		{"root path with query", "wss://mainnet.example.com/?key=abc", "wss://mainnet.example.com/…"},
		{"fragment", "wss://mainnet.example.com#token", "wss://mainnet.example.com/…"},
		{"everything", "wss://u:p@mainnet.example.com:8443/k/abc?x=y#z", "wss://mainnet.example.com:8443/…"},
		{"invalid escape", "wss://mainnet.example.com/key%zz", "<invalid url>"},
		{"invalid host", "ws://[::1", "<invalid url>"},
		{"no scheme", "mainnet.example.com/v3/key", "<invalid url>"},
		{"empty", "", "<invalid url>"},
		{"control char", "wss://host/\x7f", "<invalid url>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Redact(tt.in); got != tt.want {
				t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}
