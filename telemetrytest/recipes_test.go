package telemetrytest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

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

	points := collectPoints(t, reader)
	require.Equal(t, map[string]float64{
		"zkrecipes.outcome=acquired,zkrecipes.recipe=mutex":                             2,
		"zkrecipes.outcome=canceled,zkrecipes.recipe=mutex,error.type=context.Canceled": 1,
		"zkrecipes.outcome=acquired,zkrecipes.recipe=semaphore":                         1,
		// The queue's dispatcher, elected among the Queues that take.
		"zkrecipes.outcome=acquired,zkrecipes.recipe=election": 1,
	}, points["zkrecipes.lock.wait.duration"])
	require.Equal(t, map[string]float64{"zkrecipes.recipe=mutex": 2, "zkrecipes.recipe=semaphore": 1, "zkrecipes.recipe=election": 1}, points["zkrecipes.lock.lease.duration"])
	require.Equal(t, map[string]float64{"zkrecipes.reason=deleted,zkrecipes.recipe=mutex": 1,
		"zkrecipes.reason=session,zkrecipes.recipe=election": 1}, // the dispatcher's, as s closes
		points["zkrecipes.lock.lease.lost"])
	require.Equal(t, map[string]float64{"zkrecipes.reason=closed": 1}, points["zkrecipes.session.ended"])
	require.Equal(t, map[string]float64{"": 2}, points["zkrecipes.queue.item.put"])
	require.Equal(t, map[string]float64{"": 1}, points["zkrecipes.queue.job.acked"])
	require.Equal(t, map[string]float64{"": 1}, points["zkrecipes.queue.job.nacked"])
	require.Equal(t, map[string]float64{"": 1}, points["zkrecipes.queue.job.redelivered"])
	require.Equal(t, map[string]float64{"": 1}, points["zkrecipes.queue.item.dead_lettered"])
	require.Equal(t, map[string]float64{"zkrecipes.outcome=acquired": 3}, points["zkrecipes.queue.take.wait.duration"])

	var waited int
	names := map[string]int{}
	for _, sp := range spans.Ended() {
		names[sp.Name()]++
		require.Equal(t, trace.SpanKindInternal, sp.SpanKind(), sp.Name())
		for _, ev := range sp.Events() {
			if ev.Name == "waiting in line" {
				waited++
			}
		}
	}
	require.Equal(t, map[string]int{"zklock.Mutex.Lock": 3, "zklock.Semaphore.Acquire": 1, "fairqueue.Queue.Take": 3, "zklock.Election.Campaign": 1}, names)
	require.Equal(t, 2, waited, "the first and the canceled Lock waited in line")
}

// collectPoints reads the instruments of reader: for each, the count (a
// histogram's) or the value of each attribute set ("k=v,k=v": the
// zkrecipes attributes first, then error.type).
func collectPoints(t *testing.T, reader sdkmetric.Reader) map[string]map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	points := map[string]map[string]float64{}
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
	return points
}

