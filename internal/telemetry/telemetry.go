// Package telemetry holds the OpenTelemetry instruments of one Session:
// the recipes record through it, in the waiting-line engine and the lease
// owner, so every recipe reports the same things the same way. It uses the
// OpenTelemetry API only; with the default providers (no SDK installed)
// every call is a no-op.
//
// No attribute carries a lock path or an item id: their number has no
// bound.
package telemetry

import (
	"context"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// scope names the instrumentation library.
const scope = "github.com/zkrecipes/zkrecipes"

// Recipe names, the values of the recipe attribute.
const (
	Mutex     = "mutex"
	RWRead    = "rwmutex.read"
	RWWrite   = "rwmutex.write"
	Semaphore = "semaphore"
	Election  = "election"
)

// T is a Session's instruments and tracer. The zero value is not usable;
// a nil *T records nothing.
type T struct {
	tracer trace.Tracer
	sets   sync.Map // attribute-set key -> metric.MeasurementOption

	sessionEnds  metric.Int64Counter
	reconnects   metric.Int64Counter
	lockWait     metric.Float64Histogram
	lockHold     metric.Float64Histogram
	lockLosses   metric.Int64Counter
	puts         metric.Int64Counter
	acks         metric.Int64Counter
	nacks        metric.Int64Counter
	redeliveries metric.Int64Counter
	deadLetters  metric.Int64Counter
	takeWait     metric.Float64Histogram
}

// New makes the instruments from the providers. An instrument the meter
// cannot make is a no-op one: telemetry never stops a Session.
func New(mp metric.MeterProvider, tp trace.TracerProvider) *T {
	m := mp.Meter(scope)
	t := &T{tracer: tp.Tracer(scope)}
	counter := func(name, desc string) metric.Int64Counter {
		c, _ := m.Int64Counter(name, metric.WithDescription(desc))
		return c
	}
	seconds := func(name, desc string) metric.Float64Histogram {
		h, _ := m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
		return h
	}
	t.sessionEnds = counter("zkrecipes.session.ends", "Sessions that ended, by reason: expired, lost, closed.")
	t.reconnects = counter("zkrecipes.session.reconnects", "New sessions Supervise made after one ended.")
	t.lockWait = seconds("zkrecipes.lock.wait.duration", "Time from asking for a lock, permit or leadership to holding it or giving up.")
	t.lockHold = seconds("zkrecipes.lock.hold.duration", "Time a lease was held, until released or lost.")
	t.lockLosses = counter("zkrecipes.lock.losses", "Leases lost, by reason: session, deleted, modified.")
	t.puts = counter("zkrecipes.queue.puts", "Items put.")
	t.acks = counter("zkrecipes.queue.acks", "Jobs acked.")
	t.nacks = counter("zkrecipes.queue.nacks", "Jobs nacked (given back).")
	t.redeliveries = counter("zkrecipes.queue.redeliveries", "Jobs taken that had been delivered before.")
	t.deadLetters = counter("zkrecipes.queue.dead_letters", "Items moved to the dead letters.")
	t.takeWait = seconds("zkrecipes.queue.take.wait.duration", "Time from Take to a job in hand or giving up.")
	return t
}

// attrs is the measurement option for an attribute set, made once per set:
// the sets are few (recipes, outcomes, reasons), and recording is on every
// lock's path.
func (t *T) attrs(kv ...attribute.KeyValue) metric.MeasurementOption {
	var key strings.Builder
	for _, a := range kv {
		key.WriteString(string(a.Key))
		key.WriteByte('=')
		key.WriteString(a.Value.String())
		key.WriteByte(';')
	}
	if o, ok := t.sets.Load(key.String()); ok {
		return o.(metric.MeasurementOption)
	}
	o := metric.WithAttributeSet(attribute.NewSet(kv...))
	t.sets.Store(key.String(), o)
	return o
}

// SessionEnded counts a session's end: reason is expired, lost or closed.
func (t *T) SessionEnded(reason string) {
	if t != nil {
		t.sessionEnds.Add(context.Background(), 1, t.attrs(attribute.String("reason", reason)))
	}
}

// Reconnected counts a new session made after one ended.
func (t *T) Reconnected() {
	if t != nil {
		t.reconnects.Add(context.Background(), 1)
	}
}

// Wait is one wait for a lock, a permit, a leadership or a job, traced as
// a span.
type Wait struct {
	t      *T
	hist   metric.Float64Histogram
	recipe string
	begin  time.Time
	span   trace.Span
}

// StartWait starts timing a wait of the recipe (a zklock recipe name, or
// "" for a queue's Take) and a span named name, returned in ctx.
func (t *T) StartWait(ctx context.Context, name, recipe string) (context.Context, *Wait) {
	if t == nil {
		return ctx, nil
	}
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient))
	h := t.lockWait
	if recipe == "" {
		h = t.takeWait
	}
	return ctx, &Wait{t: t, hist: h, recipe: recipe, begin: time.Now(), span: span}
}

