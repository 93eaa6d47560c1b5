package router

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

const (
	benchRequest  = `{"jsonrpc":"2.0","id":42,"method":"eth_getBalance","params":["0x5fbdb2315678afecb367f032d93f642f64180aa3","latest"]}`
	benchResponse = `{"jsonrpc":"2.0","id":42,"result":"0x8a3c6e1f0b2d4c5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d"}`
)

// newHeadsPush is a realistic eth_subscription newHeads notification as
// geth sends it (post-Prague header), about 2 KB.
var newHeadsPush = func() string {
	h := func(seed string) string { return `"0x` + strings.Repeat(seed, 64/len(seed)) + `"` }
	bloom := `"0x` + strings.Repeat("00200000000000000000000080000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000008", 4) + `"`
	fields := []string{
		`"parentHash":` + h("1b4c"), `"sha3Uncles":"0x1dcc4de8dec75d7aab85b567b6ccd41ad312451b948a7413f0a142fd40d49347"`,
		`"miner":"0x95222290dd7278aa3ddd389cc1e1d165cc4bafe5"`, `"stateRoot":` + h("7e3a"),
		`"transactionsRoot":` + h("9f01"), `"receiptsRoot":` + h("c2d8"), `"logsBloom":` + bloom,
		`"difficulty":"0x0"`, `"number":"0x1527a6c"`, `"gasLimit":"0x2255100"`, `"gasUsed":"0x9a3b12"`,
		`"timestamp":"0x6836b1bb"`, `"extraData":"0x6265617665726275696c642e6f7267"`, `"mixHash":` + h("44e0"),
		`"nonce":"0x0000000000000000"`, `"baseFeePerGas":"0x1e4a6f2b"`, `"withdrawalsRoot":` + h("0aa7"),
		`"blobGasUsed":"0xc0000"`, `"excessBlobGas":"0x4b00000"`, `"parentBeaconBlockRoot":` + h("5d19"),
		`"requestsHash":"0xe3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"`,
		`"hash":` + h("f00d"), `"totalDifficulty":"0xc70d815d562d3cfa955"`, `"size":"0x1d2f1"`,
		`"uncles":[]`, `"transactions":[]`, `"withdrawals":[{"index":"0x5a4f1c2","validatorIndex":"0x1a2b3","address":"0xb9d7934878b5fb9610b3fe8a5e441e8fad7e293f","amount":"0x11b4e5c"}]`,
	}
	return `{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0xcd0c3e8af590364c09d0fa6a1210faf5","result":{` +
		strings.Join(fields, ",") + `}}}`
}()

func TestNewHeadsPushSize(t *testing.T) {
	if n := len(newHeadsPush); n < 1800 || n > 2300 {
		t.Fatalf("push is %d bytes, want about 2 KB", n)
	}
	f, err := ScanUpstream([]byte(newHeadsPush), nil)
	if err != nil || string(f.Messages[0].Subscription.In([]byte(newHeadsPush))) != `"0xcd0c3e8af590364c09d0fa6a1210faf5"` {
		t.Fatalf("%v %+v", err, f)
	}
}

