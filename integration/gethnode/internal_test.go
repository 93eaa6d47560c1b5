package gethnode

import (
	"errors"
	"net"
	"strings"
	"testing"
)

// A port taken between picking and binding must be reported as errAddrInUse,
// which is what Start retries on.
func TestStartReportsAddrInUse(t *testing.T) {
	bin := Require(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	n := &Node{bin: bin, log: &logBuffer{}, identity: newIdentity(), DataDir: t.TempDir()}
	if err := n.pickPorts(); err != nil {
		t.Fatal(err)
	}
	n.WSPort = l.Addr().(*net.TCPAddr).Port
	n.WSURL = "ws://" + l.Addr().String()
	t.Cleanup(func() { n.stop(t) }) // should a start wrongly succeed
	err = n.startAndWait()
	if !errors.Is(err, errAddrInUse) {
		t.Fatalf("startAndWait on a taken ws port: %v, want errAddrInUse\n%s", err, n.log.tail(logTailBytes))
	}
	if n.Running() {
		t.Fatal("Running() after a failed start")
	}
}

// If the picked ws port was taken by another geth, that geth answers the
// probe; the node must still not count as ready, and the clash must be
// reported as errAddrInUse.
func TestStartNotFooledByAnotherGeth(t *testing.T) {
	other := Start(t)
	n := &Node{bin: other.bin, log: &logBuffer{}, identity: newIdentity(), DataDir: t.TempDir()}
	if err := n.pickPorts(); err != nil {
		t.Fatal(err)
	}
	n.WSPort, n.WSURL = other.WSPort, other.WSURL
	t.Cleanup(func() { n.stop(t) }) // should a start wrongly succeed
	err := n.startAndWait()
	if !errors.Is(err, errAddrInUse) {
		t.Fatalf("startAndWait on another geth's ws port: %v, want errAddrInUse\n%s", err, n.log.tail(logTailBytes))
	}
}

func TestLogBuffer(t *testing.T) {
	var b logBuffer
	b.Write([]byte("first line\n"))
	mark := b.total()
	b.Write([]byte("second\nthird\n"))
	if got := b.since(mark); got != "second\nthird\n" {
		t.Fatalf("since = %q", got)
	}
	if got := b.tail(8); got != "third\n" { // cut to a line boundary
		t.Fatalf("tail(8) = %q", got)
	}

	big := strings.Repeat("x", 1023) + "\n"
	for range 2 * logLimit / len(big) {
		b.Write([]byte(big))
	}
	if n := len(b.tail(4 * logLimit)); n < logLimit || n > 2*logLimit {
		t.Fatalf("kept %d bytes, want %d..%d", n, logLimit, 2*logLimit)
	}
	if got := b.since(mark); len(got) > 2*logLimit || !strings.HasSuffix(got, big) {
		t.Fatalf("since after trimming: %d bytes", len(got))
	}
	if b.total() != int64(len("first line\nsecond\nthird\n"))+int64(2*logLimit/len(big)*len(big)) {
		t.Fatalf("total = %d", b.total())
	}
}
