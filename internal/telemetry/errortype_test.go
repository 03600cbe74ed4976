package telemetry

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/go-zookeeper/zk"
)

// error.type names the innermost sentinel that has a name: one Named, or
// one the recipe's Names knows.
func TestErrorType(t *testing.T) {
	errExpired := errors.New("session expired")
	expired := Named(errExpired, "zkrecipes.ErrSessionExpired")
	lost := errors.New("lock lost")
	names := func(e error) string {
		if e == lost {
			return "zklock.ErrLockLost"
		}
		return ""
	}
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
		if got := ErrorType(tc.err, names); got != tc.want {
			t.Errorf("ErrorType(%q) = %q, want %q", tc.err, got, tc.want)
		}
	}
	if !errors.Is(fmt.Errorf("a: %w", expired), errExpired) || expired.Error() != errExpired.Error() {
		t.Error("a Named sentinel is not the sentinel it names, for errors.Is and in its text")
	}
	if got := ErrorType(fmt.Errorf("a: %w", lost)); got != "_OTHER" {
		t.Errorf("without the recipe's Names, a sentinel of its is %q, want _OTHER", got)
	}
}
