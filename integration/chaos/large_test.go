package chaos

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/muxd/muxd/mux"
)

// TestLargeFramesSlowNode sends eth_calls of 5-9 MiB mixed with small
// ones, from several clients at once, through muxd to a node that reads
// slowly, so that muxd's shared socket holds a backlog of several MiB for
// seconds at a time. Every frame must reach the node as valid JSON (geth
// closes its socket on one bad frame), every call must get exactly one
// answer echoing its own params byte for byte, and the socket must stay up
// throughout: keepalive is on, with an interval shorter than the backlog
// takes to drain and a timeout shorter than what the socket buffers hold
// takes to read, so a ping stuck behind the backlog must not get the node
// declared dead.
func TestLargeFramesSlowNode(t *testing.T) {
	const (
		numClients  = 2
		perClient   = 12 // calls; every 6th is large
		largeEvery  = 6
		maxInFlight = 3
		nodeRate    = 4 << 20 // bytes per second the node reads
	)
	node := newSlowEchoNode(nodeRate)
	t.Cleanup(node.Close)

	srv, wsURL, _ := startMuxd(t, mux.Config{
		Upstream:       node.URL,
		RequestTimeout: 2 * time.Minute,
		// A large call alone takes 1.25-2.25 s to read, longer than
		// the interval; a node on a machine so busy that it shows no
		// sign of life for interval+timeout is rightly dropped, so
		// that is not made too short.
		PingInterval: time.Second,
		PingTimeout:  2 * time.Second,
		Logger:       logOnFailure(t),
	})

	start := time.Now()
	var wg sync.WaitGroup
	var sentBytes atomic.Int64
	for n := range numClients {
		wg.Go(func() {
			if err := largeFrameClient(wsURL, n, perClient, largeEvery, maxInFlight, &sentBytes); err != nil {
				t.Errorf("client %d: %v", n, err)
			}
		})
	}
	wg.Wait()
	t.Logf("%d clients sent %d MiB in %d calls in %v; the node read %d frames",
		numClients, sentBytes.Load()>>20, numClients*perClient, time.Since(start).Round(time.Millisecond), node.frames.Load())

	for _, f := range node.Failures() {
		t.Error(f)
	}
	if n := node.conns.Load(); n != 1 {
		t.Errorf("the node saw %d connections, want 1: muxd dropped a node that was reading", n)
	}
	if v := value(srv.Metrics().UpstreamReconnects); v != 0 {
		t.Errorf("muxd reconnected %v times, want 0", v)
	}
}

// largeFrameClient sends perClient eth_calls, every largeEvery-th with 5-9
// MiB of call data, at most maxInFlight at a time, and checks that each is
// answered once with its own params echoed.
func largeFrameClient(url string, n, perClient, largeEvery, maxInFlight int, sentBytes *atomic.Int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(64 << 20)

	var mu sync.Mutex
	pending := map[string][]byte{} // id -> params sent
	slots := make(chan struct{}, maxInFlight)
	readErr := make(chan error, 1)
	go func() {
		for answered := 0; answered < perClient; answered++ {
			_, frame, err := conn.Read(ctx)
			if err != nil {
				readErr <- fmt.Errorf("after %d answers: %w", answered, err)
				return
			}
			// muxd splices the client's id into the node's answer and
			// passes the rest through untouched: the whole answer is
			// known from the id.
			id := answerID(frame)
			mu.Lock()
			params, ok := pending[string(id)]
			delete(pending, string(id))
			mu.Unlock()
			if !ok {
				readErr <- fmt.Errorf("answer for id %s, which is not in flight (unknown or answered twice): %.200s", id, frame)
				return
			}
			if want := echoAnswer(id, params); !bytes.Equal(frame, want) {
				readErr <- fmt.Errorf("id %s: the answer (%d bytes) is not the echo of the params sent (%d bytes): %.200s", id, len(frame), len(want), frame)
				return
			}
			<-slots
		}
		readErr <- nil
	}()

	rng := rand.New(rand.NewPCG(uint64(n), 7))
	for seq := range perClient {
		size := 16 + rng.IntN(2<<10)
		if seq%largeEvery == largeEvery/2 {
			size = 5<<20 + rng.IntN(4<<20)
		}
		id := fmt.Sprintf(`"c%d-%d"`, n, seq)
		params := callParams(n, seq, size)
		frame := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"method":"eth_call","params":%s}`, id, params)
		select {
		case slots <- struct{}{}:
		case err := <-readErr:
			return err
		}
		mu.Lock()
		pending[id] = params
		mu.Unlock()
		if err := conn.Write(ctx, websocket.MessageText, frame); err != nil {
			return fmt.Errorf("write call %d: %w", seq, err)
		}
		sentBytes.Add(int64(len(frame)))
	}
	return <-readErr
}

// answerID returns the id of an answer laid out as echoAnswer lays it out,
// or nil.
func answerID(frame []byte) []byte {
	const prefix = `{"jsonrpc":"2.0","id":"`
	if !bytes.HasPrefix(frame, []byte(prefix)) {
		return nil
	}
	end := bytes.IndexByte(frame[len(prefix):], '"')
	if end < 0 {
		return nil
	}
	return frame[len(prefix)-1 : len(prefix)+end+1]
}

// echoAnswer is the slow echo node's answer to a request with id and params
// (null when it has none, as keepalive's probe).
func echoAnswer(id, params []byte) []byte {
	if params == nil {
		params = []byte("null")
	}
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":{"echo":%s}}`, id, params)
}

// callParams returns eth_call params whose call data is about size hex
// digits: a tag naming client and call at both ends, and between them a
// pattern drawn from a generator seeded by both.
func callParams(client, seq, size int) []byte {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[0:], uint64(client))
	binary.LittleEndian.PutUint64(seed[8:], uint64(seq))
	block := make([]byte, 32<<10)
	rand.NewChaCha8(seed).Read(block)
	hexBlock := hex.AppendEncode(nil, block)
	tag := fmt.Sprintf("%08x%08x", client, seq)

	data := make([]byte, 0, size+64)
	data = append(data, `[{"to":"0x00000000000000000000000000000000000000aa","data":"0x`...)
	data = append(data, tag...)
	for len(data) < size {
		data = append(data, hexBlock[:min(len(hexBlock), size-len(data))]...)
	}
	if len(data)%2 == 1 {
		data = append(data, '0')
	}
	data = append(data, tag...)
	return append(data, `"},"latest"]`...)
}