// A failed wait: error.type on the histogram and on its span, whose status
// is Error; a TryLock that finds the lock held is busy, no failure.
func TestTelemetryErrors(t *testing.T) {
	srv := setup(t)
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	s := connect(t, srv.Addrs(),
		zkrecipes.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		zkrecipes.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))))
	other := connect(t, srv.Addrs())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := zktest.Path(t, "/telemetry-errors")

	// A semaphore's contender holds the path: a Mutex cannot use it.
	sem, err := zklock.NewSemaphore(other, p+"/mixed", 1)
	require.NoError(t, err)
	sl, err := sem.Acquire(ctx)
	require.NoError(t, err)
	m, err := zklock.NewMutex(s, p+"/mixed")
	require.NoError(t, err)
	_, err = m.Lock(ctx)
	require.ErrorIs(t, err, zklock.ErrPathInUse)
	require.NoError(t, sl.Unlock(ctx))

	// Held by another: TryLock is busy.
	om, err := zklock.NewMutex(other, p+"/busy")
	require.NoError(t, err)
	held, err := om.Lock(ctx)
	require.NoError(t, err)
	m, err = zklock.NewMutex(s, p+"/busy")
	require.NoError(t, err)
	_, err = m.TryLock(ctx)
	require.ErrorIs(t, err, zklock.ErrLocked)
	require.NoError(t, held.Unlock(ctx))

	// The session ends under a waiting Take.
	q, err := fairqueue.New(s, p+"/queue")
	require.NoError(t, err)
	taken := make(chan error, 1)
	go func() { _, err := q.Take(ctx); taken <- err }()
	require.Eventually(t, func() bool {
		return collectPoints(t, reader)["zkrecipes.queue.take.wait.active"][""] == 1
	}, 10*time.Second, 5*time.Millisecond)
	// Closed once the Take waits on its watches, not mid-request:
	// go-zookeeper v1.0.4 races with itself (under -race) when a
	// connection closes under a request whose reply it is decoding.
	require.Eventually(t, func() bool {
		tickets, _, err := other.Conn().Children(p + "/queue/ready")
		if err != nil || len(tickets) != 1 {
			return false
		}
		watches, err := zktest.FourLetter(srv.Addr(), "wchc")
		return err == nil && strings.Contains(watches, fmt.Sprintf("0x%x", s.ID()))
	}, 10*time.Second, 5*time.Millisecond, "the Take waits, its ticket in line, on a watch")
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, s.Close())
	require.ErrorIs(t, <-taken, zkrecipes.ErrClosed)

	points := collectPoints(t, reader)
	require.Equal(t, map[string]float64{
		"zkrecipes.outcome=error,zkrecipes.recipe=mutex,error.type=zklock.ErrPathInUse": 1,
		"zkrecipes.outcome=busy,zkrecipes.recipe=mutex":                                 1,
		// The queue's dispatcher: the Take's Queue is the only one that takes.
		"zkrecipes.outcome=acquired,zkrecipes.recipe=election": 1,
	}, points["zkrecipes.lock.wait.duration"])
	require.Equal(t, map[string]float64{"zkrecipes.outcome=error,error.type=zkrecipes.ErrClosed": 1}, points["zkrecipes.queue.take.wait.duration"])

	type result struct {
		status          codes.Code
		outcome, errTyp string
	}
	var got []result
	for _, sp := range spans.Ended() {
		require.Equal(t, trace.SpanKindInternal, sp.SpanKind(), sp.Name())
		r := result{status: sp.Status().Code}
		for _, a := range sp.Attributes() {
			switch a.Key {
			case "zkrecipes.outcome":
				r.outcome = a.Value.AsString()
			case "error.type":
				r.errTyp = a.Value.AsString()
			}
		}
		if r.status == codes.Error {
			require.NotEmpty(t, sp.Status().Description, "the Error status says what failed")
		}
		got = append(got, r)
	}
	require.Equal(t, []result{
		{codes.Error, "error", "zklock.ErrPathInUse"},
		{codes.Unset, "busy", ""},
		{codes.Unset, "acquired", ""}, // the dispatcher's election, won while the Take waits
		{codes.Error, "error", "zkrecipes.ErrClosed"},
	}, got)
	noNodesLeft(t, srv.Addrs(), p+"/mixed")
	noNodesLeft(t, srv.Addrs(), p+"/busy")
}

