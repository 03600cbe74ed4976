package zkrecipes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"
)

// The reconnect back-off of Supervise: jittered, doubling from the first to
// the last.
const (
	superviseFirstBackoff = 100 * time.Millisecond
	superviseMaxBackoff   = 10 * time.Second
)

// Supervise connects and calls run with a live Session and a ctx that is
// cancelled, with the Session's Err as its cause, the moment that session
// ends. When it ends by expiry or loss, Supervise waits for run to return,
// closes the Session, reconnects with jittered exponential back-off
// (logged, and counted as zkrecipes.session.replaced) and calls run again
// with a new Session. There are never two live Sessions of one Supervise:
// run's ctx is cancelled, and run has returned, before a new one is made.
//
// It returns when ctx ends (context.Cause(ctx)), or when run returns nil or
// an error that is not the end of its session (that error). Options that
// cannot work (ErrInvalidArgument) are returned at once; a failure to
// connect is retried, with the back-off, until ctx ends.
//
// Supervise and Election.Run make a leader candidate that campaigns again
// after every session loss; Supervise and a Take loop, a worker that
// survives one. run must return promptly once its ctx is cancelled: until
// it does, nothing is reconnected.
func Supervise(ctx context.Context, servers []string, run func(ctx context.Context, s *Session) error, opts ...Option) error {
	if run == nil {
		return fmt.Errorf("zkrecipes: supervise: %w: nil run func", ErrInvalidArgument)
	}
	log := slog.New(slog.DiscardHandler)
	o := options{}
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger != nil {
		log = o.logger
	}
	backoff := superviseFirstBackoff
	for n := 0; ; n++ {
		s, err := Connect(ctx, servers, opts...)
		switch {
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case errors.Is(err, ErrInvalidArgument):
			return err
		case err != nil:
			wait := jitter(backoff)
			log.Warn("zkrecipes: supervise: cannot connect; trying again", "err", err, "in", wait)
			if !sleep(ctx, wait) {
				return context.Cause(ctx)
			}
			backoff = min(2*backoff, superviseMaxBackoff)
			continue
		}
		if n > 0 {
			s.inner().Telemetry().Reconnected()
			log.Info("zkrecipes: supervise: new session", "session", fmt.Sprintf("0x%x", s.ID()))
		}
		backoff = superviseFirstBackoff

		rerr, serr := supervised(ctx, s, run)
		switch {
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case serr != nil && !errors.Is(serr, ErrClosed):
			// The session ended under run: make a new one.
			log.Warn("zkrecipes: supervise: session ended; reconnecting", "err", serr, "run", rerr)
		case rerr == nil:
			return nil
		default:
			return rerr
		}
	}
}

// supervised calls run with s and a ctx that ends with s, and returns run's
// error and how the session ended (nil if it lives on) once run has
// returned and s is closed.
func supervised(ctx context.Context, s *Session, run func(context.Context, *Session) error) (rerr, serr error) {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		select {
		case <-s.Done():
			cancel(s.Err())
		case <-rctx.Done():
		}
	}()
	rerr = run(rctx, s)
	serr = s.Err()
	cancel(nil)
	<-watching
	s.Close()
	return rerr, serr
}

// jitter spreads d over [d/2, 3d/2), so that clients that lost their
// sessions together do not all come back at once.
func jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d)))
}

// sleep waits d, and reports false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
