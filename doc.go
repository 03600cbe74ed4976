// Package zkrecipes binds a ZooKeeper client to one session and tells its
// users, early enough to matter, when that session is over. The recipes
// build on it: package zklock holds a fair mutex, a read/write lock, a
// semaphore and leader election, each acquire returning a Lease with a
// fencing token; package fairqueue an ordered, at-least-once job queue.
//
// A Session is one ZooKeeper session and never outlives it: when the
// ensemble expires it, or the client loses touch for too long, or it is
// closed, Done is closed, Err says why, and every lease made on it ends.
// The Session declares itself lost once 80% of the negotiated timeout has
// passed since the latest request that the ensemble's leader, the one
// server that expires sessions, provably heard, so that its holders are
// told before the ensemble can give their locks to anyone else, even when
// the server they are connected to is cut off from the others and goes on
// answering them. A short
// disconnect that the session survives ends nothing.
//
// Connect a new Session to go on, or let Supervise do it: it calls your
// function with a live Session, and again with a new one after each session
// loss.
//
//	err := zkrecipes.Supervise(ctx, servers, func(ctx context.Context, s *zkrecipes.Session) error {
//		m, err := zklock.NewMutex(s, "/myapp/locks/report")
//		if err != nil {
//			return err
//		}
//		lease, err := m.Lock(ctx)
//		if err != nil {
//			return err
//		}
//		defer lease.Unlock(context.Background())
//		return report(lease.Context(), lease.Token())
//	})
//
// Options set the session timeout, credentials and ACLs, a logger
// (log/slog), a dialer, TLS, and where OpenTelemetry metrics and spans go.
// Errors wrap the sentinels below for errors.Is.
package zkrecipes
