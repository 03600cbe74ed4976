package session

import (
	"context"
	"errors"
	"time"

	"github.com/go-zookeeper/zk"
)

// cleanupWait bounds how long Cleanup waits for its step before it returns
// and leaves the step to the background.
const cleanupWait = 5 * time.Second

// Cleanup runs step, the clean-up of a failure path (delete the node of an
// abandoned acquire, say), detached from any caller's context, which may be
// the very thing that ended. step may block: on the outcome of a write that
// was abandoned, for one, since a clean-up that looks before that write has
// landed would miss what it leaves.
//
// A step that fails with a connection error is retried, with back-off,
// while the session lives: a clean-up never gives up on a live session just
// because the connection dropped. Other errors end it and are logged. Once
// the session is over there is nothing to clean: its ephemeral nodes go
// with it.
//
// Cleanup waits until step is done, the session ends, or a bounded time
// passes; then it returns and the step goes on in the background. Close
// waits for it.
func (s *Session) Cleanup(what string, step func() error) {
	finished := make(chan struct{})
	if !s.goTracked(func() {
		defer close(finished)
		s.retry(what, step)
	}) {
		return
	}
	t := time.NewTimer(cleanupWait)
	defer t.Stop()
	select {
	case <-finished:
	case <-t.C:
		s.log.Warn("clean-up still pending; going on in the background", "step", what)
	}
}

func (s *Session) retry(what string, step func() error) {
	backoff := 20 * time.Millisecond
	for {
		err := step()
		switch {
		case err == nil:
			return
		case s.Err() != nil:
			return // the session's ephemeral nodes go with it
		case !IsConnErr(err):
			s.log.Warn("clean-up failed", "step", what, "err", err)
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-s.done:
			t.Stop()
			return
		}
		backoff = min(2*backoff, time.Second)
	}
}

// goTracked runs f in a goroutine that Close waits for, unless the session
// is over already.
func (s *Session) goTracked(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false
	}
	// Safe: the monitor holds the WaitGroup above zero until it has set
	// s.err, which it does under s.mu.
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

// DeleteStep is a clean-up step that deletes path; a missing node is
// success.
func (s *Session) DeleteStep(path string) func() error {
	return func() error {
		if err := s.conn.Delete(path, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return err
		}
		return nil
	}
}

// IsConnErr reports errors that say nothing of a request's outcome because
// the connection dropped: it may or may not have been applied, and the
// session may well live on.
func IsConnErr(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrClosing) ||
		errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved) ||
		errors.Is(err, zk.ErrNoServer)
}

// IsAmbiguous reports whether err leaves a request's outcome unknown: the
// connection dropped or the caller gave up while it was in flight.
func IsAmbiguous(err error) bool {
	return IsConnErr(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
