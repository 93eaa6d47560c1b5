package testnode

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Echo is the node's default answer to request r:
// {"jsonrpc":"2.0","id":ID,"result":{"method":M,"params":P}}, so that an
// answer routed to the wrong request is visible.
func Echo(r Req) []byte {
	params := r.Params
	if params == nil {
		params = json.RawMessage("null")
	}
	m, _ := json.Marshal(r.Method)
	var b bytes.Buffer
	b.WriteString(`{"jsonrpc":"2.0","id":`)
	b.Write(r.ID)
	b.WriteString(`,"result":{"method":`)
	b.Write(m)
	b.WriteString(`,"params":`)
	b.Write(params)
	b.WriteString(`}}`)
	return b.Bytes()
}

// ResultFrame builds {"jsonrpc":"2.0","id":id,"result":result}.
func ResultFrame(id json.RawMessage, result string) []byte {
	return []byte(`{"jsonrpc":"2.0","id":` + string(id) + `,"result":` + result + `}`)
}

// ErrorFrame builds an error response.
func ErrorFrame(id json.RawMessage, code int, msg string) []byte {
	return []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":%d,"message":%q}}`, id, code, msg))
}

// PushFrame builds an eth_subscription notification for upstream
// subscription upID (a JSON string) with the given raw result.
func PushFrame(upID, result string) []byte {
	return []byte(`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":` + upID + `,"result":` + result + `}}`)
}

// ArrayFrame joins parts into one JSON array.
func ArrayFrame(parts [][]byte) []byte {
	return append(append([]byte{'['}, bytes.Join(parts, []byte{','})...), ']')
}
