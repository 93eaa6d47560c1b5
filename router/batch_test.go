package router

import (
	"encoding/json"
	"slices"
	"strconv"
	"testing"
)

func TestBatch(t *testing.T) {
	const n = 5
	b := NewBatch(3, n)
	if b.Client != 3 || b.Want() != n || b.Complete() {
		t.Fatalf("new batch: %+v", b)
	}
	// Answers arrive in any order; muxd's own errors mix in. The array
	// holds them in slot (request) order.
	order := []int{4, 0, 3, 1, 2}
	parts := make([]string, n)
	for k, i := range order {
		var resp []byte
		if i == 3 {
			resp = ErrorResponse([]byte(`"three"`), ErrorTimeout)
		} else {
			resp = AppendResultResponse(nil, []byte(strconv.Itoa(i)), []byte(`{"n":`+strconv.Itoa(i)+`}`))
		}
		parts[i] = string(resp)
		complete := b.Add(i, resp)
		if complete != (k == n-1) || b.Complete() != complete {
			t.Fatalf("after %d answers: complete %v %v", k+1, complete, b.Complete())
		}
	}
	out := b.Encode()
	if !json.Valid(out) {
		t.Fatalf("not valid JSON: %s", out)
	}
	var arr []json.RawMessage
	if err := json.Unmarshal(out, &arr); err != nil {
		t.Fatal(err)
	}
	if len(arr) != n {
		t.Fatalf("%d elements", len(arr))
	}
	var got []string
	for _, a := range arr {
		got = append(got, string(a))
	}
	if !slices.Equal(got, parts) {
		t.Fatalf("parts\n%q\nwant\n%q", got, parts)
	}
	if cap(out) != len(out) && cap(out) > len(out)+n+2 {
		t.Errorf("Encode over-allocated: len %d cap %d", len(out), cap(out))
	}
}

func TestBatchExtraAnswers(t *testing.T) {
	b := NewBatch(1, 2)
	if b.Add(1, []byte(`2`)) {
		t.Fatal("complete after 1 of 2")
	}
	// A second answer to a filled slot, or to no slot, is ignored.
	for _, slot := range []int{1, -1, 2} {
		if b.Add(slot, []byte(`9`)) || b.Complete() {
			t.Fatalf("answer to slot %d counted", slot)
		}
	}
	if !b.Add(0, []byte(`1`)) || !b.Complete() {
		t.Fatal("not complete")
	}
	// Add reports completion exactly once; later answers are ignored.
	if b.Add(0, []byte(`3`)) || !b.Complete() {
		t.Fatal("extra answer reported as completing")
	}
	if got := string(b.Encode()); got != `[1,2]` {
		t.Fatalf("Encode = %s", got)
	}
}

func TestBatchAddAfterEncode(t *testing.T) {
	b := NewBatch(1, 1)
	b.Add(0, []byte(`1`))
	if got := string(b.Encode()); got != `[1]` {
		t.Fatalf("Encode = %s", got)
	}
	if b.Add(0, []byte(`2`)) || !b.Complete() {
		t.Fatal("an answer after Encode completed the batch again")
	}
	for _, p := range b.parts {
		if p != nil {
			t.Fatal("Encode kept the answers")
		}
	}
}

func TestBatchSingle(t *testing.T) {
	b := NewBatch(1, 1)
	if !b.Add(0, []byte(`{"jsonrpc":"2.0","id":1,"result":null}`)) {
		t.Fatal("not complete")
	}
	if got := string(b.Encode()); got != `[{"jsonrpc":"2.0","id":1,"result":null}]` {
		t.Fatalf("Encode = %s", got)
	}
}
