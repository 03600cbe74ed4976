package znode

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/session"
)

// EnsureDir creates dir and its missing ancestors as container nodes, which
// the server removes once they have had children and are empty again, so a
// recipe's paths leave nothing behind. Callers create a directory only to
// put a child in it at once: a container that never had a child is never
// removed.
func EnsureDir(ctx context.Context, s *session.Session, dir string, acl []zk.ACL) error {
	_, err := Retry(ctx, s, func() (string, error) {
		return s.Conn().CreateContainer(dir, nil, zk.FlagContainer, acl)
	})
	switch {
	case err == nil, errors.Is(err, zk.ErrNodeExists):
		return nil
	case errors.Is(err, zk.ErrNoNode) && strings.LastIndex(dir, "/") == 0:
		// The root has no parent to make: it is a chroot that does not
		// exist.
		return fmt.Errorf("create %s: %w (its chroot does not exist)", dir, err)
	case errors.Is(err, zk.ErrNoNode):
		if err := EnsureDir(ctx, s, dir[:strings.LastIndex(dir, "/")], acl); err != nil {
			return err
		}
		return EnsureDir(ctx, s, dir, acl)
	default:
		return fmt.Errorf("create %s: %w", dir, err)
	}
}

// Children lists dir, asking again across disconnects; a missing dir is an
// empty one.
func Children(ctx context.Context, s *session.Session, dir string) ([]string, error) {
	names, err := Retry(ctx, s, func() ([]string, error) {
		names, _, err := s.Conn().Children(dir)
		return names, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	return names, nil
}

// Node is a node's data and Stat, as read.
type Node struct {
	Data []byte
	Stat *zk.Stat
}

// Get reads path, asking again across disconnects.
func Get(ctx context.Context, s *session.Session, path string) (Node, error) {
	return Retry(ctx, s, func() (Node, error) {
		d, st, err := s.Conn().Get(path)
		return Node{d, st}, err
	})
}

// ChildrenW lists dir, asking again across disconnects, and leaves a child
// watch on it; a missing dir lists empty, with a watch for its creation
// instead. The listing is never nil.
func ChildrenW(ctx context.Context, s *session.Session, dir string) ([]string, <-chan zk.Event, error) {
	type listing struct {
		names []string
		ev    <-chan zk.Event
	}
	for {
		l, err := Retry(ctx, s, func() (listing, error) {
			names, _, ev, err := s.Conn().ChildrenW(dir)
			return listing{names, ev}, err
		})
		if err == nil {
			return append([]string{}, l.names...), l.ev, nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return nil, nil, fmt.Errorf("list %s: %w", dir, err)
		}
		l, err = Retry(ctx, s, func() (listing, error) {
			found, _, ev, err := s.Conn().ExistsW(dir)
			if found {
				return listing{}, zk.ErrNodeExists // made meanwhile: list it
			}
			return listing{ev: ev}, err
		})
		if errors.Is(err, zk.ErrNodeExists) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("watch %s: %w", dir, err)
		}
		return []string{}, l.ev, nil
	}
}
