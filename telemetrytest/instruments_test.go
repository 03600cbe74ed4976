package telemetrytest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/zkrecipes/zkrecipes/internal/telemetry"
)

// instrument is what a collection says of one instrument.
type instrument struct {
	kind, unit string
	attrs      []string // the attribute sets of its points, "k=v,k=v", sorted
}

// collect reads every instrument of the reader.
func collect(t *testing.T, r sdkmetric.Reader) (map[string]instrument, metricdata.ScopeMetrics) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if len(rm.ScopeMetrics) != 1 {
		t.Fatalf("%d scopes, want 1", len(rm.ScopeMetrics))
	}
	out := map[string]instrument{}
	sm := rm.ScopeMetrics[0]
	for _, m := range sm.Metrics {
		in := instrument{unit: m.Unit}
		add := func(s attribute.Set) { in.attrs = append(in.attrs, setString(s)) }
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			in.kind = "UpDownCounter"
			if d.IsMonotonic {
				in.kind = "Counter"
			}
			for _, p := range d.DataPoints {
				add(p.Attributes)
			}
		case metricdata.Histogram[float64]:
			in.kind = "Histogram"
			for _, p := range d.DataPoints {
				add(p.Attributes)
			}
		default:
			in.kind = fmt.Sprintf("%T", d)
		}
		if m.Description == "" {
			t.Errorf("%s has no description", m.Name)
		}
		slices.Sort(in.attrs)
		out[m.Name] = in
	}
	return out, sm
}

func setString(s attribute.Set) string {
	var kv []string
	for _, a := range s.ToSlice() {
		kv = append(kv, string(a.Key)+"="+a.Value.String())
	}
	return strings.Join(kv, ",")
}

// Every instrument, with its name, kind, unit and attribute sets, as the
// docs/telemetry.md's table gives them; the scope's name.
func TestInstruments(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	tel := telemetry.New(telemetry.Config{Meters: mp, Tracers: tp})
	ctx := context.Background()

	tel.SessionState("connected")
	tel.SessionState("suspended")
	tel.Reconnected()
	_, w := tel.StartWait(ctx, "zklock.telemetry.Mutex.Lock", telemetry.Mutex)
	w.End(ctx, nil)
	_, w = tel.StartWait(ctx, "zklock.telemetry.Mutex.Lock", telemetry.Mutex)
	w.End(ctx, telemetry.Busy(errors.New("locked")))
	_, w = tel.StartWait(ctx, "zklock.Semaphore.Acquire", telemetry.Semaphore)
	w.End(ctx, fmt.Errorf("zklock: acquire: %w", zk.ErrNoAuth))
	cctx, cancel := context.WithCancel(ctx)
	wctx, w := tel.StartWait(cctx, "fairqueue.Queue.Take", "")
	cancel()
	w.End(wctx, context.Canceled)
	tel.StartHold(telemetry.Election).End("")
	tel.StartHold(telemetry.Mutex).End("deleted")
	tel.StartHold(telemetry.Mutex) // held
	tel.StartJob().End("")
	tel.StartJob() // in flight
	tel.Put(3)
	tel.Acked()
	tel.Nacked()
	tel.Redelivered()
	tel.Buried()
	tel.ObservePending("/q", func() bool { return true }, func(context.Context) (int, error) { return 7, nil })

	got, sm := collect(t, reader)
	want := map[string]instrument{
		"zkrecipes.session.count":    {"UpDownCounter", "{session}", []string{"zkrecipes.session.state=connected", "zkrecipes.session.state=suspended"}},
		"zkrecipes.session.replaced": {"Counter", "{session}", []string{""}},
		"zkrecipes.lock.wait.duration": {"Histogram", "s", []string{
			"error.type=zk.ErrNoAuth,zkrecipes.outcome=error,zkrecipes.recipe=semaphore",
			"zkrecipes.outcome=acquired,zkrecipes.recipe=mutex",
			"zkrecipes.outcome=busy,zkrecipes.recipe=mutex",
		}},
		"zkrecipes.lock.wait.active":         {"UpDownCounter", "{wait}", []string{"zkrecipes.recipe=mutex", "zkrecipes.recipe=semaphore"}},
		"zkrecipes.lock.lease.duration":      {"Histogram", "s", []string{"zkrecipes.recipe=election", "zkrecipes.recipe=mutex"}},
		"zkrecipes.lock.lease.active":        {"UpDownCounter", "{lease}", []string{"zkrecipes.recipe=election", "zkrecipes.recipe=mutex"}},
		"zkrecipes.lock.lease.lost":          {"Counter", "{lease}", []string{"zkrecipes.reason=deleted,zkrecipes.recipe=mutex"}},
		"zkrecipes.queue.item.put":           {"Counter", "{item}", []string{""}},
		"zkrecipes.queue.job.acked":          {"Counter", "{job}", []string{""}},
		"zkrecipes.queue.job.nacked":         {"Counter", "{job}", []string{""}},
		"zkrecipes.queue.job.redelivered":    {"Counter", "{job}", []string{""}},
		"zkrecipes.queue.item.dead_lettered": {"Counter", "{item}", []string{""}},
		"zkrecipes.queue.take.wait.duration": {"Histogram", "s", []string{"error.type=context.Canceled,zkrecipes.outcome=canceled"}},
		"zkrecipes.queue.take.wait.active":   {"UpDownCounter", "{wait}", []string{""}},
		"zkrecipes.queue.job.active":         {"UpDownCounter", "{job}", []string{""}},
		"zkrecipes.queue.item.pending":       {"UpDownCounter", "{item}", []string{""}},
	}
	for name, w := range want {
		if g, ok := got[name]; !ok {
			t.Errorf("%s: not collected", name)
		} else if fmt.Sprint(g) != fmt.Sprint(w) {
			t.Errorf("%s:\n got %v\nwant %v", name, g, w)
		}
	}
	tel.SessionEnded("closed") // counted after the first collection: the state's count goes back to none
	got, _ = collect(t, reader)
	if g := got["zkrecipes.session.ended"]; fmt.Sprint(g) != fmt.Sprint(instrument{"Counter", "{session}", []string{"zkrecipes.reason=closed"}}) {
		t.Errorf("zkrecipes.session.ended: %v", g)
	}
	for name := range got {
		if _, ok := want[name]; !ok && name != "zkrecipes.session.ended" {
			t.Errorf("%s: not in the table", name)
		}
	}

	if sm.Scope.Name != "github.com/zkrecipes/zkrecipes" {
		t.Errorf("scope name %q", sm.Scope.Name)
	}
	// Its version: internal/telemetry's TestScope (a test binary records
	// no dependencies' versions).
}

