package zklock

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes/zktest"
)

// Run never calls lead without holding leadership: a leadership lost
// between its grant and the call (here: its node deleted by another client)
// is not served. Inside the package, because the window between Campaign
// and lead cannot be widened from outside.
func TestServeNeverLeadsALostLeadership(t *testing.T) {
	srv := zktest.Start(t)
	zktest.CheckGoroutines(t)
	ctx := context.Background()
	s := zktest.Connect(t, srv.Addrs())
	other := zktest.Connect(t, srv.Addrs())
	el, err := NewElection(s, zktest.Path(t, "/zklock-serve"))
	require.NoError(t, err)
	l, err := el.Campaign(ctx, []byte("a"))
	require.NoError(t, err)
	require.NoError(t, other.Conn().Delete(l.Path(), -1))
	<-l.Done()

	called := false
	require.NoError(t, el.serve(ctx, l, func(context.Context) error { called = true; return nil }))
	require.False(t, called, "lead was called with a leadership already lost (%v)", l.Err())
}
