package telemetrytest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// A CachedMutex counts the sections it grants without joining the line
// (by how: with no request, or after a sync), and the holdings it lets go
// (by why); every section is a lease of recipe mutex.cached.
func TestTelemetryCachedMutex(t *testing.T) {
	srv := setup(t)
	reader := sdkmetric.NewManualReader()
	s := connect(t, srv.Addrs(), zkrecipes.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	other := connect(t, srv.Addrs())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := zktest.Path(t, "/telemetry")
	m, err := zklock.NewCachedMutex(s, p, zklock.WithIdleRelease(time.Minute))
	require.NoError(t, err)
	sections, local, joined := 0, 0, 0
	cycle := func() zklock.Fence {
		l, err := m.Lock(ctx)
		require.NoError(t, err)
		f := l.Fence()
		require.NoError(t, l.Unlock(ctx))
		sections++
		if f.Section > 1 {
			local++
		}
		if f.Section <= 1 {
			joined++
		}
		return f
	}
	for range 10 {
		cycle()
	}
	require.Positive(t, local)
	om, err := zklock.NewMutex(other, p)
	require.NoError(t, err)
	l, err := om.Lock(ctx) // the idle holding lets go: join
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	for cycle().Section < 2 {
	}
	require.NoError(t, m.Release(ctx)) // release
	require.NoError(t, s.Close())

	points := collectPoints(t, reader)
	got := points["zkrecipes.lock.lease.granted_locally"]
	require.Equal(t, float64(local), got["zkrecipes.grant.how=cached,zkrecipes.recipe=mutex.cached"]+got["zkrecipes.grant.how=synced,zkrecipes.recipe=mutex.cached"], "%v", got)
	require.Equal(t, map[string]float64{
		"zkrecipes.reason=join,zkrecipes.recipe=mutex.cached":    1,
		"zkrecipes.reason=release,zkrecipes.recipe=mutex.cached": 1,
	}, points["zkrecipes.lock.holding.released"])
	require.Equal(t, map[string]float64{"zkrecipes.recipe=mutex.cached": float64(sections)}, points["zkrecipes.lock.lease.duration"])
	require.Equal(t, map[string]float64{"zkrecipes.outcome=acquired,zkrecipes.recipe=mutex.cached": float64(joined)}, points["zkrecipes.lock.wait.duration"])
	t.Logf("%d sections, %d granted in process (%v), %d joined the line", sections, local, got, joined)
}