// benchScan scans frame, which holds want valid messages, with scan.
func benchScan(b *testing.B, frame string, want int, scan func([]byte, []Message) (Frame, error)) {
	fb := []byte(frame)
	msgs := make([]Message, 0, 16)
	b.SetBytes(int64(len(fb)))
	b.ReportAllocs()
	for b.Loop() {
		f, err := scan(fb, msgs)
		if err != nil || len(f.Messages) != want || f.Messages[want-1].Invalid != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkScanRequest(b *testing.B)  { benchScan(b, benchRequest, 1, ScanClient) }
func BenchmarkScanResponse(b *testing.B) { benchScan(b, benchResponse, 1, ScanUpstream) }

// bench (c)'s client batch and the node's array answer to it, as in
// core's BenchmarkBatchRoundTrip: ten eth_calls, ten 32-byte results.
var (
	benchBatchRequest  = benchArray(`{"jsonrpc":"2.0","id":%d,"method":"eth_call","params":[{"to":"0x6b175474e89094c44da98b954eedeac495271d0f","data":"0x70a08231000000000000000000000000f39fd6e51aad88f6f4ce6ab8827279cfffb92266"},"latest"]}`)
	benchBatchResponse = benchArray(`{"jsonrpc":"2.0","id":%d,"result":"0x00000000000000000000000000000000000000000000000000000000000003e8"}`)
)

func benchArray(element string) string {
	parts := make([]string, 10)
	for i := range parts {
		parts[i] = fmt.Sprintf(element, 1000+i)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func BenchmarkScanBatchRequest(b *testing.B)  { benchScan(b, benchBatchRequest, 10, ScanClient) }
func BenchmarkScanBatchResponse(b *testing.B) { benchScan(b, benchBatchResponse, 10, ScanUpstream) }

func BenchmarkScanNotification2KB(b *testing.B) {
	benchScan(b, newHeadsPush, 1, ScanUpstream)
}

// BenchmarkScanResponseHead routes a 1 MiB answer by its head: the cost
// does not grow with the result, which is not scanned.
func BenchmarkScanResponseHead(b *testing.B) {
	frame := []byte(`{"jsonrpc":"2.0","id":42,"result":"0x` + strings.Repeat("ab", 1<<19) + `"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := ScanResponseHead(frame); !ok {
			b.Fatal("refused")
		}
	}
}

func BenchmarkSpliceID(b *testing.B) {
	frame := []byte(benchRequest)
	f, err := ScanClient(frame, nil)
	if err != nil {
		b.Fatal(err)
	}
	m := f.Messages[0]
	buf := make([]byte, 0, 256)
	var idBuf [20]byte
	r := NewRequests()
	b.ReportAllocs()
	for b.Loop() {
		uid := AppendUpstreamID(idBuf[:0], r.Next())
		buf = AppendSpliced(buf[:0], frame, m.ID, uid)
	}
	if len(buf) < len(frame) {
		b.Fatal("short")
	}
}

// BenchmarkRouteResponse is the path of every answer from the node: scan,
// find the pending request, restore the client's id.
func BenchmarkRouteResponse(b *testing.B) {
	const table = 4096
	frames := make([][]byte, table)
	for k := range frames {
		frames[k] = []byte(strings.Replace(benchResponse, `"id":42`, `"id":`+string(AppendUpstreamID(nil, uint64(k+1))), 1))
	}
	pendings := make([]Pending, table)
	for k := range pendings {
		pendings[k] = Pending{Client: ClientID(k%16 + 1), ID: []byte(`"req-` + string(AppendUpstreamID(nil, uint64(k))) + `"`),
			Method: "eth_getBalance", Deadline: t0.Add(time.Duration(k) * time.Millisecond)}
	}
	r := NewRequests()
	fill := func() {
		for k := range pendings {
			r.Add(uint64(k+1), pendings[k])
		}
	}
	msgs := make([]Message, 0, 4)
	out := make([]byte, 0, 256)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := i % table
		if k == 0 {
			b.StopTimer()
			fill()
			b.StartTimer()
		}
		frame := frames[k]
		f, err := ScanUpstream(frame, msgs)
		if err != nil {
			b.Fatal(err)
		}
		m := &f.Messages[0]
		uid, ok := ParseUpstreamID(m.ID.In(frame))
		if !ok {
			b.Fatal("bad id")
		}
		p, ok := r.Take(uid)
		if !ok {
			b.Fatal("not pending")
		}
		out = AppendSpliced(out[:0], frame, m.ID, p.ID)
	}
}

// BenchmarkDropClient removes a departing client's 10 requests from a table
// that also holds others' requests: the cost should not grow with them.
func BenchmarkDropClient(b *testing.B) {
	for _, others := range []int{100, 100000} {
		b.Run(fmt.Sprintf("others=%d", others), func(b *testing.B) {
			r := NewRequests()
			for i := 0; i < others; i++ {
				r.Add(r.Next(), Pending{Client: ClientID(i%1000 + 2), ID: []byte("1")})
			}
			p := Pending{Client: 1, ID: []byte("1")}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for k := 0; k < 10; k++ {
					r.Add(r.Next(), p)
				}
				r.DropClient(1, nil)
			}
		})
	}
}
