package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/crypto/sha3"

	"github.com/muxd/muxd/reconnect"
)

// The probe builds a correlation table for an endpoint: measured evidence of
// whether it honours the JSON-RPC id contract. It sends one batch of common
// methods and the same methods as concurrent singles, and checks every
// response's id against its request's. web3_sha3 calls with distinct inputs
// are canaries: their results can be checked locally, so a response whose id
// matches but whose result belongs to another request is caught too.

// probeCall is one request the probe makes.
type probeCall struct {
	Method string
	Params []any
	canary string // for web3_sha3: the expected result
}

func probeCalls() []probeCall {
	calls := []probeCall{
		{Method: "eth_blockNumber", Params: []any{}},
		{Method: "eth_chainId", Params: []any{}},
		{Method: "net_version", Params: []any{}},
		{Method: "web3_clientVersion", Params: []any{}},
		{Method: "eth_gasPrice", Params: []any{}},
	}
	for i := 0; i < 3; i++ {
		data := fmt.Sprintf("0x%x", []byte("muxd probe "+strconv.Itoa(i)))
		h := sha3.NewLegacyKeccak256()
		raw, _ := hex.DecodeString(data[2:])
		h.Write(raw)
		calls = append(calls, probeCall{Method: "web3_sha3", Params: []any{data}, canary: "0x" + hex.EncodeToString(h.Sum(nil))})
	}
	return calls
}

// ProbeRow is one line of the correlation table.
type ProbeRow struct {
	Mode       string  `json:"mode"` // "batch" or "single"
	RequestID  int     `json:"request_id"`
	Method     string  `json:"method"`
	ResponseID string  `json:"response_id"` // raw, "" when no response came
	Matched    bool    `json:"matched"`
	LatencyMS  float64 `json:"latency_ms"`
	Error      string  `json:"error,omitempty"`
}

// ProbeReport is everything one probe round found.
type ProbeReport struct {
	Endpoint      string     `json:"endpoint"`
	Rows          []ProbeRow `json:"rows"`
	BatchAnswered bool       `json:"batch_answered"` // an array came back for the batch
	BatchInOrder  bool       `json:"batch_in_order"`
	Unmatched     int        `json:"unmatched"`
	UnknownIDs    []string   `json:"unknown_ids"`
}

type rpcResponse struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// exchange sends one JSON-RPC body and returns the raw answer.
type exchanger interface {
	exchange(ctx context.Context, body []byte) ([]byte, error)
	close()
}

func runProbe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("muxd probe", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	count := fs.Int("count", 1, "rounds to run")
	timeout := fs.Duration("timeout", 10*time.Second, "deadline for each round")
	// Allow the URL before or after the flags.
	var target string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		target, args = args[0], args[1:]
	}
	usageError := func(msg string) int {
		fmt.Fprintln(stderr, "muxd probe:", msg)
		fmt.Fprintln(stderr, "usage: muxd probe [--json] [--count N] [--timeout D] URL (http, https, ws, wss); run 'muxd help probe'")
		return 2
	}
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			helpProbe(stdout)
			return 0
		}
		return usageError(err.Error())
	}
	switch {
	case target == "" && fs.NArg() == 1:
		target = fs.Arg(0)
	case target == "" && fs.NArg() == 0:
		return usageError("no URL given")
	case fs.NArg() > 0:
		return usageError(fmt.Sprintf("one URL only; %d more argument(s) given (not shown)", fs.NArg()))
	}
	if *count < 1 {
		return usageError("--count must be at least 1")
	}
	if p := probeURLProblem(target); p != "" {
		return usageError(p)
	}
	ok := true
	var reports []ProbeReport
	for i := 0; i < *count; i++ {
		rctx, cancel := context.WithTimeout(ctx, *timeout)
		rep, err := probe(rctx, target)
		cancel()
		if err != nil {
			fmt.Fprintln(stderr, "muxd probe:", err)
			return 1
		}
		if rep.Unmatched > 0 || len(rep.UnknownIDs) > 0 {
			ok = false
		}
		reports = append(reports, rep)
		if !*asJSON {
			printReport(stdout, rep)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if *count == 1 {
			enc.Encode(reports[0])
		} else {
			enc.Encode(reports)
		}
	}
	if !ok {
		return 1
	}
	return 0
}

func dialProbe(ctx context.Context, target string) (exchanger, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, errors.New(probeURLProblem(target))
	}
	switch u.Scheme {
	case "http", "https":
		return &httpExchanger{url: target}, nil
	case "ws", "wss":
		c, _, err := websocket.Dial(ctx, target, nil)
		if err != nil {
			return nil, fmt.Errorf("cannot reach %s: %s (is muxd or the node running there?)", reconnect.Redact(target), reconnect.Scrubber(target).Replace(err.Error()))
		}
		c.SetReadLimit(64 << 20)
		w := &wsExchanger{conn: c, waiting: map[string]chan []byte{}}
		go w.readLoop()
		return w, nil
	}
	// The scheme is not shown: "user:password@host" parses as one.
	return nil, errors.New(probeURLProblem(target))
}