// slowEchoNode is a node that reads its socket at rate bytes per second and
// answers each request with {"echo": params}. Every frame it gets must be a
// valid JSON-RPC request.
type slowEchoNode struct {
	srv    *httptest.Server
	URL    string
	rate   int
	conns  atomic.Int64
	frames atomic.Int64

	mu       sync.Mutex
	failures []string
}

func newSlowEchoNode(rate int) *slowEchoNode {
	n := &slowEchoNode{rate: rate}
	n.srv = httptest.NewUnstartedServer(http.HandlerFunc(n.serve))
	n.srv.Listener = slowListener{n.srv.Listener, rate}
	n.srv.Start()
	n.URL = "ws" + strings.TrimPrefix(n.srv.URL, "http")
	return n
}

func (n *slowEchoNode) Close() {
	n.srv.CloseClientConnections()
	n.srv.Close()
}

func (n *slowEchoNode) fail(format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.failures) < 20 {
		n.failures = append(n.failures, fmt.Sprintf(format, args...))
	}
}

func (n *slowEchoNode) Failures() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.failures...)
}

func (n *slowEchoNode) serve(w http.ResponseWriter, r *http.Request) {
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return
	}
	defer ws.CloseNow()
	ws.SetReadLimit(64 << 20)
	n.conns.Add(1)
	ctx := r.Context()
	// The socket is read at the listener's pace, whatever the checking
	// and answering cost (much, under -race): a frame read goes to the
	// worker, which checks and answers it.
	frames := make(chan []byte, 16)
	var worker sync.WaitGroup
	defer worker.Wait()
	defer close(frames)
	worker.Go(func() {
		for frame := range frames {
			var m upMsg
			if err := json.Unmarshal(frame, &m); err != nil {
				// geth answers and closes the socket; so does this node.
				n.fail("node received an invalid frame of %d bytes: %v", len(frame), err)
				ws.CloseNow()
				continue
			}
			if m.ID != nil {
				ws.Write(ctx, websocket.MessageText, echoAnswer(m.ID, m.Params)) // an error: the reader sees it too
			}
		}
	})
	for {
		_, frame, err := ws.Read(ctx)
		if err != nil {
			return
		}
		n.frames.Add(1)
		frames <- frame
	}
}

// upMsg is what the slow echo node reads of a request.
type upMsg struct {
	ID     json.RawMessage `json:"id"`
	Params json.RawMessage `json:"params"`
}

// slowListener's connections read at most rate bytes per second.
type slowListener struct {
	net.Listener
	rate int
}

func (l slowListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return slowConn{c, l.rate}, nil
}

type slowConn struct {
	net.Conn
	rate int
}

// Read reads at most 32 KiB, then waits as long as that takes at rate.
func (c slowConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p[:min(len(p), 32<<10)])
	time.Sleep(time.Duration(n) * time.Second / time.Duration(c.rate))
	return n, err
}
