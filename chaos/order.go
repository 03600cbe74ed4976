package chaos

import (
	"slices"

	"github.com/zkrecipes/zkrecipes/chaos/record"
)

// Ordered returns a copy of events in the order things happened: sorted by
// the shared monotonic clock, each process's own events in the order it
// wrote them (record.Compare). The harness receives each process's events
// through a pipe of its own, so the order of arrival is not that order: a
// Take can arrive before the Put it took, written 20 ms earlier by another
// process. Every check reads the events through Ordered.
func Ordered(events []record.Event) []record.Event {
	out := slices.Clone(events)
	slices.SortStableFunc(out, record.Compare)
	return out
}