// probeURLProblem says what is wrong with a URL to probe, "" when nothing
// is, showing it only in redacted form.
func probeURLProblem(target string) string {
	u, err := url.Parse(target)
	if err == nil && u.Host != "" {
		switch u.Scheme {
		case "http", "https", "ws", "wss":
			return ""
		}
	}
	if guess := withWSScheme(target); guess != "" && !strings.Contains(target, "://") {
		host := strings.TrimPrefix(guess, "ws://")
		return fmt.Sprintf("the URL has no scheme: did you mean ws://%s or http://%s?", host, host)
	}
	if err != nil {
		return "bad URL: " + urlProblem(target) + " (the URL is not shown: it may hold credentials)"
	}
	if u.Host == "" && (u.Scheme == "http" || u.Scheme == "https" || u.Scheme == "ws" || u.Scheme == "wss") {
		return "bad URL: it has no host (the URL is not shown: it may hold credentials)"
	}
	// The scheme is not shown: "user:password@host" parses as one.
	return "the URL's scheme must be http, https, ws or wss (not shown)"
}

// probe runs one round against target.
func probe(ctx context.Context, target string) (ProbeReport, error) {
	ex, err := dialProbe(ctx, target)
	if err != nil {
		return ProbeReport{}, err
	}
	defer ex.close()
	calls := probeCalls()
	rep := ProbeReport{Endpoint: reconnect.Redact(target), UnknownIDs: []string{}}

	// The batch: ids 1..n.
	var batch []map[string]any
	for i, c := range calls {
		batch = append(batch, map[string]any{"jsonrpc": "2.0", "id": i + 1, "method": c.Method, "params": c.Params})
	}
	body, _ := json.Marshal(batch)
	start := time.Now()
	raw, err := ex.exchange(ctx, body)
	lat := msSince(start)
	var resps []rpcResponse
	if err == nil {
		err = json.Unmarshal(raw, &resps)
		if err != nil {
			err = fmt.Errorf("batch answer is not an array: %w", err)
		}
	}
	byID := map[string]rpcResponse{}
	order := []string{}
	for _, r := range resps {
		id := string(r.ID)
		if _, dup := byID[id]; dup {
			rep.UnknownIDs = append(rep.UnknownIDs, id+" (duplicate)")
		}
		byID[id] = r
		order = append(order, id)
	}
	if errors.Is(err, errUnreachable) {
		return ProbeReport{}, err
	}
	rep.BatchAnswered = err == nil
	rep.BatchInOrder = err == nil && len(order) == len(calls)
	for i, c := range calls {
		want := strconv.Itoa(i + 1)
		row := ProbeRow{Mode: "batch", RequestID: i + 1, Method: c.Method, LatencyMS: lat}
		if err != nil {
			row.Error = err.Error()
		} else if r, ok := byID[want]; ok {
			row.ResponseID, row.Matched = want, true
			row.Error = checkResult(c, r)
			if row.Error != "" && c.canary != "" {
				row.Matched = false
			}
			delete(byID, want)
		} else {
			row.Error = "no response with this id"
		}
		if rep.BatchInOrder && (i >= len(order) || order[i] != want) {
			rep.BatchInOrder = false
		}
		rep.Rows = append(rep.Rows, row)
	}
	for id := range byID {
		rep.UnknownIDs = append(rep.UnknownIDs, id)
	}

	// The singles: ids 101.., all at once.
	singles := make([]ProbeRow, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := 101 + i
			body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": c.Method, "params": c.Params})
			row := ProbeRow{Mode: "single", RequestID: id, Method: c.Method}
			start := time.Now()
			raw, err := ex.exchange(ctx, body)
			row.LatencyMS = msSince(start)
			var r rpcResponse
			if err == nil {
				err = json.Unmarshal(raw, &r)
			}
			if err != nil {
				row.Error = err.Error()
			} else {
				row.ResponseID = string(r.ID)
				row.Matched = row.ResponseID == strconv.Itoa(id)
				row.Error = checkResult(c, r)
				if row.Error != "" && c.canary != "" {
					row.Matched = false
				}
			}
			singles[i] = row
		}()
	}
	wg.Wait()
	rep.Rows = append(rep.Rows, singles...)
	if w, ok := ex.(*wsExchanger); ok {
		rep.UnknownIDs = append(rep.UnknownIDs, w.unknownIDs()...)
	}
	for _, r := range rep.Rows {
		if !r.Matched {
			rep.Unmatched++
		}
	}
	return rep, nil
}

// checkResult reports an error answer, or a canary whose result belongs to
// another request.
func checkResult(c probeCall, r rpcResponse) string {
	if r.Error != nil {
		return fmt.Sprintf("%d %s", r.Error.Code, r.Error.Message)
	}
	if c.canary != "" {
		var got string
		if json.Unmarshal(r.Result, &got) != nil || got != c.canary {
			return "result belongs to another request"
		}
	}
	return ""
}

