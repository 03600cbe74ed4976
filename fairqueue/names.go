package fairqueue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-zookeeper/zk"
	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// Node names. A bucket is "b" and its number, printed with ten digits so
// names sort like numbers; an item is ZooKeeper's sequential "i-" name. An
// item's id is "<bucket>-<seq>": fixed width, so ids sort in queue order.
const (
	bucketPrefix = "b"
	itemPrefix   = "i-"
	lineMarker   = "-take-"
)

func bucketName(n int64) string { return fmt.Sprintf("%s%010d", bucketPrefix, n) }

// parseBucket returns the number of a bucket node, or false for anything else.
func parseBucket(name string) (int64, bool) {
	if !strings.HasPrefix(name, bucketPrefix) {
		return 0, false
	}
	n, err := strconv.ParseInt(name[len(bucketPrefix):], 10, 64)
	return n, err == nil && n >= 0
}

// parseItem returns the sequence number of an item node.
func parseItem(name string) (int64, bool) {
	if !strings.HasPrefix(name, itemPrefix) {
		return 0, false
	}
	n, err := strconv.ParseInt(name[len(itemPrefix):], 10, 32)
	return n, err == nil && n >= 0
}

func itemID(bucket int64, seq int64) string { return fmt.Sprintf("%010d-%010d", bucket, seq) }

// parseID splits an id into bucket and item sequence numbers.
func parseID(id string) (bucket, seq int64, err error) {
	b, s, ok := strings.Cut(id, "-")
	if ok {
		bucket, err = strconv.ParseInt(b, 10, 64)
		if err == nil {
			seq, err = strconv.ParseInt(s, 10, 32)
		}
	}
	if !ok || err != nil || bucket < 0 || seq < 0 || len(b) != 10 || len(s) != 10 {
		return 0, 0, fmt.Errorf("%w: malformed job id %q", zkrecipes.ErrInvalidArgument, id)
	}
	return bucket, seq, nil
}

// ensureDir creates dir and its missing ancestors as container nodes, so a
// queue leaves nothing behind once empty.
func ensureDir(ctx context.Context, s *zkrecipes.Session, dir string, acl []zk.ACL) error {
	if err := znode.EnsureDir(ctx, s, dir, acl); err != nil {
		return fmt.Errorf("fairqueue: %w", err)
	}
	return nil
}

// multi runs ops in one transaction and returns the index of the op that
// failed and its error; -1 with the error when no op is to blame (the
// connection failed, ctx ended).
func multi(ctx context.Context, s *zkrecipes.Session, ops ...any) ([]zk.MultiResponse, int, error) {
	res, err := znode.Do(ctx, func() ([]zk.MultiResponse, error) { return s.Conn().Multi(ops...) })
	// Ops before the failing one report no error, those after it a
	// runtime inconsistency: the first error is the cause.
	for i, r := range res {
		if r.Error != nil {
			return res, i, r.Error
		}
	}
	if err != nil {
		return res, -1, err
	}
	return res, -1, nil
}

// children lists dir; a missing dir is an empty one.
func children(ctx context.Context, s *zkrecipes.Session, dir string) ([]string, error) {
	ch, err := znode.Do(ctx, func() ([]string, error) {
		ch, _, err := s.Conn().Children(dir)
		return ch, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fairqueue: list %s: %w", dir, err)
	}
	return ch, nil
}

// got is a node's data and Stat.
type got struct {
	data []byte
	stat *zk.Stat
}

func get(ctx context.Context, s *zkrecipes.Session, p string) ([]byte, *zk.Stat, error) {
	g, err := znode.Do(ctx, func() (got, error) {
		d, st, err := s.Conn().Get(p)
		return got{d, st}, err
	})
	return g.data, g.stat, err
}

// watched is a listing with its child watch.
type watched struct {
	names []string
	ev    <-chan zk.Event
}

func childrenW(ctx context.Context, s *zkrecipes.Session, dir string) ([]string, <-chan zk.Event, error) {
	w, err := znode.Do(ctx, func() (watched, error) {
		names, _, ev, err := s.Conn().ChildrenW(dir)
		return watched{names, ev}, err
	})
	return w.names, w.ev, err
}
