package zklock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zktest"
)

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

// lockPath is a path no other test uses. When the test ends it must hold no
// node: every contender's node is gone.
func lockPath(t *testing.T, s *zkrecipes.Session) string {
	t.Helper()
	p := zktest.Path(t, "/zklock-test")
	t.Cleanup(func() { requireNoNodes(t, s, p) })
	return p
}

// requireNoNodes fails unless dir has no children. The checking session may
// be closed already; then a fresh one is used.
func requireNoNodes(t *testing.T, s *zkrecipes.Session, dir string) {
	t.Helper()
	conn := s.Conn()
	if s.Err() != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		fresh, err := zkrecipes.Connect(ctx, zktest.Start(t).Addrs())
		require.NoError(t, err)
		defer fresh.Close()
		conn = fresh.Conn()
	}
	zktest.CatchUp(t, conn, dir)
	children, _, err := conn.Children(dir)
	if errors.Is(err, zk.ErrNoNode) {
		return
	}
	require.NoError(t, err)
	require.Empty(t, children, "nodes left behind in %s", dir)
}

func bg(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// buildChild builds the program in testdata/<name> (a child process for
// tests that kill one with SIGKILL) and returns its path.
func buildChild(t *testing.T, name string) string {
	t.Helper()
	return zktest.BuildProgram(t, "./testdata/"+name)
}