func msSince(t time.Time) float64 {
	return float64(time.Since(t).Microseconds()) / 1000
}

func printReport(w io.Writer, rep ProbeReport) {
	fmt.Fprintf(w, "endpoint %s\n", rep.Endpoint)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODE\tREQ ID\tMETHOD\tRESP ID\tMATCHED\tLATENCY MS\tERROR")
	for _, r := range rep.Rows {
		resp := r.ResponseID
		if resp == "" {
			resp = "-"
		}
		m := "no"
		if r.Matched {
			m = "yes"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%.2f\t%s\n", r.Mode, r.RequestID, r.Method, resp, m, r.LatencyMS, r.Error)
	}
	tw.Flush()
	order := "no (reordered; allowed by JSON-RPC, match by id)"
	switch {
	case !rep.BatchAnswered:
		order = "unknown (no answer to the batch)"
	case rep.BatchInOrder:
		order = "yes"
	}
	fmt.Fprintf(w, "batch returned in request order: %s\n", order)
	fmt.Fprintf(w, "rows not matched: %d of %d\n", rep.Unmatched, len(rep.Rows))
	if len(rep.UnknownIDs) == 0 {
		fmt.Fprintln(w, "responses with unknown ids: none")
	} else {
		fmt.Fprintf(w, "responses with unknown ids: %s\n", strings.Join(rep.UnknownIDs, ", "))
	}
}

// errUnreachable is an HTTP endpoint that could not be reached at all: the
// probe reports it once instead of a table of failed rows.
var errUnreachable = errors.New("cannot reach")

type httpExchanger struct{ url string }

func (h *httpExchanger) exchange(ctx context.Context, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("probe: %s", reconnect.Scrubber(h.url).Replace(err.Error()))
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) && ctx.Err() == nil {
			// Refused, no route, DNS, TLS: nothing answered at all.
			return nil, fmt.Errorf("%w %s: %s (is muxd or the node running there?)", errUnreachable,
				reconnect.Redact(h.url), reconnect.Scrubber(h.url).Replace(ue.Err.Error()))
		}
		return nil, fmt.Errorf("post: %s", reconnect.Scrubber(h.url).Replace(err.Error()))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return b, nil
}

func (h *httpExchanger) close() {}

// wsExchanger pairs answers with requests on one WebSocket by the first id
// of the request (a batch's first element). Answers with other ids are
// recorded as unknown.
type wsExchanger struct {
	conn    *websocket.Conn
	mu      sync.Mutex
	waiting map[string]chan []byte
	unknown []string
	readErr error
}

func (w *wsExchanger) exchange(ctx context.Context, body []byte) ([]byte, error) {
	key := firstID(body)
	ch := make(chan []byte, 1)
	w.mu.Lock()
	if w.readErr != nil {
		w.mu.Unlock()
		return nil, w.readErr
	}
	w.waiting[key] = ch
	w.mu.Unlock()
	if err := w.conn.Write(ctx, websocket.MessageText, body); err != nil {
		return nil, fmt.Errorf("write: %w", err)
	}
	select {
	case b, ok := <-ch:
		if !ok {
			return nil, errors.New("connection closed before the answer")
		}
		return b, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("no answer: %w", ctx.Err())
	}
}

func (w *wsExchanger) readLoop() {
	for {
		_, b, err := w.conn.Read(context.Background())
		w.mu.Lock()
		if err != nil {
			w.readErr = fmt.Errorf("read: %w", err)
			for k, ch := range w.waiting {
				close(ch)
				delete(w.waiting, k)
			}
			w.mu.Unlock()
			return
		}
		key := firstID(b)
		if strings.HasPrefix(strings.TrimSpace(string(b)), "[") {
			// A batch answer may be in any order: it belongs to the one
			// batch exchange, whose key is "1".
			key = "1"
		}
		if ch, ok := w.waiting[key]; ok {
			ch <- b
			delete(w.waiting, key)
		} else if ch, ok := w.waiting[""]; ok && key == "" {
			ch <- b
			delete(w.waiting, "")
		} else {
			w.unknown = append(w.unknown, key)
			// An answer under a wrong id still answers someone: hand it
			// to the oldest single waiting, so its row shows the id it got.
			for k, ch := range w.waiting {
				if k != "1" {
					ch <- b
					delete(w.waiting, k)
					break
				}
			}
		}
		w.mu.Unlock()
	}
}

func (w *wsExchanger) unknownIDs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.unknown...)
}

func (w *wsExchanger) close() { w.conn.Close(websocket.StatusNormalClosure, "") }

// firstID returns the raw id of a message, or of a batch's first element.
func firstID(b []byte) string {
	var one struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(b, &one) == nil {
		return string(one.ID)
	}
	var many []struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(b, &many) == nil && len(many) > 0 {
		return string(many[0].ID)
	}
	return ""
}