// The gauges come back to zero with the attributes they went up with.
func TestGaugesBalance(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	tel := telemetry.New(telemetry.Config{Meters: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), Tracers: noop.NewTracerProvider()})
	ctx := context.Background()
	tel.SessionState("connected")
	tel.SessionState("suspended")
	tel.SessionState("connected")
	_, w := tel.StartWait(ctx, "x", telemetry.RWRead)
	w.End(ctx, errors.New("boom"))
	tel.StartHold(telemetry.RWWrite).End("session")
	tel.StartJob().End("")
	_, w = tel.StartWait(ctx, "y", "")
	w.End(ctx, nil)
	tel.SessionEnded("expired")
	tel.SessionState("connected") // after the end: not counted

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range rm.ScopeMetrics[0].Metrics {
		s, ok := m.Data.(metricdata.Sum[int64])
		if !ok || s.IsMonotonic {
			continue
		}
		for _, p := range s.DataPoints {
			n++
			if p.Value != 0 {
				t.Errorf("%s{%s} = %d, want 0", m.Name, setString(p.Attributes), p.Value)
			}
		}
	}
	if n != 6 { // connected, suspended, rwmutex.read wait, rwmutex.write lease, job, take wait
		t.Errorf("%d points of UpDownCounters, want 6", n)
	}
}

