package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
)

// metricsServer serves the library's OpenTelemetry metrics for Prometheus
// at http://ADDR/metrics (-metrics ADDR), through the OpenTelemetry
// Prometheus exporter. The exporter lives here, in the command: the library
// depends on the OpenTelemetry API only.
type metricsServer struct {
	provider *sdkmetric.MeterProvider
	srv      *http.Server
	served   chan struct{} // closed once Serve has returned
	addr     string        // the address bound, with the port chosen
}

// startMetrics listens on addr (host:port; port 0 picks a free one) and
// serves /metrics from a MeterProvider of its own.
func startMetrics(addr string) (*metricsServer, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("-metrics: %w", err)
	}
	res, err := resource.New(context.Background(),
		resource.WithAttributes(attribute.String("service.name", "zklock")),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
		resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("-metrics: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m := &metricsServer{
		provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res)),
		srv:      &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		served:   make(chan struct{}),
		addr:     ln.Addr().String(),
	}
	go func() {
		defer close(m.served)
		_ = m.srv.Serve(ln) // ErrServerClosed once closed
	}()
	return m, nil
}

// close stops serving and shuts the provider down.
func (m *metricsServer) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := m.srv.Shutdown(ctx)
	if err != nil {
		err = m.srv.Close()
	}
	<-m.served
	return errors.Join(err, m.provider.Shutdown(ctx))
}
