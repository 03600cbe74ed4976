package telemetry

import (
	"runtime/debug"
	"testing"

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// meters records the scope it is asked for.
type meters struct {
	metricnoop.MeterProvider
	name, version string
}

func (m *meters) Meter(name string, opts ...metric.MeterOption) metric.Meter {
	m.name, m.version = name, metric.NewMeterConfig(opts...).InstrumentationVersion()
	return m.MeterProvider.Meter(name, opts...)
}

// tracers records the scope it is asked for.
type tracers struct {
	tracenoop.TracerProvider
	name, version string
}

func (tp *tracers) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	cfg := trace.NewTracerConfig(opts...)
	tp.name, tp.version = name, cfg.InstrumentationVersion()
	return tp.TracerProvider.Tracer(name, opts...)
}

// The instrumentation scope is the module, with the version of it the
// binary was built with: here the main module's.
func TestScope(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build info in a test binary")
	}
	want := moduleVersion(bi, scope)
	if want == "" {
		t.Fatalf("no version of %s in the test binary's build info %v", scope, bi.Main)
	}
	m, tp := &meters{}, &tracers{}
	New(Config{Meters: m, Tracers: tp})
	if m.name != scope || m.version != want {
		t.Errorf("meter scope %q version %q, want %q %q", m.name, m.version, scope, want)
	}
	if tp.name != scope || tp.version != want {
		t.Errorf("tracer scope %q version %q, want %q %q", tp.name, tp.version, scope, want)
	}
}
