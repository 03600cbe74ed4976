package fairqueue

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"

	"github.com/go-zookeeper/zk"
	"github.com/zkrecipes/zkrecipes"
)

// sealMark is the data of a full bucket. A put checks that its bucket's data
// version is still 0, so no item lands in a bucket once it is sealed, and
// the next bucket is created only after its predecessor is sealed: every
// item of bucket n is older than every item of bucket n+1.
var sealMark = []byte("sealed")

// tail is a producer's idea of the newest bucket, so that a put costs one
// round trip and the buckets are listed only when the idea proves wrong.
type tail struct {
	n     int64 // the bucket to put into, when known
	known bool
	hi    int64 // the highest bucket number seen; new buckets go above it
}

// maxPutTries bounds the retries of a put that races other producers and
// consumers (sealed or drained buckets).
const maxPutTries = 50

// Put appends data to the queue and returns the new item's id. Ids sort in
// queue order.
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
	return q.put(ctx, data)
}

// put appends an item; extra ops (Requeue's delete of the dead letter) are
// applied in the same multi.
func (q *Queue) put(ctx context.Context, data []byte, extra ...any) (string, error) {
	if err := q.s.Err(); err != nil {
		return "", fmt.Errorf("fairqueue: put: %w", err)
	}
	for range maxPutTries {
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("fairqueue: put: %w", context.Cause(ctx)) // nothing sent
		}
		q.tailMu.Lock()
		t := q.tail
		q.tailMu.Unlock()
		if !t.known && t.hi < 0 {
			// No idea yet: look at the buckets once.
			if err := q.refreshTail(ctx); err != nil {
				return "", err
			}
			q.tailMu.Lock()
			t = q.tail
			q.tailMu.Unlock()
		}

		var ops []any
		n := t.n
		if t.known {
			ops = append(ops, &zk.CheckVersionRequest{Path: q.bucketPath(n), Version: 0})
		} else {
			// A new bucket is born with its first item, so no consumer ever
			// sees it empty and deletes it under the producer.
			n = t.hi + 1
			ops = append(ops, &zk.CreateRequest{Path: q.bucketPath(n), Data: []byte{}, Acl: q.acl})
		}
		ops = append(ops, &zk.CreateRequest{Path: q.bucketPath(n) + "/" + itemPrefix, Data: data, Acl: q.acl, Flags: zk.FlagSequence})
		if !t.known {
			// Record the highest bucket number in items/, so that bucket
			// numbers (and ids) keep growing even after the newest bucket
			// was drained and deleted.
			ops = append(ops, &zk.SetDataRequest{Path: q.items, Data: []byte(strconv.FormatInt(n, 10)), Version: -1})
		}
		ops = append(ops, extra...)

		res, i, err := multi(ctx, q.s, ops...)
		switch {
		case err == nil:
			seq, ok := parseItem(path.Base(res[1].String))
			if !ok {
				return "", fmt.Errorf("fairqueue: put: server returned unexpected node %q", res[1].String)
			}
			q.setTail(n, true)
			if seq >= int64(q.bucketSize)-1 {
				q.seal(ctx, n)
			}
			return itemID(n, seq), nil
		case i < 0 && zkrecipes.IsAmbiguous(err):
			return "", fmt.Errorf("fairqueue: put: %w: %w", ErrOutcomeUnknown, err)
		case i < 0:
			return "", fmt.Errorf("fairqueue: put: %w", err)
		case i == 0 && t.known && errors.Is(err, zk.ErrBadVersion):
			q.setTail(n, false) // sealed: go on in the next one
		case i == 0 && t.known && errors.Is(err, zk.ErrNoNode):
			// Drained and deleted by a consumer. The next bucket goes above
			// it (hi), so this producer's items keep their order.
			if err := q.refreshTail(ctx); err != nil {
				return "", err
			}
		case i == 0 && !t.known && errors.Is(err, zk.ErrNodeExists):
			q.setTail(n, true) // another producer made it first
		case i == 0 && !t.known && errors.Is(err, zk.ErrNoNode):
			if err := ensureDir(ctx, q.s, q.items, q.acl); err != nil {
				return "", err
			}
		case i >= 2 && len(extra) > 0:
			return "", fmt.Errorf("fairqueue: put: %w", err)
		default:
			return "", fmt.Errorf("fairqueue: put into %s: %w", q.bucketPath(n), err)
		}
	}
	return "", fmt.Errorf("fairqueue: put: gave up after %d tries racing other clients", maxPutTries)
}

// setTail records bucket n as the one to put into (open) or as full.
func (q *Queue) setTail(n int64, open bool) {
	q.tailMu.Lock()
	defer q.tailMu.Unlock()
	q.tail.hi = max(q.tail.hi, n)
	if open {
		q.tail.n, q.tail.known = n, true
	} else if q.tail.n == n {
		q.tail.known = false
	}
}

// refreshTail lists the buckets and takes the newest as the tail.
func (q *Queue) refreshTail(ctx context.Context) error {
	type mark struct {
		hi  int64
		err error
	}
	mc := make(chan mark, 1)
	go func() { // sent together with the listing: the client pipelines them
		raw, _, err := get(ctx, q.s, q.items)
		hi, perr := strconv.ParseInt(string(raw), 10, 64)
		if errors.Is(err, zk.ErrNoNode) || (err == nil && perr != nil) {
			hi, err = -1, nil
		}
		mc <- mark{hi, err}
	}()
	bs, err := q.buckets(ctx)
	m := <-mc
	if err == nil {
		err = m.err
	}
	if err != nil {
		return err
	}
	q.tailMu.Lock()
	q.tail.hi = max(q.tail.hi, m.hi)
	defer q.tailMu.Unlock()
	q.tail.known = false
	if len(bs) > 0 {
		last := bs[len(bs)-1]
		if last >= q.tail.hi {
			q.tail.n, q.tail.known = last, true
		}
		q.tail.hi = max(q.tail.hi, last)
	}
	if q.tail.hi < 0 {
		q.tail.hi = -1 // no bucket anywhere: start at 0
		q.tail.n, q.tail.known = 0, false
	}
	return nil
}

// seal marks bucket n full. Every producer whose item reached the size
// seals, so a producer that dies before doing so holds no one up: at worst
// a bucket gets a few items more than its size.
func (q *Queue) seal(ctx context.Context, n int64) {
	err := zkrecipes.Call(ctx, func() error {
		_, err := q.s.Conn().Set(q.bucketPath(n), sealMark, 0)
		return err
	})
	switch {
	case err == nil, errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode):
		q.setTail(n, false)
	default:
		q.log.Debug("fairqueue: could not seal bucket", "bucket", n, "err", err)
	}
}
