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

// CallKey canonicalises a call (method and params, nil when absent) into
// the key under which identical calls are coalesced and cached: the
// method, a NUL, and params with whitespace dropped and object members in
// key order, as SubscriptionKey does. Numbers keep their text and strings
// their case (hex included): two calls share a key only when the node
// must read them as the same call. Absent params and [] are different keys.
func CallKey(method string, params []byte) (string, error) {
	if params == nil {
		return method + "\x00", nil
	}
	var v any
	if err := decodeCanonical(params, &v); err != nil {
		return "", ErrCallParams
	}
	s, err := encodeCanonical(v)
	if err != nil {
		return "", err
	}
	return method + "\x00" + s, nil
}

// decodeCanonical decodes raw, one JSON value, into v, numbers as their
// text.
func decodeCanonical(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
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
