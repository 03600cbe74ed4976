package zkrecipes_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// The instruments and spans every recipe records, read back with the
// OpenTelemetry SDK's manual reader and span recorder.
func TestTelemetry(t *testing.T) {
	srv := setup(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	s := connect(t, srv.Addrs(), zkrecipes.WithMeterProvider(mp), zkrecipes.WithTracerProvider(tp))
	other := connect(t, srv.Addrs())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := zktest.Path(t, "/telemetry")

	// A mutex: one acquired after waiting, one canceled, one lost.
	m, err := zklock.NewMutex(s, p+"/lock")
	require.NoError(t, err)
	om, _ := zklock.NewMutex(other, p+"/lock")
	held, err := om.Lock(ctx)
	require.NoError(t, err)
	got := make(chan *zklock.Lease, 1)
	go func() {
		l, err := m.Lock(ctx)
		require.NoError(t, err)
		got <- l
	}()
	require.Eventually(t, func() bool { cs, _ := om.Contenders(ctx); return len(cs) == 2 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, held.Unlock(ctx))
	l := <-got
	require.NoError(t, l.Unlock(ctx))
	cctx, ccancel := context.WithCancel(ctx)
	held, err = om.Lock(ctx)
	require.NoError(t, err)
	go func() { time.Sleep(50 * time.Millisecond); ccancel() }()
	_, err = m.Lock(cctx)
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, held.Unlock(ctx))
	l, err = m.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, other.Conn().Delete(l.Path(), -1)) // deleted by another client: lost
	<-l.Done()

	// A semaphore and a queue.
	sem, _ := zklock.NewSemaphore(s, p+"/sem", 2)
	sl, err := sem.Acquire(ctx)
	require.NoError(t, err)
	require.NoError(t, sl.Unlock(ctx))
	q, _ := fairqueue.New(s, p+"/queue", fairqueue.WithMaxAttempts(2))
	_, err = q.PutMany(ctx, [][]byte{[]byte("a"), []byte("b")})
	require.NoError(t, err)
	j, err := q.Take(ctx)
	require.NoError(t, err)
	require.NoError(t, j.Nack(ctx))
	j, err = q.Take(ctx) // the same item again: a redelivery
	require.NoError(t, err)
	require.NoError(t, j.Nack(ctx)) // its second delivery: to the dead letters
	j, err = q.Take(ctx)
	require.NoError(t, err)
	require.NoError(t, j.Ack(ctx))
	dead, err := q.DeadLetters(ctx)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	tidy, _ := fairqueue.New(other, p+"/queue")
	_, err = tidy.Requeue(ctx, dead[0].ID)
	require.NoError(t, err)
	j, err = tidy.Take(ctx)
	require.NoError(t, err)
	require.NoError(t, j.Ack(ctx))
	require.NoError(t, s.Close())

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	points := map[string]map[string]float64{} // instrument -> attributes -> count or sum of counts
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			points[mt.Name] = map[string]float64{}
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					points[mt.Name][set(dp.Attributes)] += float64(dp.Value)
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					points[mt.Name][set(dp.Attributes)] += float64(dp.Count)
				}
			}
		}
	}
	require.Equal(t, map[string]float64{"outcome=acquired,recipe=mutex": 2, "outcome=canceled,recipe=mutex": 1, "outcome=acquired,recipe=semaphore": 1},
		points["zkrecipes.lock.wait.duration"])
	require.Equal(t, map[string]float64{"recipe=mutex": 2, "recipe=semaphore": 1}, points["zkrecipes.lock.hold.duration"])
	require.Equal(t, map[string]float64{"reason=deleted,recipe=mutex": 1}, points["zkrecipes.lock.losses"])
	require.Equal(t, map[string]float64{"reason=closed": 1}, points["zkrecipes.session.ends"])
	require.Equal(t, map[string]float64{"": 2}, points["zkrecipes.queue.puts"])
	require.Equal(t, map[string]float64{"": 1}, points["zkrecipes.queue.acks"])
	require.Equal(t, map[string]float64{"": 1}, points["zkrecipes.queue.nacks"])
	require.Equal(t, map[string]float64{"": 1}, points["zkrecipes.queue.redeliveries"])
	require.Equal(t, map[string]float64{"": 1}, points["zkrecipes.queue.dead_letters"])
	require.Equal(t, map[string]float64{"outcome=acquired": 3}, points["zkrecipes.queue.take.wait.duration"])

	var waited int
	names := map[string]int{}
	for _, sp := range spans.Ended() {
		names[sp.Name()]++
		for _, ev := range sp.Events() {
			if ev.Name == "waiting in line" {
				waited++
			}
		}
	}
	require.Equal(t, map[string]int{"zklock.Mutex.Lock": 3, "zklock.Semaphore.Acquire": 1, "fairqueue.Queue.Take": 3}, names)
	require.Equal(t, 2, waited, "the first and the canceled Lock waited in line")
}

// set prints an attribute set as "k=v,k=v", sorted.
func set(s attribute.Set) string {
	out := ""
	for i, kv := range s.ToSlice() {
		if i > 0 {
			out += ","
		}
		out += string(kv.Key) + "=" + kv.Value.String()
	}
	return out
}

// What recording costs on a lock's path: one session's Lock/Unlock cycles
// with the default (no-op) providers, and with the SDK's meter and tracer
// providers recording everything. Compare the two with benchstat:
//
//	go test -run '^$' -bench MutexTelemetry -count 10 . | benchstat -col /provider -
func BenchmarkMutexTelemetry(b *testing.B) {
	srv := zktest.Start(b)
	for _, provider := range []string{"noop", "sdk"} {
		b.Run("provider="+provider, func(b *testing.B) {
			var opts []zkrecipes.Option
			if provider == "sdk" {
				reader := sdkmetric.NewManualReader()
				opts = append(opts,
					zkrecipes.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
					zkrecipes.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))))
			}
			s := zktest.Connect(b, srv.Addrs(), opts...)
			m, err := zklock.NewMutex(s, zktest.Path(b, "/telemetry-bench"))
			require.NoError(b, err)
			ctx := context.Background()
			for b.Loop() {
				l, err := m.Lock(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
