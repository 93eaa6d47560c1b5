package mux

import (
	"crypto/rand"
	"encoding/hex"
)

// newSubscriptionID returns a fresh client subscription id as a JSON string:
// "0x" and 32 lowercase hex digits, like geth's. The routing core draws
// them through this (core.Config.NewSubscriptionID).
func newSubscriptionID() string {
	var b [16]byte
	rand.Read(b[:])
	out := make([]byte, 0, 36)
	out = append(out, `"0x`...)
	out = hex.AppendEncode(out, b[:])
	return string(append(out, '"'))
}
