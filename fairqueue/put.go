package fairqueue

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// sealMark is the data of a full bucket. A put checks that its bucket's data
// version is still 0, so no item lands in a bucket once it is sealed, and
// the next bucket is created only after its predecessor is sealed: every
// item of bucket n is older than every item of bucket n+1.
var sealMark = []byte("sealed")

// tail is a producer's idea of the newest bucket, so that a put costs one
// round trip and the buckets are listed only when the idea proves wrong.
type tail struct {
	read  bool  // the queue has been looked at
	n     int64 // the bucket to put into, when known
	known bool
	hi    int64 // the high mark: the highest bucket number ever made
	// markVersion is the version of the queue directory's data, which
	// holds hi, when hi was read: a new bucket is made only with a write
	// of hi+1 conditional on it, so bucket numbers only ever grow, however
	// stale a producer's idea.
	markVersion int32
}

// maxPutTries bounds the retries of a put that races other producers and
// consumers (sealed or drained buckets).
const maxPutTries = 50

// Put appends data to the queue and returns the new item's id. Ids sort in
// queue order, and are never reused while the queue holds anything (an item,
// a claim, a waiting consumer or a dead letter).
//
// If the outcome is unknown (the connection dropped, ctx ended mid-call),
// the error wraps ErrOutcomeUnknown: the item may have been added, and Put
// does not retry on its own, so that nothing is duplicated silently.
func (q *Queue) Put(ctx context.Context, data []byte) (string, error) {
	if len(data) > zkrecipes.MaxDataSize {
		return "", fmt.Errorf("fairqueue: put: %w: %d bytes, the limit is %d",
			zkrecipes.ErrDataTooLarge, len(data), zkrecipes.MaxDataSize)
	}
	if data == nil {
		data = []byte{}
	}
	id, err := q.put(ctx, data)
	if err != nil {
		return "", fmt.Errorf("fairqueue: put: %w", err)
	}
	return id, nil
}

// put appends an item; extra ops (Requeue's delete of the dead letter) are
// applied in the same multi.
func (q *Queue) put(ctx context.Context, data []byte, extra ...any) (string, error) {
	if err := q.s.Err(); err != nil {
		return "", err
	}
	for range maxPutTries {
		if err := ctx.Err(); err != nil {
			return "", context.Cause(ctx) // nothing sent
		}
		q.tailMu.Lock()
		t := q.tail
		q.tailMu.Unlock()
		if !t.read {
			// No idea yet: look at the buckets once.
			if err := q.refreshTail(ctx); err != nil {
				return "", err
			}
			q.tailMu.Lock()
			t = q.tail
			q.tailMu.Unlock()
		}

		if !t.known && t.markVersion < 0 {
			// No queue directory to hold the high mark: make it (and
			// items/, which this put fills at once), then read it.
			if err := znode.EnsureDir(ctx, q.s, q.items, q.acl); err != nil {
				return "", err
			}
			if err := q.refreshTail(ctx); err != nil {
				return "", err
			}
			continue
		}
		var ops []any
		n := t.n
		if t.known {
			ops = append(ops, &zk.CheckVersionRequest{Path: q.bucketPath(n), Version: 0})
		} else {
			// A new bucket is born with its first item, so no consumer ever
			// sees it empty and deletes it under the producer, and with the
			// high mark moved up, conditional on the mark we read.
			n = t.hi + 1
			ops = append(ops,
				&zk.SetDataRequest{Path: q.dir, Data: []byte(strconv.FormatInt(n, 10)), Version: t.markVersion},
				&zk.CreateRequest{Path: q.bucketPath(n), Data: []byte{}, Acl: q.acl})
		}
		item := len(ops)
		ops = append(ops, &zk.CreateRequest{Path: q.bucketPath(n) + "/" + itemPrefix, Data: data, Acl: q.acl, Flags: zk.FlagSequence})
		ops = append(ops, extra...)

		res, err := znode.Do(ctx, func() ([]zk.MultiResponse, error) { return q.s.Conn().Multi(ops...) })
		i, err := znode.MultiErr(res, err)
		switch {
		case err == nil:
			seq, ok := parseItem(path.Base(res[item].String))
			if !ok {
				return "", fmt.Errorf("server returned unexpected node %q", res[item].String)
			}
			q.setTail(n, true)
			if seq >= int64(q.bucketSize)-1 {
				q.seal(ctx, n)
			}
			return itemID(n, seq), nil
		case i < 0 && zkrecipes.IsAmbiguous(err):
			return "", fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
		case i < 0:
			return "", err
		case i > item:
			return "", err // an extra op failed
		case t.known && i == 0 && errors.Is(err, zk.ErrBadVersion):
			q.setTail(n, false) // sealed: go on in the next one
		case t.known && i == 0 && errors.Is(err, zk.ErrNoNode),
			!t.known && i == 0 && errors.Is(err, zk.ErrBadVersion):
			// Drained and deleted by a consumer, or another producer made
			// a newer bucket: learn the newest.
			if err := q.refreshTail(ctx); err != nil {
				return "", err
			}
		case !t.known && i == 1 && errors.Is(err, zk.ErrNodeExists):
			q.setTail(n, true) // made already: put into it
		case !t.known && errors.Is(err, zk.ErrNoNode):
			// No items/ yet (i == 1; this put fills it at once), or the
			// queue directory was reaped since we looked (i == 0).
			if i == 1 {
				if err := znode.EnsureDir(ctx, q.s, q.items, q.acl); err != nil {
					return "", err
				}
			}
			if err := q.refreshTail(ctx); err != nil {
				return "", err
			}
		default:
			return "", fmt.Errorf("put into %s: %w", q.bucketPath(n), err)
		}
	}
	return "", fmt.Errorf("gave up after %d tries racing other clients", maxPutTries)
}

