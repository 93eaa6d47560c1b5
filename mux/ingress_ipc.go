package mux

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/muxd/muxd/router"
)

// ipcTransport carries a session over a stream socket in geth's IPC format:
// JSON values back to back, each answer followed by a newline. Everything
// queued is written with one system call (writev), without being copied.
type ipcTransport struct {
	conn net.Conn
	mu   sync.Mutex
	vec  net.Buffers // reused between writes; its slices are the messages
}

func (t *ipcTransport) name() string { return "ipc" }

var newline = []byte{'\n'}

// maxKeptVec is the longest write vector a session keeps (two entries per
// message).
const maxKeptVec = 1024

func (t *ipcTransport) write(ctx context.Context, msgs [][]byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	vec := t.vec[:0]
	for _, m := range msgs {
		vec = append(vec, m, newline)
	}
	t.vec = vec
	_, err := vec.WriteTo(t.conn) // advances vec; t.vec keeps the array
	clear(t.vec)                  // let the messages go
	t.vec = reuse(t.vec, maxKeptVec)
	return err
}

func (t *ipcTransport) close(int, string) { t.conn.Close() }

// ServeIPC accepts stream connections (a Unix socket) until ln is closed.
func (s *Server) ServeIPC(ln net.Listener) error {
	for {
		conn, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return fmt.Errorf("accept ipc: %w", err)
		}
		go s.serveIPCConn(conn)
	}
}

func (s *Server) serveIPCConn(conn net.Conn) {
	// IPC clients are unnamed: a Unix socket has no path or header to
	// say a name with.
	c, err := s.newClient(context.Background(), &ipcTransport{conn: conn}, "")
	if err != nil {
		conn.Close()
		return
	}
	defer s.removeClient(c)
	// Stop the decoder when the session ends for any other reason (slow
	// consumer, shutdown).
	go func() {
		<-c.ctx.Done()
		conn.Close()
	}()
	lr := &valueLimitReader{r: bufio.NewReaderSize(conn, 64<<10), limit: s.cfg.MaxMessageBytes + 64<<10}
	dec := json.NewDecoder(lr)
	lr.dec = dec
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, errValueTooLarge) {
				// The decoder would buffer an endless value whole; the
				// stream cannot resync past it either.
				s.refuseTooLarge(c, nil)
				c.finish(closeNormal, "message too large")
				<-c.ctx.Done()
				return
			}
			var syn *json.SyntaxError
			switch {
			case errors.As(err, &syn) || errors.Is(err, io.ErrUnexpectedEOF):
				// A stream cannot resync after bad JSON: answer -32700,
				// then close this connection once everything owed to it
				// has been written.
				s.refuse(c, nil, router.ErrorParse)
				c.finish(closeNormal, "parse error")
				<-c.ctx.Done()
			case errors.Is(err, io.EOF):
				// The client shut down its sending side (socat, nc -N,
				// scripts) or closed: it can send nothing more, but it is
				// still owed an answer to every request it sent. The
				// session lives on until each has been answered (by the
				// node or, at request_timeout, by muxd) and written, and
				// then ends, releasing its subscriptions: a client that
				// cannot send cannot unsubscribe either.
				c.finish(closeNormal, "client closed its sending side")
				<-c.ctx.Done()
			}
			return
		}
		if int64(len(raw)) > s.cfg.MaxMessageBytes {
			var f router.IDFinder
			f.Write(raw)
			id, _ := f.ID()
			s.refuseTooLarge(c, id)
			continue
		}
		s.dispatch(c, raw)
	}
}

var errValueTooLarge = errors.New("ipc: message too large")

// valueLimitReader stops a json.Decoder from buffering one value past limit
// bytes: it fails once more than limit bytes have been read beyond the end
// of the last value decoded.
type valueLimitReader struct {
	r     io.Reader
	dec   *json.Decoder
	read  int64
	limit int64
}

func (l *valueLimitReader) Read(p []byte) (int, error) {
	if l.read-l.dec.InputOffset() > l.limit {
		return 0, errValueTooLarge
	}
	n, err := l.r.Read(p)
	l.read += int64(n)
	return n, err
}

// ListenIPC creates a Unix socket at path with the given file mode. A socket
// file left by a crashed run is replaced; one that a live process still
// answers on is not taken over.
func ListenIPC(path string, mode os.FileMode) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("listen ipc %s: file exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen ipc %s: %w", path, ErrSocketInUse)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("listen ipc: remove stale socket: %w", err)
		}
	}
	// Create the socket with no permissions for anyone else, then widen
	// to mode: there is no moment when it is more open than asked.
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen ipc: %w", err)
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen ipc: chmod: %w", err)
	}
	return ln, nil
}

// ErrSocketInUse means another live process serves the IPC path.
var ErrSocketInUse = errors.New("socket in use by a live process")
