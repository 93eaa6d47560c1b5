package testnode

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// LockedBuffer is a bytes.Buffer safe for a logger's goroutines: tests
// hand it to slog or a child process as its output, read it back with
// String and wait for a line with WaitFor. The zero value is ready.
type LockedBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // closed and replaced on every write; nil until waited on
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// WaitFor waits until the buffer holds text, failing the test (with the
// buffer's content) after Timeout. It wakes on every write, never by
// sleeping.
func (b *LockedBuffer) WaitFor(t testing.TB, text string) {
	t.Helper()
	found := false
	defer func() { // also as Await's Fatalf ends the test's goroutine
		if !found {
			t.Logf("the log holds:\n%s", b)
		}
	}()
	Await(t, fmt.Sprintf("the log to hold %q", text), func() (bool, <-chan struct{}) {
		b.mu.Lock()
		defer b.mu.Unlock()
		if strings.Contains(b.b.String(), text) {
			found = true
			return true, nil
		}
		if b.changed == nil {
			b.changed = make(chan struct{})
		}
		return false, b.changed
	})
}
