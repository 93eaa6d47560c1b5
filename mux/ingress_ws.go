package mux

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/muxd/muxd/router"
)

// wsTransport carries a client session over a WebSocket.
type wsTransport struct {
	conn *websocket.Conn
	cork *corkConn // the socket under conn (set by corkingWriter.Hijack)
}

func (t *wsTransport) name() string { return "ws" }

// write sends msgs as one WebSocket message each, in one system call when
// there are several (one answer each is the common case under load: a
// writer that wakes finds a few).
func (t *wsTransport) write(ctx context.Context, msgs [][]byte) error {
	if t.cork == nil || len(msgs) < 2 {
		return t.writeEach(msgs)
	}
	t.cork.cork()
	err := t.writeEach(msgs)
	if uerr := t.cork.uncork(); err == nil {
		err = uerr // after a failed write, uncork's error adds nothing
	}
	return err
}

func (t *wsTransport) writeEach(msgs [][]byte) error {
	for _, m := range msgs {
		// A context that never ends, as for the upstream (coder/websocket
		// watches a cancellable one on every call): the session ends a
		// write by closing the connection (tr.close).
		if err := t.conn.Write(context.Background(), websocket.MessageText, m); err != nil {
			return err
		}
	}
	return nil
}

// wsCloseWait bounds the close handshake. A peer that does not read (a slow
// consumer) cannot take the close frame through its full socket, and
// coder/websocket would otherwise wait 5 s for it.
const wsCloseWait = time.Second

func (t *wsTransport) close(code int, reason string) {
	done := make(chan struct{})
	go func() {
		t.conn.Close(websocket.StatusCode(code), reason)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(wsCloseWait):
		t.conn.CloseNow()
	}
}

// ServeWebSocket upgrades r to a WebSocket and starts a client session on
// it, which runs until either side closes; it returns once the session has
// started (or been refused).
func (s *Server) ServeWebSocket(w http.ResponseWriter, r *http.Request) {
	cw := &corkingWriter{ResponseWriter: w}
	conn, err := websocket.Accept(cw, r, &websocket.AcceptOptions{
		OriginPatterns:  s.cfg.AllowedOrigins,
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		s.log.Debug("websocket upgrade refused", "remote", r.RemoteAddr, "err", err)
		return
	}
	// Messages past MaxMessageBytes are answered with -32005 and read to
	// the end; the library's own limit, well above, only stops a peer that
	// streams without end.
	conn.SetReadLimit(4*s.cfg.MaxMessageBytes + 1024)
	c, err := s.newClient(context.WithoutCancel(r.Context()), &wsTransport{conn: conn, cork: cw.conn}, ClientName(r))
	if err != nil {
		code := websocket.StatusTryAgainLater
		if errors.Is(err, ErrClosed) {
			code = websocket.StatusGoingAway
		}
		conn.Close(code, err.Error())
		return
	}
	// The session reads on a goroutine of its own and the handler returns:
	// net/http's connection goroutine, its stack grown deep by the server,
	// and its per-request state are let go, which is most of what an idle
	// client would otherwise cost. The hijacked socket is the session's.
	go func() {
		defer s.removeClient(c)
		k := s.startKeepalive(c, conn)
		defer k.stop()
		s.readWebSocket(c, conn, k)
	}()
}

// endRead ends a session whose read failed with err. coder/websocket
// refuses some frames (an unmasked one, at a message's start or within it)
// without closing; RFC 6455 wants 1002 for them, as geth sends. Otherwise
// the session's end closes it as usual (removeClient).
func endRead(c *Client, err error) {
	if brokeProtocol(err) {
		c.shut(closeProtocolError, "protocol error")
	}
}

// brokeProtocol reports whether a read failed on what the client sent
// rather than on the connection ending: not a close frame, not the socket
// closed, reset or cut short.
func brokeProtocol(err error) bool {
	return websocket.CloseStatus(err) == -1 &&
		!errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) &&
		!errors.Is(err, net.ErrClosed) && !errors.Is(err, syscall.ECONNRESET) &&
		!errors.Is(err, syscall.EPIPE) && !errors.Is(err, os.ErrDeadlineExceeded)
}

// readWebSocket is the session's reader: one frame at a time, each handed to
// the dispatcher. The frame buffer is reused: dispatch keeps nothing of it.
func (s *Server) readWebSocket(c *Client, conn *websocket.Conn, k *clientKeepalive) {
	limit := s.cfg.MaxMessageBytes
	var frame []byte
	for {
		// Not c.ctx: cancelling a read context makes coder/websocket drop the
		// TCP connection at once, before the close frame (1001, 1008) that
		// tr.close writes. tr.close ends this read instead. And a context
		// that never ends costs coder/websocket no watcher per read.
		_, r, err := conn.Reader(context.Background())
		k.read()
		if err == nil {
			frame, err = readMessage(frame, r, limit)
		}
		if err != nil {
			s.letGoReadBuffer(frame) // a message left unfinished, too
			endRead(c, err)
			return
		}
		if int64(len(frame)) > limit {
			// Read to its end, keeping nothing but its id, which the
			// refusal carries (null when it cannot be told).
			var f router.IDFinder
			f.Write(frame)
			if _, err := io.Copy(&f, r); err != nil {
				endRead(c, err)
				return
			}
			id, _ := f.ID()
			s.refuseTooLarge(c, id)
			frame = s.letGoReadBuffer(frame)
			continue
		}
		s.dispatch(c, frame)
		frame = s.letGoReadBuffer(frame)
	}
}