// The gauges follow what the process holds and waits for: leases held,
// waits in progress, jobs in flight, the queue's pending items, and the
// session's state across a disconnect.
func TestTelemetryGauges(t *testing.T) {
	srv := setup(t)
	reader := sdkmetric.NewManualReader()
	s := connect(t, srv.Addrs(), zkrecipes.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		zkrecipes.WithPendingMaxAge(time.Nanosecond))
	other := connect(t, srv.Addrs())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := zktest.Path(t, "/telemetry-gauges")
	gauge := func(name, attrs string) float64 {
		t.Helper()
		v, ok := collectPoints(t, reader)[name][attrs]
		require.True(t, ok, "no point of %s{%s}", name, attrs)
		return v
	}
	const (
		leases   = "zkrecipes.lock.lease.active"
		waits    = "zkrecipes.lock.wait.active"
		takes    = "zkrecipes.queue.take.wait.active"
		inFlight = "zkrecipes.queue.job.active"
		pending  = "zkrecipes.queue.item.pending"
		mutex    = "zkrecipes.recipe=mutex"
	)

	// Leases held, then released.
	m, err := zklock.NewMutex(s, p+"/lock")
	require.NoError(t, err)
	sem, err := zklock.NewSemaphore(s, p+"/sem", 2)
	require.NoError(t, err)
	l, err := m.Lock(ctx)
	require.NoError(t, err)
	require.Equal(t, 1.0, gauge(leases, mutex))
	s1, err := sem.Acquire(ctx)
	require.NoError(t, err)
	s2, err := sem.Acquire(ctx)
	require.NoError(t, err)
	require.Equal(t, 2.0, gauge(leases, "zkrecipes.recipe=semaphore"))
	require.NoError(t, s1.Unlock(ctx))
	require.Equal(t, 1.0, gauge(leases, "zkrecipes.recipe=semaphore"))
	require.NoError(t, s2.Unlock(ctx))
	require.NoError(t, l.Unlock(ctx))
	require.Equal(t, 0.0, gauge(leases, mutex))
	require.Equal(t, 0.0, gauge(leases, "zkrecipes.recipe=semaphore"))

	// A waiter joins behind another session's lease, and leaves holding.
	om, err := zklock.NewMutex(other, p+"/lock")
	require.NoError(t, err)
	theirs, err := om.Lock(ctx)
	require.NoError(t, err)
	got := make(chan *zklock.Lease, 1)
	go func() {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	require.Eventually(t, func() bool { return collectPoints(t, reader)[waits][mutex] == 1 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 0.0, gauge(leases, mutex))
	require.NoError(t, theirs.Unlock(ctx))
	l = <-got
	require.NotNil(t, l)
	require.Equal(t, 0.0, gauge(waits, mutex))
	require.Equal(t, 1.0, gauge(leases, mutex))
	require.NoError(t, l.Unlock(ctx))

	// A queue: a Take waits, an item comes, jobs in flight until settled,
	// items pending until taken.
	q, err := fairqueue.New(s, p+"/queue")
	require.NoError(t, err)
	taken := make(chan *fairqueue.Job, 1)
	go func() {
		j, err := q.Take(ctx)
		if err != nil {
			t.Error(err)
		}
		taken <- j
	}()
	require.Eventually(t, func() bool { return collectPoints(t, reader)[takes][""] == 1 }, 10*time.Second, 5*time.Millisecond)
	_, err = q.Put(ctx, []byte("a"))
	require.NoError(t, err)
	j1 := <-taken
	require.NotNil(t, j1)
	require.Equal(t, 0.0, gauge(takes, ""))
	require.Equal(t, 1.0, gauge(inFlight, ""))
	_, err = q.PutMany(ctx, [][]byte{[]byte("b"), []byte("c")})
	require.NoError(t, err)
	require.Equal(t, 2.0, gauge(pending, ""))
	j2, err := q.TryTake(ctx)
	require.NoError(t, err)
	require.Equal(t, 2.0, gauge(inFlight, ""))
	require.Equal(t, 1.0, gauge(pending, ""))
	require.NoError(t, j1.Ack(ctx))
	require.NoError(t, j2.Nack(ctx))
	require.Equal(t, 0.0, gauge(inFlight, ""))
	require.Equal(t, 2.0, gauge(pending, ""))
	for range 2 {
		j, err := q.TryTake(ctx)
		require.NoError(t, err)
		require.NoError(t, j.Ack(ctx))
	}
	require.Equal(t, 0.0, gauge(pending, ""))
	require.Equal(t, 0.0, gauge(inFlight, ""))

	// A session suspended, connected again, closed.
	sessions := sdkmetric.NewManualReader()
	d := &zktest.Dropper{}
	ds := d.Connect(t, srv.Addrs(), zkrecipes.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sessions))))
	states := func() map[string]float64 { return collectPoints(t, sessions)["zkrecipes.session.count"] }
	const connected, suspended = "zkrecipes.session.state=connected", "zkrecipes.session.state=suspended"
	require.Equal(t, map[string]float64{connected: 1}, states())
	changes := ds.StateChanges()
	d.Pause() // no reconnect until Resume
	defer d.Resume()
	cut(t, d, ds)
	require.Equal(t, zkrecipes.Suspended, nextChange(t, changes).To)
	require.Equal(t, map[string]float64{connected: 0, suspended: 1}, states())
	d.Resume()
	require.Equal(t, zkrecipes.Connected, nextChange(t, changes).To)
	require.Equal(t, map[string]float64{connected: 1, suspended: 0}, states())
	require.NoError(t, ds.Close())
	require.Equal(t, map[string]float64{connected: 0, suspended: 0}, states())
}

// set prints an attribute set as "k=v,k=v": the zkrecipes attributes,
// sorted, then error.type.
func set(s attribute.Set) string {
	var kv []string
	errType := ""
	for _, a := range s.ToSlice() {
		if a.Key == "error.type" {
			errType = ",error.type=" + a.Value.String()
			continue
		}
		kv = append(kv, string(a.Key)+"="+a.Value.String())
	}
	return strings.Join(kv, ",") + errType
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

// setup returns the shared test server and checks, once the test and its
// clean-ups are done, that no goroutine was left behind.
func setup(t *testing.T) *zktest.Server {
	t.Helper()
	srv := zktest.Start(t)
	zktest.CheckGoroutines(t)
	return srv
}

// connect opens a Session that is closed when the test ends.
func connect(t testing.TB, addrs []string, opts ...zkrecipes.Option) *zkrecipes.Session {
	t.Helper()
	return zktest.Connect(t, addrs, opts...)
}

// noNodesLeft fails unless dir has no children (or is gone).
func noNodesLeft(t *testing.T, addrs []string, dir string) {
	t.Helper()
	children, _, err := connect(t, addrs).Conn().Children(dir)
	if err == nil {
		require.Empty(t, children, "nodes left behind in %s", dir)
	}
}

// nextChange returns the next change on ch.
func nextChange(t *testing.T, ch <-chan zkrecipes.StateChange) zkrecipes.StateChange {
	t.Helper()
	select {
	case c, ok := <-ch:
		require.True(t, ok, "the channel was closed")
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("no state change")
	}
	return zkrecipes.StateChange{}
}

// cut drops s's connection (through d) at a request of its own.
func cut(t *testing.T, d *zktest.Dropper, s *zkrecipes.Session) {
	t.Helper()
	const p = "/zkrecipes-telemetry-test-cut"
	d.Arm(zktest.Match{Op: zktest.OpExists, Path: p}, zktest.AfterWrite)
	_, _, err := s.Conn().Exists(p)
	require.ErrorIs(t, err, zk.ErrConnectionClosed)
}