// Waiting marks, on the span in ctx, that the caller had to wait in line
// with ahead contenders ahead of it.
func Waiting(ctx context.Context, ahead int) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("waiting in line", trace.WithAttributes(attribute.Int("ahead", ahead)))
	}
}

// End records the wait's outcome: acquired (err nil), canceled (ctx
// ended) or error.
func (w *Wait) End(ctx context.Context, err error) {
	if w == nil {
		return
	}
	outcome := "acquired"
	switch {
	case err == nil:
	case ctx.Err() != nil:
		outcome = "canceled"
	default:
		outcome = "error"
		w.span.RecordError(err)
	}
	kv := []attribute.KeyValue{attribute.String("outcome", outcome)}
	if w.recipe != "" {
		kv = append(kv, attribute.String("recipe", w.recipe))
	}
	w.hist.Record(context.Background(), time.Since(w.begin).Seconds(), w.t.attrs(kv...))
	w.span.SetAttributes(attribute.String("outcome", outcome))
	w.span.End()
}

// Hold is one holding of a lease, timed from when it is held.
type Hold struct {
	t      *T
	recipe string
	begin  time.Time
}

// StartHold starts timing a lease of the recipe; a nil *Hold (no recipe)
// records nothing.
func (t *T) StartHold(recipe string) *Hold {
	if t == nil || recipe == "" {
		return nil
	}
	return &Hold{t: t, recipe: recipe, begin: time.Now()}
}

// End records the holding's time and, when lost, the loss: reason is
// session, deleted or modified, "" when released.
func (h *Hold) End(lossReason string) {
	if h == nil {
		return
	}
	ctx := context.Background()
	h.t.lockHold.Record(ctx, time.Since(h.begin).Seconds(), h.t.attrs(attribute.String("recipe", h.recipe)))
	if lossReason != "" {
		h.t.lockLosses.Add(ctx, 1, h.t.attrs(attribute.String("recipe", h.recipe), attribute.String("reason", lossReason)))
	}
}

// Queue counters.

// Put counts n items put.
func (t *T) Put(n int) {
	if t != nil {
		t.puts.Add(context.Background(), int64(n))
	}
}

// Acked counts a job acked.
func (t *T) Acked() {
	if t != nil {
		t.acks.Add(context.Background(), 1)
	}
}

// Nacked counts a job given back.
func (t *T) Nacked() {
	if t != nil {
		t.nacks.Add(context.Background(), 1)
	}
}

// Redelivered counts a job taken that had been delivered before.
func (t *T) Redelivered() {
	if t != nil {
		t.redeliveries.Add(context.Background(), 1)
	}
}

// Buried counts an item moved to the dead letters.
func (t *T) Buried() {
	if t != nil {
		t.deadLetters.Add(context.Background(), 1)
	}
}
