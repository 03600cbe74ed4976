package telemetry

import (
	"context"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Wait is one wait for a lock, a permit, a leadership or a job: timed in a
// duration histogram, counted as active while it lasts, traced as a span.
type Wait struct {
	t      *T
	hist   metric.Float64Histogram
	active metric.Int64UpDownCounter
	recipe []attribute.KeyValue // the recipe's attribute, none for a Take
	names  []Names              // the recipe's sentinels, for error.type
	begin  time.Time
	span   trace.Span
}

// StartWait starts timing a wait of the recipe (a zklock recipe name, or
// "" for a queue's Take) and a span named name, returned in ctx. names name
// the recipe's sentinels in error.type (nil ones are passed over).
func (t *T) StartWait(ctx context.Context, name, recipe string, names ...Names) (context.Context, *Wait) {
	if t == nil {
		return ctx, nil
	}
	w := &Wait{t: t, hist: t.lockWait, active: t.lockWaitActive, recipe: recipeAttrs(recipe), begin: time.Now()}
	for _, n := range names {
		if n != nil {
			w.names = append(w.names, n)
		}
	}
	if recipe == "" {
		w.hist, w.active = t.takeWait, t.takeWaitActive
	}
	ctx, w.span = t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(w.recipe...))
	w.active.Add(context.Background(), 1, t.attrs(w.recipe...))
	return ctx, w
}

// Waiting marks, on the span in ctx, that the caller had to wait in line
// with ahead contenders ahead of it.
func Waiting(ctx context.Context, ahead int) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("waiting in line", trace.WithAttributes(keyAhead.Int(ahead)))
	}
}

// End records the wait's outcome: acquired (err nil), busy (err marked by
// Busy), canceled (ctx ended) or error; with error.type and the span's
// Error status when canceled or failed.
func (w *Wait) End(ctx context.Context, err error) {
	if w == nil {
		return
	}
	out, errType := outcome(ctx, err, w.names...)
	result := []attribute.KeyValue{keyOutcome.String(out)}
	if errType != "" {
		result = append(result, keyErrorType.String(errType))
	}
	bg := context.Background()
	w.hist.Record(bg, time.Since(w.begin).Seconds(), w.t.attrs(append(slices.Clone(w.recipe), result...)...))
	w.active.Add(bg, -1, w.t.attrs(w.recipe...))
	w.span.SetAttributes(result...)
	if errType != "" {
		w.span.SetStatus(codes.Error, err.Error())
	}
	w.span.End()
}
