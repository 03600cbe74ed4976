package telemetry

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/go-zookeeper/zk"
)

// error.type names the innermost sentinel that has a name.
func TestErrorType(t *testing.T) {
	expired := Sentinel("session expired", "zkrecipes.ErrSessionExpired")
	lost := Sentinel("lock lost", "zklock.ErrLockLost")
	for _, tc := range []struct {
		err  error
		want string
	}{
		{expired, "zkrecipes.ErrSessionExpired"},
		{fmt.Errorf("zklock: lock /a: %w", lost), "zklock.ErrLockLost"},
		{fmt.Errorf("zklock: lock /a: %w", fmt.Errorf("%w: %w", lost, expired)), "zkrecipes.ErrSessionExpired"},
		{fmt.Errorf("%w: create: %w", lost, zk.ErrNoAuth), "zk.ErrNoAuth"},
		{errors.Join(errors.New("x"), fmt.Errorf("y: %w", context.DeadlineExceeded)), "context.DeadlineExceeded"},
		{errors.New("something else"), "_OTHER"},
		{fmt.Errorf("wrapped: %w", errors.New("something else")), "_OTHER"},
	} {
		if got := ErrorType(tc.err); got != tc.want {
			t.Errorf("ErrorType(%q) = %q, want %q", tc.err, got, tc.want)
		}
	}
	if !errors.Is(fmt.Errorf("a: %w", expired), expired) {
		t.Error("a Sentinel is not found by errors.Is")
	}
}
