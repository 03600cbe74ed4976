package main

import (
	"context"
	"os/signal"
	"syscall"

	"github.com/zkrecipes/zkrecipes"
)

// openRecipe connects, checks that path holds what u works on, and opens
// the lock, election or queue there with newRecipe (zklock.NewMutex,
// fairqueue.New, ...); ctx ends the connecting. The session is closed
// again if the recipe cannot be opened.
func openRecipe[T, O any](ctx context.Context, c *cli, path string, u use, newRecipe func(*zkrecipes.Session, string, ...O) (T, error), opts ...O) (*zkrecipes.Session, T, error) {
	s, err := c.connect(ctx, c.log)
	if err != nil {
		var zero T
		return nil, zero, err
	}
	if err := u.check(s, path); err != nil {
		s.Close()
		var zero T
		return nil, zero, err
	}
	r, err := newRecipe(s, path, opts...)
	if err != nil {
		s.Close()
		var zero T
		return nil, zero, err
	}
	return s, r, nil
}

// openUntilSignal is openRecipe for a command that does one thing and
// exits (holders, leader, queue ls, ...). The context it returns ends on
// SIGINT or SIGTERM, which then stop the command's wait on the server
// rather than the command, so that it still closes its session; done
// closes the session, then stops catching the signals.
func openUntilSignal[T, O any](c *cli, path string, u use, newRecipe func(*zkrecipes.Session, string, ...O) (T, error)) (ctx context.Context, r T, done func(), err error) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	s, r, err := openRecipe(ctx, c, path, u, newRecipe)
	if err != nil {
		stop()
		return nil, r, nil, err
	}
	return ctx, r, func() { s.Close(); stop() }, nil
}

// connectUntilSignal is openUntilSignal for a command that reads what is
// at a path without knowing first which recipe's it is (holders).
func connectUntilSignal(c *cli) (ctx context.Context, s *zkrecipes.Session, done func(), err error) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	if s, err = c.connect(ctx, c.log); err != nil {
		stop()
		return nil, nil, nil, err
	}
	return ctx, s, func() { s.Close(); stop() }, nil
}
