package fairqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// Delayed items (WithDelay) wait in delayed/, named by when they are due.
// They get no queue id until then: a consumer that finds one due moves it
// to the end of the queue (a put whose multi also deletes the entry, so
// that two consumers doing so at once move it once), and only then does it
// take its place in line. A queue id handed out at Put would sort before
// items put meanwhile, and a consumer that took those would see ids go
// backwards.

// putDelayed puts data in delayed/, due at due, with keys/<key> saying so.
func (q *Queue) putDelayed(ctx context.Context, data []byte, key string, due time.Time) (string, error) {
	for range maxDirTries {
		if err := ctx.Err(); err != nil {
			return "", context.Cause(ctx) // nothing sent
		}
		ops := []any{&zk.CreateRequest{Path: q.delayed + "/" + delayedBase(due, key), Data: data, Acl: q.acl, Flags: zk.FlagSequence}}
		if key != "" {
			ops = append(ops, &zk.CreateRequest{Path: q.keys + "/" + key, Data: []byte("delayed"), Acl: q.acl})
		}
		res, err := znode.Do(ctx, func() ([]zk.MultiResponse, error) { return q.s.Conn().Multi(ops...) })
		i, err := znode.MultiErr(res, err)
		switch {
		case err == nil:
			return res[0].String[len(q.delayed)+1:], nil
		case i < 0 && zkrecipes.IsAmbiguous(err):
			return "", fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
		case i == 1 && errors.Is(err, zk.ErrNodeExists):
			id, err := q.keyed(ctx, key)
			if err != nil || id != "" {
				return id, err
			}
		case errors.Is(err, zk.ErrNoNode):
			dir := q.delayed
			if i == 1 {
				dir = q.keys
			}
			if err := znode.EnsureDir(ctx, q.s, dir, q.acl); err != nil {
				return "", err
			}
		default:
			return "", err
		}
	}
	return "", fmt.Errorf("put delayed: directories keep vanishing")
}

// promote moves the delayed entries that are due to the end of the queue,
// oldest first.
func (q *Queue) promote(ctx context.Context, names []string) error {
	slices.Sort(names) // by due time
	now := time.Now()
	for _, name := range names {
		due, key, ok := parseDelayed(name)
		if !ok {
			continue
		}
		if due.After(now) {
			return nil
		}
		p := q.delayed + "/" + name
		n, err := znode.Get(ctx, q.s, p)
		if errors.Is(err, zk.ErrNoNode) {
			continue // moved by someone else
		}
		if err != nil {
			return err
		}
		_, err = q.put(ctx, []putItem{{n.Data, key}}, key != "", &zk.DeleteRequest{Path: p, Version: -1})
		switch {
		case err == nil, errors.Is(err, zk.ErrNoNode):
			// Moved, by us or by someone else first.
		case errors.Is(err, ErrOutcomeUnknown):
			// Settled once the client reconnects: the next look sees.
		default:
			return fmt.Errorf("move delayed %s: %w", name, err)
		}
	}
	return nil
}
