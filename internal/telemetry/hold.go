package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Hold is one holding, from when it is held until it ends: a lease (timed,
// counted as active, its loss counted) or a job (counted as in flight).
type Hold struct {
	t      *T
	recipe string // a lease's recipe; "" for a job
	attrs  metric.MeasurementOption
	begin  time.Time
}

// StartHold starts a holding of a lease of the recipe; a nil *Hold (no
// recipe, no T) records nothing.
func (t *T) StartHold(recipe string) *Hold {
	if t == nil || recipe == "" {
		return nil
	}
	h := &Hold{t: t, recipe: recipe, attrs: t.attrs(recipeAttrs(recipe)...), begin: time.Now()}
	t.leaseActive.Add(context.Background(), 1, h.attrs)
	return h
}

// StartJob starts a holding of a queue's job: in flight until it ends.
func (t *T) StartJob() *Hold {
	if t == nil {
		return nil
	}
	h := &Hold{t: t, attrs: t.attrs()}
	t.jobActive.Add(context.Background(), 1, h.attrs)
	return h
}

// End records the end of the holding; for a lease, its time and, when
// lost, the loss: lossReason is session, deleted or modified, "" when
// released. Call it once.
func (h *Hold) End(lossReason string) {
	if h == nil {
		return
	}
	ctx := context.Background()
	if h.recipe == "" {
		h.t.jobActive.Add(ctx, -1, h.attrs)
		return
	}
	h.t.leaseActive.Add(ctx, -1, h.attrs)
	h.t.leaseDuration.Record(ctx, time.Since(h.begin).Seconds(), h.attrs)
	if lossReason != "" {
		h.t.leaseLost.Add(ctx, 1, h.t.attrs(keyRecipe.String(h.recipe), keyReason.String(lossReason)))
	}
}
