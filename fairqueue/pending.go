package fairqueue

import (
	"context"
	"errors"
	"weak"
)

// observePending has q's Session report the queue's pending items, as Len
// counts them, to its meter's collections: at most once per
// telemetry.DefaultPendingMaxAge, and only while q is in use. The Session
// holds q weakly: a Queue the program drops is observed no more; several
// Queues of one path are read as one.
func observePending(q *Queue) {
	wq := weak.Make(q)
	q.s.Telemetry().ObservePending(q.dir,
		func() bool { return wq.Value() != nil },
		func(ctx context.Context) (int, error) {
			q := wq.Value()
			if q == nil {
				return 0, errors.New("the Queue was dropped")
			}
			return q.Len(ctx)
		})
}
