package testnode

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
)

// CutProxy forwards TCP connections to a target and can cut the path:
// every proxied connection is closed and new ones are refused until it is
// restored, as when the network between muxd and a node is down. It keeps
// the last 4 MiB the target sent on each connection, for a failure's
// message (DownMessages).
type CutProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   map[net.Conn]bool
	refuse  bool
	wg      sync.WaitGroup
	stopped bool
	down    []*TailBuffer // what the target sent, connection by connection
	// cutWhen, when set, is asked about every read from the target
	// before it is forwarded: true cuts the path instead (CutWhen).
	cutWhen func([]byte) bool
}

// NewCutProxy listens on a free loopback port and forwards to target
// (host:port); it is closed at the test's cleanup.
func NewCutProxy(t testing.TB, target string) *CutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &CutProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

func (p *CutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.refuse || p.stopped {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = true, true
		tap := &TailBuffer{Limit: 4 << 20}
		p.down = append(p.down, tap)
		p.wg.Add(2)
		p.mu.Unlock()
		go p.copy(up, up, c)
		go p.copy(cutWriter{p, io.MultiWriter(c, tap)}, c, up)
	}
}

// copy copies src to w until either side ends, then closes both src and
// its peer.
func (p *CutProxy) copy(w io.Writer, peer, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(w, src)
	src.Close()
	peer.Close()
	p.mu.Lock()
	delete(p.conns, src)
	delete(p.conns, peer)
	p.mu.Unlock()
}

// Cut closes every proxied connection and refuses new ones until Restore.
func (p *CutProxy) Cut() {
	p.mu.Lock()
	p.refuse = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

// CutWhen makes the proxy cut the path (as Cut) the first time what the
// target sends matches f, instead of forwarding it: f sees each read from
// the target, as it came off the socket (WebSocket frames from a server
// are not masked, so a JSON text can be looked for in it).
func (p *CutProxy) CutWhen(f func([]byte) bool) {
	p.mu.Lock()
	p.cutWhen = f
	p.mu.Unlock()
}

// cutWriter forwards what the target sends, unless the proxy's cutWhen
// matches it: then the path is cut.
type cutWriter struct {
	p *CutProxy
	w io.Writer
}

var errCutWhen = errors.New("testnode: path cut on a match")

func (cw cutWriter) Write(b []byte) (int, error) {
	cw.p.mu.Lock()
	f := cw.p.cutWhen
	cw.p.mu.Unlock()
	if f != nil && f(b) {
		cw.p.mu.Lock()
		cw.p.cutWhen = nil
		cw.p.mu.Unlock()
		cw.p.Cut()
		return 0, errCutWhen
	}
	return cw.w.Write(b)
}

// Restore ends a cut: new connections are proxied again.
func (p *CutProxy) Restore() {
	p.mu.Lock()
	p.refuse = false
	p.mu.Unlock()
}

// Addr is the proxy's address, host:port.
func (p *CutProxy) Addr() string { return p.ln.Addr().String() }

// Close stops the proxy and closes every connection.
func (p *CutProxy) Close() {
	p.mu.Lock()
	p.stopped = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

// DownMessages returns the text messages the target sent through the
// proxy, connection by connection, read off the WebSocket frames (a
// server's are not masked) kept after the upgrade response.
func (p *CutProxy) DownMessages() [][]string {
	p.mu.Lock()
	taps := slices.Clone(p.down)
	p.mu.Unlock()
	var out [][]string
	for _, tap := range taps {
		b := []byte(tap.String())
		if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
			b = b[i+4:]
		}
		var msgs []string
		for len(b) >= 2 {
			n, hdr := uint64(b[1]&0x7f), 2
			switch n {
			case 126:
				if len(b) < 4 {
					break
				}
				n, hdr = uint64(binary.BigEndian.Uint16(b[2:4])), 4
			case 127:
				if len(b) < 10 {
					break
				}
				n, hdr = binary.BigEndian.Uint64(b[2:10]), 10
			}
			if uint64(len(b)-hdr) < n {
				break
			}
			if b[0]&0x0f == 1 || b[0]&0x0f == 0 {
				msgs = append(msgs, string(b[hdr:hdr+int(n)]))
			}
			b = b[hdr+int(n):]
		}
		out = append(out, msgs)
	}
	return out
}

// TailBuffer keeps the last Limit bytes written to it.
type TailBuffer struct {
	Limit int
	mu    sync.Mutex
	b     []byte
}

func (w *TailBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if len(w.b) > w.Limit {
		w.b = append([]byte(nil), w.b[len(w.b)-w.Limit:]...)
	}
	return len(p), nil
}

func (w *TailBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}
