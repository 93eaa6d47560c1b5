package router

import "testing"

func TestParseQuantity(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0x1a", 26, true}, {"0X1A", 26, true}, {"0x0", 0, true}, {"0xffffffffffffffff", 1<<64 - 1, true},
		{"0x", 0, false}, {"1a", 0, false}, {"0x1g", 0, false}, {"0x10000000000000000", 0, false}, {"", 0, false},
	} {
		if got, ok := ParseQuantity(tt.in); ok != tt.ok || ok && got != tt.want {
			t.Errorf("ParseQuantity(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParseQuantityJSON(t *testing.T) {
	for _, tc := range []struct {
		raw string
		n   uint64
		ok  bool
	}{
		{`"0x10"`, 16, true}, {`"0X1aF"`, 0x1af, true}, {`"0xffffffffffffffff"`, 1<<64 - 1, true},
		{`"0x"`, 0, false}, {`"0x1ffffffffffffffff"`, 0, false}, {`"10"`, 0, false}, {`0x10`, 0, false},
		{`"0xg"`, 0, false}, {`null`, 0, false}, {`""`, 0, false},
	} {
		n, ok := ParseQuantityJSON([]byte(tc.raw))
		if n != tc.n || ok != tc.ok {
			t.Errorf("ParseQuantityJSON(%s) = %d, %v; want %d, %v", tc.raw, n, ok, tc.n, tc.ok)
		}
	}
}
