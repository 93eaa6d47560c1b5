package core

import (
	"testing"
	"time"
)

// BenchmarkOrphanSweepFull is the clock's sweep (Tick, under the server's
// lock every 250 ms at the default request_timeout) over a full orphan
// table of which nothing is due: it was a walk of every entry (2.05 ms per
// sweep on the 2-core dev box), and is a look at the heap's top (10 ns).
func BenchmarkOrphanSweepFull(b *testing.B) {
	var o orphanTable
	for uid := range uint64(maxOrphans) {
		o.add(uid+1, orphan{deadline: t0.Add(time.Hour)})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		o.expire(t0)
	}
}
