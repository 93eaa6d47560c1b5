package testnode

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestWaitForWakesOnWrite: WaitFor returns when the text is written, at
// that write's (fake) time, whatever was written before it.
func TestWaitForWakesOnWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b LockedBuffer
		go func() {
			time.Sleep(time.Second)
			b.Write([]byte("level=INFO msg=other\n"))
			time.Sleep(time.Second)
			b.Write([]byte("level=INFO msg=\"shutting down\"\n"))
		}()
		start := time.Now()
		b.WaitFor(t, `msg="shutting down"`)
		if d := time.Since(start); d != 2*time.Second {
			t.Errorf("WaitFor returned after %v, want 2s (the second write)", d)
		}
	})
}

// TestHolderTakeN: TakeN returns once n requests are held, all of them in
// arrival order, and forgets them.
func TestHolderTakeN(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := NewHolder("slow")
		go func() {
			for i := range 3 {
				time.Sleep(time.Second)
				h.Handle(nil, Req{Method: "slow", Index: i})
			}
		}()
		start := time.Now()
		got := h.TakeN(t, 2)
		if d := time.Since(start); d != 2*time.Second || len(got) != 2 || got[0].Req.Index != 0 || got[1].Req.Index != 1 {
			t.Fatalf("TakeN(2) = %+v after %v, want requests 0 and 1 after 2s", got, d)
		}
		if got := h.TakeN(t, 1); len(got) != 1 || got[0].Req.Index != 2 {
			t.Fatalf("second TakeN(1) = %+v, want request 2", got)
		}
	})
}
