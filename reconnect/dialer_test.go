package reconnect

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/coder/websocket"
)

func TestWebSocketDialerSendsHeaders(t *testing.T) {
	got := make(chan string, 1)
	url := newServer(t, nil, func(c *websocket.Conn, r *http.Request) {
		got <- r.Header.Get("Authorization")
		c.Close(websocket.StatusNormalClosure, "")
	})
	h := http.Header{"Authorization": {"Bearer s3cret"}}
	dial := WebSocketDialer(url, h, 0)
	h.Set("Authorization", "changed after construction")

	c, err := dial(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if v := recv(t, got); v != "Bearer s3cret" {
		t.Errorf("server saw Authorization %q, want %q", v, "Bearer s3cret")
	}
}

func TestWebSocketDialerReadLimit(t *testing.T) {
	msg := bytes.Repeat([]byte("x"), 1<<20)
	url := newServer(t, nil, func(c *websocket.Conn, _ *http.Request) {
		if err := c.Write(t.Context(), websocket.MessageText, msg); err != nil {
			return
		}
		c.Read(t.Context()) // until the client goes away
	})

	tests := []struct {
		name    string
		limit   int64
		wantErr bool
	}{
		{"2MiB", 2 << 20, false},
		{"default", 0, false},
		{"none", -1, false},
		{"512KiB", 512 << 10, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Cancel the dial ctx before reading: the connection must outlive it,
			// as Supervisor dials with a per-attempt timeout.
			dctx, cancel := context.WithCancel(t.Context())
			c, err := WebSocketDialer(url, nil, tt.limit)(dctx)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseNow()

			_, got, err := c.Read(t.Context())
			if tt.wantErr {
				if err == nil {
					t.Fatalf("read %d bytes with limit %d, want error", len(got), tt.limit)
				}
				if !strings.Contains(err.Error(), "message too big") {
					t.Errorf("read error = %v, want the read limit to be hit", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("read with limit %d: %v", tt.limit, err)
			}
			if len(got) != len(msg) {
				t.Fatalf("read %d bytes, want %d", len(got), len(msg))
			}
		})
	}
}

func TestWebSocketDialerRedactsErrors(t *testing.T) {
	// A loopback port with nothing listening.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	raw := "ws://keyuser:pa55word@" + addr + "/v3/PATHSECRET123?apikey=QUERYSECRET456"
	_, err = WebSocketDialer(raw, nil, 0)(t.Context())
	if err == nil {
		t.Fatal("dial succeeded, want error")
	}
	msg := err.Error()
	t.Log(msg)
	if want := "dial upstream ws://" + addr + "/…: "; !strings.HasPrefix(msg, want) {
		t.Errorf("error %q does not start with %q", msg, want)
	}
	for _, secret := range []string{"keyuser", "pa55word", "PATHSECRET123", "QUERYSECRET456"} {
		if strings.Contains(msg, secret) {
			t.Errorf("error leaks %q: %s", secret, msg)
		}
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("error does not wrap ECONNREFUSED: %v", err)
	}
}

// TestWebSocketDialerRefusesRedirects: a handshake answered with a redirect
// fails with ErrRedirect, the target never hears from muxd (so never sees
// the headers), and the error names the status and the target's scheme and
// host but no secret: not the URL's userinfo, path or query, not a header
// value, not the target's path, query or userinfo.
func TestWebSocketDialerRefusesRedirects(t *testing.T) {
	targetHits := make(chan *http.Request, 16)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		targetHits <- r
		if c, err := websocket.Accept(w, r, nil); err == nil {
			c.CloseNow()
		}
	}))
	t.Cleanup(target.Close)
	_, targetPort, _ := net.SplitHostPort(strings.TrimPrefix(target.URL, "http://"))

	const targetSecrets = "/TARGETPATH77?k=TARGETQUERY88"
	tests := []struct {
		name       string
		status     int
		location   string // %s is the target's port
		wantTarget string // in the error; %s is the target's (or the origin's) port
	}{
		{"another port, same host", http.StatusFound, "http://127.0.0.1:%s" + targetSecrets, "http://127.0.0.1:%s"},
		{"another host name", http.StatusMovedPermanently, "http://localhost:%s" + targetSecrets, "http://localhost:%s"},
		{"another host, userinfo", http.StatusTemporaryRedirect, "http://TARGETUSER99:TARGETPW99@localhost:%s" + targetSecrets, "http://localhost:%s"},
		{"ws scheme", http.StatusPermanentRedirect, "ws://localhost:%s" + targetSecrets, "ws://localhost:%s"},
		{"same origin, other path", http.StatusFound, targetSecrets, "http://127.0.0.1:%s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			originHits := make(chan *http.Request, 16)
			origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				originHits <- r
				if r.URL.Path == "/TARGETPATH77" { // the same-origin redirect, if followed
					if c, err := websocket.Accept(w, r, nil); err == nil {
						c.CloseNow()
					}
					return
				}
				loc := tt.location
				if strings.Contains(loc, "%s") {
					loc = fmt.Sprintf(loc, targetPort)
				}
				http.Redirect(w, r, loc, tt.status)
			}))
			t.Cleanup(origin.Close)
			originAddr := strings.TrimPrefix(origin.URL, "http://")
			_, originPort, _ := net.SplitHostPort(originAddr)
			port := targetPort
			if !strings.Contains(tt.location, "%s") {
				port = originPort
			}

			raw := "ws://keyuser:pa55word@" + originAddr + "/v3/PATHSECRET123?apikey=QUERYSECRET456"
			h := http.Header{"X-Api-Key": {"HEADERSECRET1"}, "Authorization": {"Bearer HEADERSECRET2"}}
			c, err := WebSocketDialer(raw, h, 0)(t.Context())
			if err == nil {
				c.CloseNow()
				t.Error("dial through a redirect succeeded, want ErrRedirect")
			} else {
				checkRedirectError(t, err, []string{"dial upstream ws://" + originAddr + "/…: ", strconv.Itoa(tt.status), fmt.Sprintf(tt.wantTarget, port)})
			}
			if n := len(originHits); n != 1 {
				t.Errorf("origin got %d requests, want 1 (the same-origin redirect not followed)", n)
			}
			select {
			case r := <-targetHits:
				t.Errorf("redirect target got a request (X-Api-Key sent: %t, Authorization sent: %t)", r.Header.Get("X-Api-Key") != "", r.Header.Get("Authorization") != "")
			default:
			}
		})
	}
}

// checkRedirectError checks that err wraps ErrRedirect, contains every
// string in want, and none of the secrets TestWebSocketDialerRefusesRedirects
// hides in the URLs and headers.
func checkRedirectError(t *testing.T, err error, want []string) {
	t.Helper()
	msg := err.Error()
	t.Log(msg)
	if !errors.Is(err, ErrRedirect) {
		t.Errorf("error does not wrap ErrRedirect: %v", err)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not contain %q", msg, w)
		}
	}
	for _, secret := range []string{"keyuser", "pa55word", "PATHSECRET123", "QUERYSECRET456", "HEADERSECRET1", "HEADERSECRET2", "TARGETPATH77", "TARGETQUERY88", "TARGETUSER99", "TARGETPW99"} {
		if strings.Contains(msg, secret) {
			t.Errorf("error leaks %q", secret)
		}
	}
}