// A failed wait's span: INTERNAL, status Error with the error's text,
// error.type; a wait that acquired: status unset, no error.type; a busy
// one is no failure.
func TestWaitSpans(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tel := telemetry.New(telemetry.Config{Meters: sdkmetric.NewMeterProvider(), Tracers: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))})
	ctx := context.Background()
	for _, err := range []error{nil, telemetry.Busy(errors.New("locked")), fmt.Errorf("lock: %w", zk.ErrNoAuth)} {
		_, w := tel.StartWait(ctx, "zklock.telemetry.Mutex.Lock", telemetry.Mutex)
		w.End(ctx, err)
	}
	ended := spans.Ended()
	if len(ended) != 3 {
		t.Fatalf("%d spans", len(ended))
	}
	for i, want := range []struct {
		status  codes.Code
		desc    string
		outcome string
		errType string
	}{
		{codes.Unset, "", "acquired", ""},
		{codes.Unset, "", "busy", ""},
		{codes.Error, "lock: zk: not authenticated", "error", "zk.ErrNoAuth"},
	} {
		sp := ended[i]
		if sp.SpanKind() != trace.SpanKindInternal {
			t.Errorf("span %d: kind %v, want internal", i, sp.SpanKind())
		}
		if sp.Status().Code != want.status || sp.Status().Description != want.desc {
			t.Errorf("span %d: status %v, want %v %q", i, sp.Status(), want.status, want.desc)
		}
		attrs := map[attribute.Key]string{}
		for _, a := range sp.Attributes() {
			attrs[a.Key] = a.Value.String()
		}
		if attrs["zkrecipes.outcome"] != want.outcome || attrs["error.type"] != want.errType || attrs["zkrecipes.recipe"] != telemetry.Mutex {
			t.Errorf("span %d: attributes %v", i, attrs)
		}
		if len(sp.Events()) != 0 {
			t.Errorf("span %d: events %v; the error is not recorded as an event", i, sp.Events())
		}
	}
}

// The pending count is read at most once per PendingMaxAge, however often
// collections come; a read that takes too long leaves the collection with
// the count read before, and does not hold it up.
func TestPendingBounded(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tel := telemetry.New(telemetry.Config{Meters: mp, Tracers: noop.NewTracerProvider(), PendingMaxAge: time.Hour})
	var reads atomic.Int32
	tel.ObservePending("/q", func() bool { return true }, func(context.Context) (int, error) { return int(reads.Add(1)) * 10, nil })
	tel.ObservePending("/q", func() bool { return true }, func(context.Context) (int, error) { t.Error("a second Queue of one path read"); return 0, nil })
	for range 3 {
		if got := pendingValue(t, reader); got != 10 {
			t.Errorf("pending %d, want 10 (read once)", got)
		}
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("%d reads in 3 collections within PendingMaxAge, want 1", n)
	}

	// Stuck reads: the collection returns with the count read before.
	stuck := telemetry.New(telemetry.Config{Meters: mp, Tracers: noop.NewTracerProvider(), PendingMaxAge: time.Nanosecond})
	first := true
	stuck.ObservePending("/r", func() bool { return true }, func(ctx context.Context) (int, error) {
		if first {
			first = false
			return 5, nil
		}
		<-ctx.Done()
		return 0, ctx.Err()
	})
	if got := pendingValue(t, reader); got != 10+5 {
		t.Errorf("pending %d, want 15", got)
	}
	if got := pendingValue(t, reader); got != 10+5 {
		t.Errorf("pending %d with a stuck read, want the last count, 15", got)
	}

	// A session's end stops its reads; a dropped Queue is read no more.
	tel.SessionEnded("closed")
	stuck.ObservePending("/s", func() bool { return false }, func(context.Context) (int, error) { t.Error("a dropped Queue read"); return 0, nil })
	if got := pendingValue(t, reader); got != 5 {
		t.Errorf("pending %d after one session's end and with a dropped Queue, want 5", got)
	}
	stuck.SessionEnded("closed")
	stuck.ObservePending("/t", func() bool { return true }, func(context.Context) (int, error) { t.Error("read after the end"); return 0, nil })
	if got := pendingValue(t, reader); got != -1 {
		t.Errorf("pending %d after the sessions' end, want no point", got)
	}
}

// pendingValue collects and returns the pending gauge, -1 without a point.
func pendingValue(t *testing.T, r sdkmetric.Reader) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "zkrecipes.queue.item.pending" {
				if ps := m.Data.(metricdata.Sum[int64]).DataPoints; len(ps) == 1 {
					return ps[0].Value
				}
			}
		}
	}
	return -1
}
