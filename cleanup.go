package zkrecipes

import (
	"errors"
	"time"

	"github.com/go-zookeeper/zk"
)

// cleanupWait bounds how long Cleanup waits for its first success before it
// returns and leaves the step to the background.
const cleanupWait = 5 * time.Second

type cleanup struct {
	fn   func(*zk.Conn) error
	done chan error // receives the first outcome, once
}

// Cleanup runs fn, a clean-up step of a failure path (delete the node of an
// abandoned acquire, say), detached from any caller's context, which may be
// the very thing that ended. fn must be safe to repeat. Cleanup waits until fn
// succeeds, the session ends (its ephemeral nodes then go anyway), or a
// bounded time passes; in the last case it returns the latest error and the
// Session goes on retrying in the background until fn succeeds or the session
// ends, so a failed clean-up never leaves an orphan behind a live session.
//
// fn must treat zk.ErrNoNode on a delete as success.
func (s *Session) Cleanup(fn func(*zk.Conn) error) error {
	c := &cleanup{fn: fn, done: make(chan error, 1)}
	s.cleanMu.Lock()
	if s.Err() != nil {
		s.cleanMu.Unlock()
		return nil // the session is over: its ephemeral nodes are gone or going
	}
	s.cleanups = append(s.cleanups, c)
	if !s.cleanerOn {
		s.cleanerOn = true
		s.wg.Add(1)
		go s.cleaner()
	}
	s.cleanMu.Unlock()
	t := time.NewTimer(cleanupWait)
	defer t.Stop()
	select {
	case err := <-c.done:
		return err
	case <-t.C:
		return errors.New("zkrecipes: clean-up still pending; retrying in the background")
	}
}

// DeleteNode is a Cleanup step that deletes path; a missing node is success.
func DeleteNode(path string) func(*zk.Conn) error {
	return func(c *zk.Conn) error {
		if err := c.Delete(path, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return err
		}
		return nil
	}
}

// cleaner runs queued clean-up steps one at a time, retrying failures with
// back-off, and exits when the queue is empty or the session is over.
func (s *Session) cleaner() {
	defer s.wg.Done()
	backoff := 50 * time.Millisecond
	for {
		s.cleanMu.Lock()
		if len(s.cleanups) == 0 || s.Err() != nil {
			for _, c := range s.cleanups {
				c.done <- nil // session over: its ephemeral nodes go with it
			}
			s.cleanups = nil
			s.cleanerOn = false
			s.cleanMu.Unlock()
			return
		}
		c := s.cleanups[0]
		s.cleanMu.Unlock()

		err := c.fn(s.conn)
		if err == nil {
			s.cleanMu.Lock()
			s.cleanups = s.cleanups[1:]
			s.cleanMu.Unlock()
			c.done <- nil
			backoff = 50 * time.Millisecond
			continue
		}
		s.log.Warn("clean-up failed; retrying", "err", err, "in", backoff)
		select {
		case <-time.After(backoff):
		case <-s.done:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}
