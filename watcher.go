package zkrecipes

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"
)

// Watch is a one-shot watch on one node, set by WatchNode. It is the
// herd-free wait every recipe shares: each waiter watches one node, never a
// whole directory.
type Watch struct {
	s    *Session
	path string
	ev   <-chan zk.Event // nil when the node was already gone
	Data []byte          // the node's data when the watch was set
	Stat *zk.Stat        // its Stat then; nil when it was already gone
}

// WatchNode sets a watch on path with getData (not exists: an exists watch
// on a node that is already gone stays behind as a creation watch). When the
// node is already gone, the returned Watch fires at once with
// zk.EventNodeDeleted.
func (s *Session) WatchNode(ctx context.Context, path string) (*Watch, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	w := &Watch{s: s, path: path}
	err := Call(ctx, func() error {
		data, stat, ev, err := s.conn.GetW(path)
		if err == nil {
			w.Data, w.Stat, w.ev = data, stat, ev
		}
		return err
	})
	switch {
	case err == nil, errors.Is(err, zk.ErrNoNode):
		return w, nil
	default:
		return nil, s.wrap(fmt.Sprintf("watch %s", path), err)
	}
}

// Exists reports whether the node existed when the watch was set.
func (w *Watch) Exists() bool { return w.ev != nil }

// Events is the watch's channel: it receives one event and is then closed.
// It is nil when the node was already gone.
func (w *Watch) Events() <-chan zk.Event { return w.ev }

// Wait blocks until the node changes or goes away, the session ends, or ctx
// ends. It returns zk.EventNodeDeleted or zk.EventNodeDataChanged, or the
// session's error, or ctx's cause. It starts no goroutine.
//
// What it cannot undo: go-zookeeper v1.0.4 has no removeWatches, so a Wait
// abandoned for ctx leaves the one-shot watch registered on the server until
// the node next changes, when it fires into a buffered channel and is gone.
func (w *Watch) Wait(ctx context.Context) (zk.EventType, error) {
	if w.ev == nil {
		return zk.EventNodeDeleted, nil
	}
	select {
	case ev := <-w.ev:
		return w.s.WatchEvent(ev)
	case <-w.s.done:
		return 0, w.s.Err()
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	}
}

// WatchEvent maps a watch event to its type, or to the session's error when the
// client dropped the watch (it does so when the session ends or closes).
func (s *Session) WatchEvent(ev zk.Event) (zk.EventType, error) {
	if ev.Type == zk.EventNotWatching || ev.Err != nil {
		<-s.done // the client drops watches only when the session is over
		return 0, s.Err()
	}
	return ev.Type, nil
}

// wrap names the operation in err and, when the session is over, says so:
// a call that failed because the session ended reports the session's error.
func (s *Session) wrap(op string, err error) error {
	if serr := s.Err(); serr != nil && isConnErr(err) {
		return fmt.Errorf("zkrecipes: %s: %w", op, errors.Join(serr, err))
	}
	return fmt.Errorf("zkrecipes: %s: %w", op, err)
}

// isConnErr reports errors that say nothing of the request's outcome: it
// may or may not have been applied.
func isConnErr(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrClosing) ||
		errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved) ||
		errors.Is(err, zk.ErrNoServer) || errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded)
}

// IsAmbiguous reports whether err leaves a request's outcome unknown: the
// connection dropped or the caller gave up while it was in flight.
func IsAmbiguous(err error) bool { return isConnErr(err) }
