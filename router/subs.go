package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrSubscribeParams means eth_subscribe params muxd cannot key: not an
// array, empty, or not starting with the subscription name.
var ErrSubscribeParams = errors.New("eth_subscribe params must be an array starting with the subscription name")

// ErrCallParams means params that are not one JSON value: a call muxd
// cannot key (CallKey) is never coalesced or cached.
var ErrCallParams = errors.New("params are not one JSON value")

// SubscriptionKey canonicalises eth_subscribe params into the key under
// which identical subscriptions share one upstream subscription. Member
// order in objects does not matter (keys are sorted), and for "logs" the hex
// of addresses and topics is compared without regard to case, since the
// node parses it as numbers. Everything else is compared exactly: when in
// doubt, two subscriptions are kept apart.
func SubscriptionKey(params []byte) (string, error) {
	var v []any
	if err := decodeCanonical(params, &v); err != nil || len(v) == 0 {
		return "", ErrSubscribeParams
	}
	name, ok := v[0].(string)
	if !ok || name == "" {
		return "", ErrSubscribeParams
	}
	if foldedKeysMeet(v) {
		// The node reads such members into one field, the last one
		// winning: their order is part of the subscription, and a map
		// loses it. The params as written, whitespace aside, are the key.
		var b bytes.Buffer
		if err := json.Compact(&b, params); err != nil {
			return "", ErrSubscribeParams
		}
		return b.String(), nil
	}
	if name == "logs" && len(v) > 1 {
		if f, ok := v[1].(map[string]any); ok {
			for _, k := range []string{"address", "topics"} {
				if x, ok := f[k]; ok {
					f[k] = lowerHex(x)
				}
			}
		}
	}
	return encodeCanonical(v)
}

// decodeCanonical decodes raw, one JSON value, into v, numbers as their
// text.
func decodeCanonical(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	// Nothing but whitespace may follow (dec.More would let a stray ']'
	// or '}' through).
	if skipSpace(raw, int(dec.InputOffset())) != len(raw) {
		return ErrCallParams
	}
	return nil
}

// encodeCanonical writes v back without whitespace, object members sorted
// by key.
func encodeCanonical(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("canonical params: %w", err)
	}
	return string(b), nil
}

func lowerHex(x any) any {
	switch x := x.(type) {
	case string:
		if strings.HasPrefix(x, "0x") || strings.HasPrefix(x, "0X") {
			return strings.ToLower(x)
		}
		return x
	case []any:
		for i := range x {
			x[i] = lowerHex(x[i])
		}
		return x
	}
	return x
}

// foldedKeysMeet reports whether some object in v has two member names
// that are equal ignoring case (Unicode folding, as encoding/json matches
// names to struct fields, which is how the node reads a filter), or has
// too many members to compare (maxComparedMembers).
func foldedKeysMeet(v any) bool {
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			if foldedKeysMeet(e) {
				return true
			}
		}
	case map[string]any:
		if len(x) > maxComparedMembers {
			return true
		}
		keys := make([]string, 0, len(x))
		for k, e := range x {
			for _, seen := range keys {
				if strings.EqualFold(k, seen) {
					return true
				}
			}
			keys = append(keys, k)
			if foldedKeysMeet(e) {
				return true
			}
		}
	}
	return false
}
