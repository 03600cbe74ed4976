package zktest

import (
	"context"
	"testing"
	"time"

	"github.com/zkrecipes/zkrecipes"
)

// Connect opens a zkrecipes.Session to addrs for the test (failing it if no
// session can be had within 30 s) and closes it when the test ends.
func Connect(t testing.TB, addrs []string, opts ...zkrecipes.Option) *zkrecipes.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := zkrecipes.Connect(ctx, addrs, opts...)
	if err != nil {
		t.Fatalf("zktest: connect to %v: %v", addrs, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
