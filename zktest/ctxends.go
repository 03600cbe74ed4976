package zktest

import (
	"testing"
	"time"
)

// CtxEnds are when a fault suite ends an operation's ctx: at once (before
// the first request), in the first requests' flight, and, the last ones,
// mostly once the operation has returned, even under the race detector (at
// 0 to 1 ms alone, nearly every operation gave up before its first reply,
// and the case of a ctx ending after the call never ran).
func CtxEnds() []time.Duration {
	return []time.Duration{0, 20 * time.Microsecond, 100 * time.Microsecond, time.Millisecond, 5 * time.Millisecond,
		25 * time.Millisecond, 250 * time.Millisecond}
}

// RequireCtxBothWays fails the test unless the ctx faults of the operation
// what ended its ctx before it returned (ended: their ends) and after it
// (returned), so that both cases ran; waits says the operation waits until
// something no ctx fault outlasts, and ctx always ends first. Nothing
// recorded (an operation whose suite does not tell): nothing to check.
func RequireCtxBothWays(t testing.TB, what string, ended, returned []time.Duration, waits bool) {
	t.Helper()
	if len(ended)+len(returned) == 0 {
		return
	}
	t.Logf("%s: ctx ended first at %v; the operation returned first at %v", what, ended, returned)
	if len(ended) == 0 {
		t.Fatalf("%s: no ctx fault ended its ctx before the operation returned", what)
	}
	if len(returned) == 0 && !waits {
		t.Fatalf("%s: no ctx fault ended its ctx after the operation returned: add a later end to zktest.CtxEnds", what)
	}
}
