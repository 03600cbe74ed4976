// Package telemetry holds the OpenTelemetry instruments of one Session:
// the recipes record through it, in the waiting-line engine and the lease
// owner, so every recipe reports the same things the same way. It uses the
// OpenTelemetry API only; with the default providers (no SDK installed)
// every call is a no-op.
//
// Names, units and attributes follow the semantic conventions' general
// guidance (opentelemetry.io/docs/specs/semconv/general/, as of v1.45):
//
//   - naming.md, "Metrics" > "Pluralization": a metric is named for what it
//     measures, under the library's own namespace (zkrecipes.lock,
//     zkrecipes.queue, zkrecipes.session), namespaces singular; a name is
//     pluralized only when its value counts discrete things and its unit is
//     an annotation ("{fault}"). Our counters take the form of
//     system.process.created ({process}): the thing and what happened to
//     it, zkrecipes.lock.lease.lost ({lease}), so none is plural.
//   - naming.md, "Do not pluralize UpDownCounter names": a count of things
//     is thing.count (system.process.count), with a state attribute when
//     the things have states (db.client.connection.count by
//     db.client.connection.state); those in progress are thing.active
//     (cicd.pipeline.run.active, next to cicd.pipeline.run.duration).
//   - naming.md, "Do not use total": no name ends in total or _total (the
//     Prometheus exporter adds _total to counters itself).
//   - metrics.md, "Instrument units": every instrument has a unit, UCUM,
//     "s" for durations, and a curly-brace annotation in the singular for a
//     count ("{lease}", "{item}"), never the default unit "1".
//   - metrics.md, "Instrument types": synchronous and asynchronous
//     instruments are equally compliant; an UpDownCounter's decrement uses
//     the attributes of its increment ("Consistent UpDownCounter
//     timeseries").
//   - naming.md, "General naming considerations" and "Recommendations for
//     application developers": attributes are namespaced by the library's
//     name (zkrecipes.recipe, zkrecipes.outcome), lowercase, snake_case
//     within a component.
//   - recording-errors.md: a failed operation sets the span status to Error
//     with the error's text as the description, and error.type on the span
//     and on the operation's duration histogram; a successful one sets
//     neither; the error is not recorded as a span event. error.type
//     (registry/attributes/error.md) is low in cardinality, documented, and
//     "_OTHER" when there is nothing better; a wrapper that says nothing of
//     the cause may give way to the error it wraps (errortype.go).
//   - The specification's trace/api.md, "SpanKind": CLIENT describes one
//     request to a remote service; a wait makes several (join, list,
//     watch, again after each change) and is the application's own
//     operation, so its span is INTERNAL, the requests under it unspanned.
//
// The instrumentation scope is the module's path, with the module's
// version (version.go).
//
// No attribute carries a lock path, a queue path or an item id: their
// number has no bound.
package telemetry