// setTail records bucket n as the one to put into (open) or as full.
func (q *Queue) setTail(n int64, open bool) {
	q.tailMu.Lock()
	defer q.tailMu.Unlock()
	if open {
		q.tail.n, q.tail.known = n, true
	} else if q.tail.n == n {
		q.tail.known = false
	}
}

// refreshTail reads the high mark and lists the buckets, in one round trip,
// and takes the newest bucket as the tail if none was made above it.
func (q *Queue) refreshTail(ctx context.Context) error {
	var (
		mark znode.Node
		merr error
		wg   sync.WaitGroup
	)
	wg.Go(func() { mark, merr = znode.Get(ctx, q.s, q.dir) })
	bs, err := q.buckets(ctx)
	wg.Wait()
	hi, version := int64(-1), int32(-1) // no queue directory: nothing to check against
	switch {
	case errors.Is(merr, zk.ErrNoNode):
	case merr != nil:
		return merr
	default:
		version = mark.Stat.Version
		if n, perr := strconv.ParseInt(string(mark.Data), 10, 64); perr == nil && len(mark.Data) > 0 {
			hi = n
		}
	}
	if err != nil {
		return err
	}
	q.tailMu.Lock()
	defer q.tailMu.Unlock()
	q.tail = tail{read: true, hi: hi, markVersion: version}
	if len(bs) > 0 && bs[len(bs)-1] >= hi {
		q.tail.n, q.tail.known = bs[len(bs)-1], true
		q.tail.hi = bs[len(bs)-1]
	}
	return nil
}

// seal marks bucket n full. Every producer whose item reached the size
// seals, so a producer that dies before doing so holds no one up: at worst
// a bucket gets a few items more than its size.
func (q *Queue) seal(ctx context.Context, n int64) {
	_, err := znode.Do(ctx, func() (*zk.Stat, error) { return q.s.Conn().Set(q.bucketPath(n), sealMark, 0) })
	switch {
	case err == nil, errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode):
		q.setTail(n, false)
	default:
		q.log.Debug("fairqueue: could not seal bucket", "bucket", n, "err", err)
	}
}
