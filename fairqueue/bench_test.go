package fairqueue_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zkrecipes/zkrecipes/fairqueue"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// BenchmarkPutTakeAck4x4 measures put+take+ack cycles with 4 producers and
// 4 consumers, each on its own session.
func BenchmarkPutTakeAck4x4(b *testing.B) {
	srv := zktest.Start(b)
	p := "/fairqueue-bench/" + time.Now().Format("150405.000000")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const producers, consumers = 4, 4
	var puts, acks atomic.Int64
	total := int64(b.N)
	var qs []*fairqueue.Queue
	for range producers + consumers {
		q, err := fairqueue.New(connect(b, srv.Addrs()), p)
		if err != nil {
			b.Fatal(err)
		}
		qs = append(qs, q)
	}
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for _, q := range qs[:producers] {
		wg.Go(func() {
			for puts.Add(1) <= total {
				if _, err := q.Put(ctx, []byte("payload")); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	for _, q := range qs[producers:] {
		wg.Go(func() {
			for acks.Load() < total {
				tctx, tcancel := context.WithTimeout(ctx, 500*time.Millisecond)
				j, err := q.Take(tctx)
				tcancel()
				if err != nil {
					if ctx.Err() != nil {
						b.Error(err)
						return
					}
					continue // timed out while the others finish
				}
				if err := j.Ack(ctx); err != nil {
					b.Error(err)
					return
				}
				acks.Add(1)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(total)/time.Since(start).Seconds(), "cycles/s")
}