import (
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// scope names the instrumentation scope: this module.
const scope = "github.com/zkrecipes/zkrecipes"

// Recipe names, the values of the zkrecipes.recipe attribute.
const (
	Mutex     = "mutex"
	RWRead    = "rwmutex.read"
	RWWrite   = "rwmutex.write"
	Semaphore = "semaphore"
	Election  = "election"
	// CachedMutex is a zklock.CachedMutex's leases: its critical sections.
	CachedMutex = "mutex.cached"
)

// The attributes.
const (
	keyRecipe    = attribute.Key("zkrecipes.recipe")
	keyOutcome   = attribute.Key("zkrecipes.outcome")
	keyReason    = attribute.Key("zkrecipes.reason")
	keyState     = attribute.Key("zkrecipes.session.state")
	keyAhead     = attribute.Key("zkrecipes.line.ahead")
	keyErrorType = attribute.Key("error.type") // the semantic conventions' own
)

// Config is what New makes the instruments from.
type Config struct {
	Meters  metric.MeterProvider
	Tracers trace.TracerProvider
	// PendingMaxAge is how old a queue's pending count may be before a
	// collection reads it again (pending.go); 0: DefaultPendingMaxAge.
	PendingMaxAge time.Duration
}

// T is a Session's instruments and tracer. The zero value is not usable;
// a nil *T records nothing.
type T struct {
	meter  metric.Meter
	tracer trace.Tracer
	sets   sync.Map // attribute-set key -> metric.MeasurementOption

	sessions        metric.Int64UpDownCounter
	sessionEnded    metric.Int64Counter
	sessionReplaced metric.Int64Counter

	lockWait       metric.Float64Histogram
	lockWaitActive metric.Int64UpDownCounter
	leaseDuration  metric.Float64Histogram
	leaseActive    metric.Int64UpDownCounter
	leaseLost      metric.Int64Counter
	localGrant     metric.Int64Counter
	cacheRevoked   metric.Int64Counter

	itemPut        metric.Int64Counter
	jobAcked       metric.Int64Counter
	jobNacked      metric.Int64Counter
	jobRedelivered metric.Int64Counter
	itemDead       metric.Int64Counter
	takeWait       metric.Float64Histogram
	takeWaitActive metric.Int64UpDownCounter
	jobActive      metric.Int64UpDownCounter
	itemPending    metric.Int64ObservableUpDownCounter
	pendingMaxAge  time.Duration
	pending        pending

	stateMu sync.Mutex
	state   string // the session's state as counted in sessions; "" when not counted
	over    bool   // the session is over: its state is counted no more
}

// New makes the instruments from the providers. An instrument the meter
// cannot make is a no-op one: telemetry never stops a Session.
func New(cfg Config) *T {
	v := version()
	m := cfg.Meters.Meter(scope, metric.WithInstrumentationVersion(v))
	t := &T{meter: m, tracer: cfg.Tracers.Tracer(scope, trace.WithInstrumentationVersion(v)), pendingMaxAge: cfg.PendingMaxAge}
	if t.pendingMaxAge <= 0 {
		t.pendingMaxAge = DefaultPendingMaxAge
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, _ := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		return c
	}
	upDown := func(name, unit, desc string) metric.Int64UpDownCounter {
		c, _ := m.Int64UpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		return c
	}
	seconds := func(name, desc string) metric.Float64Histogram {
		h, _ := m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
		return h
	}

	t.sessions = upDown("zkrecipes.session.count", "{session}", "Sessions that are live, by state: connected, or suspended (the connection dropped; the session may live on).")
	t.sessionEnded = counter("zkrecipes.session.ended", "{session}", "Sessions that ended, by reason: expired, lost, closed.")
	t.sessionReplaced = counter("zkrecipes.session.replaced", "{session}", "Sessions that ended and that Supervise replaced with a new one.")

	t.lockWait = seconds("zkrecipes.lock.wait.duration", "Time from asking for a lock, permit or leadership to holding it or giving up.")
	t.lockWaitActive = upDown("zkrecipes.lock.wait.active", "{wait}", "Waits for a lock, permit or leadership in progress: contenders joining or waiting in line.")
	t.leaseDuration = seconds("zkrecipes.lock.lease.duration", "Time a lease was held, until released or lost.")
	t.leaseActive = upDown("zkrecipes.lock.lease.active", "{lease}", "Leases held now.")
	t.leaseLost = counter("zkrecipes.lock.lease.lost", "{lease}", "Leases lost, by reason: session, deleted, modified.")
	t.localGrant = counter("zkrecipes.lock.lease.granted_locally", "{lease}", "Leases (critical sections) a cached holding granted without joining the line, by how: cached (no request), synced (after one sync).")
	t.cacheRevoked = counter("zkrecipes.lock.holding.released", "{holding}", "Cached holdings let go, by reason: join (a contender joined), idle, release (asked), reconnect, unproven (contact too old), sync, lost.")

	t.itemPut = counter("zkrecipes.queue.item.put", "{item}", "Items put.")
	t.jobAcked = counter("zkrecipes.queue.job.acked", "{job}", "Jobs acked: their items removed for good.")
	t.jobNacked = counter("zkrecipes.queue.job.nacked", "{job}", "Jobs nacked: their items given back.")
	t.jobRedelivered = counter("zkrecipes.queue.job.redelivered", "{job}", "Jobs taken whose items had been delivered before.")
	t.itemDead = counter("zkrecipes.queue.item.dead_lettered", "{item}", "Items moved to the dead letters.")
	t.takeWait = seconds("zkrecipes.queue.take.wait.duration", "Time from Take to a job in hand or giving up.")
	t.takeWaitActive = upDown("zkrecipes.queue.take.wait.active", "{wait}", "Takes in progress.")
	t.jobActive = upDown("zkrecipes.queue.job.active", "{job}", "Jobs in flight: taken by this process and neither acked, nacked nor lost.")
	t.itemPending, _ = m.Int64ObservableUpDownCounter("zkrecipes.queue.item.pending", metric.WithUnit("{item}"),
		metric.WithDescription("Items pending in the queues this process has a Queue for: put and neither claimed, acked nor dead; as last read, not more often than every few seconds."))
	return t
}

// attrs is the measurement option for an attribute set, made once per set:
// the sets are few (recipes, outcomes, reasons), and recording is on every
// lock's path. It may reorder kv.
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

// recipeAttrs is the attribute set of a recipe, none for "".
func recipeAttrs(recipe string) []attribute.KeyValue {
	if recipe == "" {
		return nil
	}
	return []attribute.KeyValue{keyRecipe.String(recipe)}
}
