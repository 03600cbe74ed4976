package zktest

import (
	"testing"

	"go.uber.org/goleak"
)

// CheckGoroutines checks, once the test and its clean-ups are done, that no
// goroutine started during the test (after this call) is still running.
// Call it after Start, whose shared server lives on between tests.
func CheckGoroutines(t testing.TB) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}
