// Package znode holds the node plumbing the recipes share: container
// directories, finding our own node after a create whose reply was lost,
// and calls bounded by a context.
package znode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/zkrecipes/zkrecipes"
)

// Do runs f, a blocking go-zookeeper call, and returns early with ctx's
// cause if ctx ends first; f's results then go nowhere. The results come
// back through a channel, so an abandoned call never races with its caller
// over shared variables.
func Do[T any](ctx context.Context, f func() (T, error)) (T, error) {
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
		var zero T
		return zero, context.Cause(ctx)
	}
}

// Children lists dir.
func Children(ctx context.Context, s *zkrecipes.Session, dir string) ([]string, error) {
	return Do(ctx, func() ([]string, error) {
		names, _, err := s.Conn().Children(dir)
		return names, err
	})
}

// EnsureDir creates dir and its missing ancestors as container nodes, which
// the server removes once they have had children and are empty again, so a
// recipe's paths leave nothing behind.
func EnsureDir(ctx context.Context, s *zkrecipes.Session, dir string, acl []zk.ACL) error {
	_, err := Do(ctx, func() (string, error) {
		return s.Conn().CreateContainer(dir, nil, zk.FlagContainer, acl)
	})
	switch {
	case err == nil, errors.Is(err, zk.ErrNodeExists):
		return nil
	case errors.Is(err, zk.ErrNoNode):
		if err := EnsureDir(ctx, s, dir[:strings.LastIndex(dir, "/")], acl); err != nil {
			return err
		}
		return EnsureDir(ctx, s, dir, acl)
	default:
		return fmt.Errorf("create %s: %w", dir, err)
	}
}

// FindOwn looks in dir for our node whose name starts with prefix (a GUID),
// after a create whose reply was lost. It waits for the client to reconnect
// (the session may still be alive) and adopts a node only if its
// ephemeralOwner is our session: a lagging server may still list a node of
// a closed session.
func FindOwn(ctx context.Context, s *zkrecipes.Session, dir, prefix string) (string, bool, error) {
	for {
		names, err := Children(ctx, s, dir)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			return "", false, nil
		case err != nil && zkrecipes.IsAmbiguous(err) && ctx.Err() == nil && s.Err() == nil:
			// The client is reconnecting; ask again shortly.
			select {
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
			}
			continue
		case err != nil:
			return "", false, err
		}
		for _, name := range names {
			if !strings.HasPrefix(name, prefix) {
				continue
			}
			p := dir + "/" + name
			st, err := Do(ctx, func() (*zk.Stat, error) {
				_, st, err := s.Conn().Exists(p)
				return st, err
			})
			if err != nil {
				return "", false, err
			}
			if st != nil && st.EphemeralOwner == s.ID() {
				return p, true, nil
			}
		}
		return "", false, nil
	}
}

// DeletePrefix is a clean-up step (see zkrecipes.Session.Cleanup): delete
// whatever node in dir has a name starting with prefix.
func DeletePrefix(dir, prefix string) func(*zk.Conn) error {
	return func(c *zk.Conn) error {
		names, _, err := c.Children(dir)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, name := range names {
			if strings.HasPrefix(name, prefix) {
				if err := zkrecipes.DeleteNode(dir + "/" + name)(c); err != nil {
					return err
				}
			}
		}
		return nil
	}
}
