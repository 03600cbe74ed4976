package zklock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// resignWait bounds the wait for a Resign that Run makes after lead
// returned; the release goes on in the background past it.
const resignWait = 10 * time.Second

// Run is the leader-selector loop: it campaigns with value, calls lead with
// a context that is cancelled the moment leadership is lost (or ctx ends),
// and when lead returns, resigns and campaigns again. lead returning nil
// means "let someone else lead for a while"; lead should return promptly
// once its context is cancelled, since until it does the Election is not
// campaigning.
//
// Run rides out disconnects the session survives, and campaigns again when
// its node is deleted by another client. It returns when ctx ends
// (context.Cause(ctx)), when lead returns an error (that error, after
// resigning), or when the session is over (an error wrapping ErrLockLost and
// the session's error: connect a new Session to go on). It never calls lead
// twice at once, and never without holding leadership at the time of the
// call.
func (el *Election) Run(ctx context.Context, value []byte, lead func(ctx context.Context) error) error {
	if lead == nil {
		return fmt.Errorf("zklock: run %s: %w: nil lead func", el.dir, zkrecipes.ErrInvalidArgument)
	}
	for try := 0; ; {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		l, err := el.Campaign(ctx, value)
		switch {
		case err == nil:
			try = 0
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case el.s.Err() == nil && errors.Is(err, ErrLockLost):
			// Our node was deleted by someone else while in line: again.
			znode.Pause(ctx, el.s, try)
			try++
			continue
		default:
			return err
		}

		lerr := el.serve(ctx, l, lead)

		// Resign even when ctx ended: the release goes on in the background
		// if it takes longer than we wait.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), resignWait)
		rerr := l.Resign(rctx)
		cancel()
		if rerr != nil && !errors.Is(rerr, ErrLockLost) {
			el.s.Log().Warn("zklock: resign not confirmed yet", "path", l.Path(), "err", rerr)
		}
		if lerr != nil {
			return lerr
		}
	}
}

// serve calls lead under a context that ends with ctx or with the
// leadership, whichever comes first, with the cause of that end.
func (el *Election) serve(ctx context.Context, l *Leadership, lead func(context.Context) error) error {
	if l.Context().Err() != nil {
		// Lost between the grant and now: lead is never called without
		// leadership. Run resigns (a no-op) and campaigns again.
		return nil
	}
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(l.Context(), func() { cancel(context.Cause(l.Context())) })
	defer stop()
	return lead(lctx)
}
