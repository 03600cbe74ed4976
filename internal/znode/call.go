// Package znode holds the node operations the recipes share: calls bounded
// by a context, reads retried across the disconnects a session survives,
// multi results, container directories, one-node watches and path checks.
//
// The rule it keeps: a connection error is not an answer. A read that meets
// one is asked again once the client has reconnected, for as long as the
// session lives and the caller waits; only the session's end or the
// caller's context stops it.
package znode

import (
	"context"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/session"
)

// Do runs f, a blocking go-zookeeper call, and returns early with ctx's
// cause if ctx ends first; f's results then go nowhere (they come back
// through a channel, so an abandoned call never races with its caller over
// shared variables). If ctx has ended already, f is not called at all.
//
// A write abandoned this way may still be applied, later: whoever abandons
// one must learn its outcome before looking at what it writes.
func Do[T any](ctx context.Context, f func() (T, error)) (T, error) {
	var zero T
	if ctx.Err() != nil {
		return zero, context.Cause(ctx)
	}
	if ctx.Done() == nil {
		return f()
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return zero, context.Cause(ctx)
	}
}

// Retry runs f, a read or a write that is safe to repeat, with Do, and asks
// again after each connection error while the session lives and ctx has not
// ended. The error it returns is never a connection error unless the
// session is over (then the session's error is joined to it) or ctx ended.
func Retry[T any](ctx context.Context, s *session.Session, f func() (T, error)) (T, error) {
	for try := 0; ; try++ {
		v, err := Do(ctx, f)
		if err == nil || !session.IsConnErr(err) {
			return v, err
		}
		if !Pause(ctx, s, try) {
			return v, Ended(ctx, s, err)
		}
	}
}

// Pause waits before try+1 after a connection error: a few milliseconds,
// doubling up to a quarter second (a request sent while the client is
// disconnected waits in its queue until it reconnects, so a short pause is
// enough to step over the moment the connection closes). It reports false,
// at once, when ctx ends or the session is over.
func Pause(ctx context.Context, s *session.Session, try int) bool {
	if ctx.Err() != nil || s.Err() != nil {
		return false
	}
	t := time.NewTimer(min(5*time.Millisecond<<min(try, 6), 250*time.Millisecond))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-s.Done():
	}
	return false
}

// Ended explains why a retried call stopped: the session's end or ctx's
// cause, which the caller branches on, with err, the last failure.
func Ended(ctx context.Context, s *session.Session, err error) error {
	if serr := s.Err(); serr != nil {
		return &SessionEnded{Cause: serr, Last: err}
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// SessionEnded is the error of a call cut off by the end of its session.
type SessionEnded struct {
	Cause error // the session's Err
	Last  error // what the call last got
}

func (e *SessionEnded) Error() string { return e.Cause.Error() }
func (e *SessionEnded) Unwrap() error { return e.Cause }

// MultiErr returns the index of the op that failed in a multi and its
// error, or -1 with the call's error when no op is to blame (the
// connection dropped, ctx ended). Ops before the failing one report no
// error and those after it a runtime inconsistency: the first error is the
// cause.
func MultiErr(res []zk.MultiResponse, err error) (int, error) {
	for i, r := range res {
		if r.Error != nil {
			return i, r.Error
		}
	}
	return -1, err
}
