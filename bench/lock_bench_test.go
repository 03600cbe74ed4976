package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/zkrecipes/zkrecipes/zktest"
)

// The benchmarks need a ZooKeeper server: the one ZK_CONNECT names, else
// one zktest starts (Docker, or a local install: apt-get install zookeeper).
// A server zktest starts locally runs a JVM tuned for quick start-up, not
// throughput; set ZK_CONNECT for figures worth keeping. Compare runs with
// benchstat; "benchstat -col .name" puts Mutex, ZkLock and CachedMutex side by side. For
// a ratio measured in alternating rounds, use cmd/lockbench.

func BenchmarkMutex(b *testing.B)       { benchLock(b, Ours) }
func BenchmarkZkLock(b *testing.B)      { benchLock(b, Theirs) }
func BenchmarkCachedMutex(b *testing.B) { benchLock(b, Cached) }

func benchLock(b *testing.B, impl Impl) {
	// ZK_CONNECT if set, else Docker, else a local ZooKeeper install, else skip.
	srv := zktest.Start(b)
	ctx := context.Background()
	bn, err := New(ctx, srv.Addrs())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := bn.Close(); err != nil {
			b.Error(err)
		}
	})
	for _, n := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			r, err := bn.Open(ctx, impl, n)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			res, err := r.Run(ctx, Until{Cycles: int64(b.N)})
			b.StopTimer()
			if cerr := r.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				b.Fatal(err)
			}
			// ns/op is wall time per cycle, all sessions together: 1/throughput.
			b.ReportMetric(res.PerSec(), "cycles/s")
			b.ReportMetric(float64(Percentile(res.Acquire, 50)), "ns/acquire-p50")
			b.ReportMetric(float64(Percentile(res.Acquire, 99)), "ns/acquire-p99")
		})
	}
}
