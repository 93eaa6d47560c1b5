package mux

import "testing"

func TestArenaClass(t *testing.T) {
	tests := []struct{ n, class int }{
		{0, 0}, {1, 0}, {1024, 0}, {1025, 1}, {2048, 1}, {2049, 2},
		{32 << 10, 5}, {32<<10 + 1, 6}, {64 << 10, 6}, {64<<10 + 1, -1}, {1 << 30, -1},
	}
	for _, tt := range tests {
		if got := arenaClass(tt.n); got != tt.class {
			t.Errorf("arenaClass(%d) = %d, want %d", tt.n, got, tt.class)
		}
	}
}

// TestArenaPool: get returns room for n (a class's size, or exactly n past
// the largest class); put keeps a buffer of a class's exact size, up to
// arenaClassBytes per class, and get hands it out again; anything else is
// left to the collector.
func TestArenaPool(t *testing.T) {
	var p arenaPool
	for _, n := range []int{1, 700, 1024, 1500, 40 << 10, 64 << 10, 100 << 10} {
		b := p.get(n)
		want := n
		if c := arenaClass(n); c >= 0 {
			want = 1 << (minArenaShift + c)
		}
		if len(b) != 0 || cap(b) != want {
			t.Errorf("get(%d): len %d cap %d, want 0 and %d", n, len(b), cap(b), want)
		}
	}
	b := p.get(3000)
	b = append(b, "dirty"...)
	p.put(b)
	if again := p.get(2500); cap(again) != cap(b) || &again[:1][0] != &b[0] || len(again) != 0 {
		t.Fatalf("get after put: not the buffer put back, emptied")
	}
	p.put(make([]byte, 0, 3000))    // not a class size (not from get)
	p.put(make([]byte, 0, 128<<10)) // past the largest class
	for c := range p.free {
		if len(p.free[c]) != 0 {
			t.Fatalf("class %d keeps %d buffers that get did not make", c, len(p.free[c]))
		}
	}
	const size = 4 << 10
	for range 2 * arenaClassBytes / size {
		p.put(make([]byte, 0, size))
	}
	if got, max := len(p.free[arenaClass(size)])*size, arenaClassBytes; got != max {
		t.Errorf("class of %d bytes keeps %d free bytes, want the bound %d", size, got, max)
	}
}
