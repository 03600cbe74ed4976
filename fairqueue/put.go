package fairqueue

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// sealMark is the data of a full bucket. A put checks that its bucket's data
// version is still 0, so no item lands in a bucket once it is sealed, and
// that the high mark has not moved since it saw the bucket as the newest,
// so none lands in a bucket once a newer one exists: every item of bucket n
// is older than every item of bucket n+1. (A newer bucket can be made
// before its predecessor is sealed: by a producer whose look at the queue
// missed the predecessor, made between its two reads.)
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
	// stale a producer's idea; and a put into bucket n checks it, so that
	// no item lands in n once a newer bucket exists.
	markVersion int32
}

// maxPutTries bounds the retries of a put that races other producers and
// consumers (sealed or drained buckets).
const maxPutTries = 50

// MaxBatch is the most items one PutMany takes.
const MaxBatch = 1000

// PutOption changes one Put.
type PutOption func(*putOptions)

type putOptions struct {
	key   string
	delay time.Duration
	errs  []error
}

// WithKey makes a Put safe to retry: while an item put with key is in the
// queue (put and not yet acked or moved to the dead letters), another Put
// with the same key adds nothing and returns that item's id. So a producer
// whose Put returned ErrOutcomeUnknown puts again with the same key, and
// never creates a second item. The key becomes part of node names: at most
// 200 bytes of printable UTF-8, without '/' or '.'.
func WithKey(key string) PutOption {
	return func(o *putOptions) {
		if err := checkKey(key); err != nil {
			o.errs = append(o.errs, err)
			return
		}
		o.key = key
	}
}

// WithDelay keeps the item out of consumers' reach until d has passed (d >
// 0): the producer's clock says when it is due, the dispatcher's when that
// time has come (keep clocks in sync). Until then it waits in delayed/ and
// Put returns the id of that entry, "d-..."; when it is due, the queue's
// dispatcher moves it to the end of the queue, where it gets its queue id
// (Job.ID), so that no consumer ever sees ids go backwards.
func WithDelay(d time.Duration) PutOption {
	return func(o *putOptions) {
		if d <= 0 {
			o.errs = append(o.errs, fmt.Errorf("%w: delay %v must be positive", zkrecipes.ErrInvalidArgument, d))
			return
		}
		o.delay = d
	}
}

// Put appends data to the queue and returns the new item's id. Ids sort in
// queue order, and are never reused while the queue holds anything (an item,
// a ticket, a consumer's inbox or a dead letter). Concurrent Puts of one
// Queue share multis (group commit): one that comes while a multi is out
// goes with the next, and an item whose key is taken is put again on its
// own, without failing the others.
//
// If the outcome is unknown (the connection dropped, ctx ended mid-call),
// the error wraps ErrOutcomeUnknown: the item may have been added, and Put
// does not retry on its own, so that nothing is duplicated silently. Put
// with WithKey to make a retry safe.
func (q *Queue) Put(ctx context.Context, data []byte, opts ...PutOption) (string, error) {
	var o putOptions
	for _, opt := range opts {
		opt(&o)
	}
	if len(data) > zkrecipes.MaxDataSize {
		o.errs = append(o.errs, fmt.Errorf("%w: %d bytes, the limit is %d",
			zkrecipes.ErrDataTooLarge, len(data), zkrecipes.MaxDataSize))
	}
	if err := errors.Join(o.errs...); err != nil {
		return "", fmt.Errorf("fairqueue: put: %w", err)
	}
	if data == nil {
		data = []byte{}
	}
	var id string
	var err error
	if o.delay > 0 {
		id, err = q.putDelayed(ctx, data, o.key, time.Now().Add(o.delay))
	} else {
		id, err = q.putOne(ctx, putItem{data, o.key})
	}
	if err != nil {
		return "", fmt.Errorf("fairqueue: put: %w", err)
	}
	return id, nil
}

// putOne puts one item with the Puts that come at the same time, in one
// multi (see group). An item that fails alone (its key is taken, by an item
// put before) is put on its own: its Put finds the item with that key.
func (q *Queue) putOne(ctx context.Context, it putItem) (string, error) {
	rs, inFlight, err := q.puts.Run(ctx, it)
	var r putResult
	if err == nil {
		r = rs[0]
	}
	switch {
	case err != nil && inFlight != nil:
		return "", fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	case err != nil:
		return "", err // nothing sent
	case r.err == nil:
		return r.id, nil
	case !errors.As(r.err, new(keyTaken)):
		return "", r.err
	}
	ids, err := q.put(ctx, []putItem{it}, false)
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// putItem is an item to put, with its producer's key ("" for none).
type putItem struct {
	data []byte
	key  string
}

type putResult struct {
	id  string
	err error
}

// takePuts says how many of the pending Puts fit in one multi.
func takePuts(pending []putItem) int {
	size := 0
	for i, it := range pending {
		size += len(it.data) + 2*len(it.key) + 200 // the data, the key's node, and the ops' paths and headers
		if i > 0 && (size > zkrecipes.MaxDataSize || i == MaxBatch) {
			return i
		}
	}
	return len(pending)
}

// putBatch puts a batch of Puts in one multi, and again without an item
// that failed alone, which fails alone; a failure of the whole (the
// connection, the session) is every item's.
func (q *Queue) putBatch(batch []putItem) []putResult {
	out := make([]putResult, len(batch))
	left := make([]int, len(batch)) // the items not settled yet
	for i := range left {
		left[i] = i
	}
	for len(left) > 0 {
		items := make([]putItem, len(left))
		for j, i := range left {
			items[j] = batch[i]
		}
		ids, err := q.put(context.Background(), items, false)
		var kt keyTaken
		if errors.As(err, &kt) {
			out[left[kt.i]].err = err
			left = append(left[:kt.i], left[kt.i+1:]...)
			continue
		}
		for j, i := range left {
			out[i].err = err
			if err == nil {
				out[i].id = ids[j]
			}
		}
		break
	}
	return out
}

// keyTaken: the key of the batch's item i is taken (by an item put before
// and not acked yet).
type keyTaken struct{ i int }

func (k keyTaken) Error() string { return "key taken" }

// PutMany appends the items, in order, all or none, in one round trip
// (ZooKeeper's multi), and returns their ids. At most MaxBatch items, and
// at most zkrecipes.MaxDataSize bytes in all: one request carries them.
// Errors as for Put.
func (q *Queue) PutMany(ctx context.Context, items [][]byte) ([]string, error) {
	total := 0
	for _, d := range items {
		total += len(d) + len(q.items) + 40 // the data, and the path and header of its create
	}
	switch {
	case len(items) == 0:
		return nil, fmt.Errorf("fairqueue: put many: %w: no items", zkrecipes.ErrInvalidArgument)
	case len(items) > MaxBatch:
		return nil, fmt.Errorf("fairqueue: put many: %w: %d items, the limit is %d", zkrecipes.ErrInvalidArgument, len(items), MaxBatch)
	case total > zkrecipes.MaxDataSize:
		return nil, fmt.Errorf("fairqueue: put many: %w: %d items take some %d bytes in one request, the limit is %d",
			zkrecipes.ErrDataTooLarge, len(items), total, zkrecipes.MaxDataSize)
	}
	batch := make([]putItem, len(items))
	for i, d := range items {
		if d == nil {
			d = []byte{}
		}
		batch[i] = putItem{data: d}
	}
	ids, err := q.put(ctx, batch, false)
	if err != nil {
		return nil, fmt.Errorf("fairqueue: put many: %w", err)
	}
	return ids, nil
}

// put appends items to the newest bucket in one multi, all or none. For an
// item with a key, the multi also creates keys/<key> (or, when keyExists,
// moves it to the bucket: a delayed item coming due); a key taken is a
// keyTaken error, unless the batch is one item: then put returns the id of
// the item that holds the key. Extra ops (Requeue's delete of the dead
// letter, a promotion's delete of the delayed entry) ride along.
func (q *Queue) put(ctx context.Context, items []putItem, keyExists bool, extra ...any) ([]string, error) {
	if err := q.s.Err(); err != nil {
		return nil, err
	}
	noBlob := false
	for range maxPutTries {
		if err := ctx.Err(); err != nil {
			return nil, context.Cause(ctx) // nothing sent
		}
		q.tailMu.Lock()
		t := q.tail
		q.tailMu.Unlock()
		if !t.read {
			// No idea yet: look at the buckets once.
			if err := q.refreshTail(ctx); err != nil {
				return nil, err
			}
			q.tailMu.Lock()
			t = q.tail
			q.tailMu.Unlock()
		}
		if !t.known && t.markVersion < 0 {
			// No queue directory to hold the high mark: make it (and
			// items/, which this put fills at once), then read it.
			if err := znode.EnsureDir(ctx, q.s, q.items, q.acl); err != nil {
				return nil, err
			}
			if err := q.refreshTail(ctx); err != nil {
				return nil, err
			}
			continue
		}
		var ops []any
		n := t.n
		if t.known {
			ops = append(ops,
				&zk.CheckVersionRequest{Path: q.bucketPath(n), Version: 0},
				&zk.CheckVersionRequest{Path: q.dir, Version: t.markVersion})
		} else {
			// A new bucket is born with its first items, so no consumer
			// ever sees it empty and deletes it under the producer, and with
			// the high mark moved up, conditional on the mark we read.
			n = t.hi + 1
			ops = append(ops,
				&zk.SetDataRequest{Path: q.dir, Data: []byte(strconv.FormatInt(n, 10)), Version: t.markVersion},
				&zk.CreateRequest{Path: q.bucketPath(n), Data: []byte{}, Acl: q.acl},
				&zk.CreateRequest{Path: q.blobDir(n), Data: []byte{}, Acl: q.acl})
		}
		shared := len(ops)
		blob, blobOp := "", -1
		if !noBlob && blobbable(items, extra) {
			blob, blobOp = newTag(), len(ops)
			ops = append(ops, &zk.CreateRequest{Path: q.blobDir(n) + "/" + blobPrefix + blob, Data: encodeBlob(items), Acl: q.acl})
		}
		itemOp := make([]int, len(items))
		keyOf := map[int]int{} // a key's op -> its item
		for j, it := range items {
			itemOp[j] = len(ops)
			if blob != "" {
				ops = append(ops, &zk.CreateRequest{Path: q.bucketPath(n) + "/" + blobItemBase(blob, j), Data: []byte{}, Acl: q.acl, Flags: zk.FlagSequence})
				continue
			}
			if it.key == "" && len(it.data) <= inlineMax {
				ops = append(ops, &zk.CreateRequest{Path: q.bucketPath(n) + "/" + inlineItemBase(it.data), Data: []byte{}, Acl: q.acl, Flags: zk.FlagSequence})
				continue
			}
			ops = append(ops, &zk.CreateRequest{Path: q.bucketPath(n) + "/" + itemBase(it.key), Data: it.data, Acl: q.acl, Flags: zk.FlagSequence})
			if it.key == "" {
				continue
			}
			keyOf[len(ops)] = j
			if keyExists {
				ops = append(ops, &zk.SetDataRequest{Path: q.keys + "/" + it.key, Data: []byte(bucketName(n)), Version: -1})
			} else {
				ops = append(ops, &zk.CreateRequest{Path: q.keys + "/" + it.key, Data: []byte(bucketName(n)), Acl: q.acl})
			}
		}
		after := len(ops)
		ops = append(ops, extra...)

		res, err := znode.Do(ctx, func() ([]zk.MultiResponse, error) { return q.s.Conn().Multi(ops...) })
		i, err := znode.MultiErr(res, err)
		keyItem, isKey := keyOf[i]
		switch {
		case err == nil:
			ids := make([]string, len(items))
			var seq int64
			for j := range items {
				var ok bool
				if seq, _, ok = parseItem(path.Base(res[itemOp[j]].String)); !ok {
					return nil, fmt.Errorf("server returned unexpected node %q", res[itemOp[j]].String)
				}
				ids[j] = itemID(n, seq)
			}
			if t.known {
				q.setTail(n, true)
			} else {
				q.madeTail(n, t.markVersion)
			}
			q.s.Telemetry().Put(len(items))
			if seq >= int64(q.bucketSize)-1 {
				q.seal(ctx, n)
			}
			return ids, nil
		case i < 0 && zkrecipes.IsAmbiguous(err):
			return nil, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
		case i < 0:
			return nil, err
		case i == blobOp && errors.Is(err, zk.ErrNoNode):
			noBlob = true // a bucket made with no blob directory (an older producer)
		case i >= after:
			return nil, err // an extra op failed
		case isKey && errors.Is(err, zk.ErrNodeExists) && len(items) > 1:
			return nil, keyTaken{keyItem}
		case isKey && errors.Is(err, zk.ErrNodeExists):
			// Put with this key already, and not yet acked: that item.
			id, err := q.keyed(ctx, items[keyItem].key)
			if err != nil {
				return nil, err
			}
			if id == "" {
				continue // acked meanwhile: put again
			}
			return []string{id}, nil
		case isKey && errors.Is(err, zk.ErrNoNode) && keyExists:
			keyExists = false // gone, which only its item's removal does: make it again
		case isKey && errors.Is(err, zk.ErrNoNode):
			if err := znode.EnsureDir(ctx, q.s, q.keys, q.acl); err != nil {
				return nil, err
			}
		case t.known && i == 0 && errors.Is(err, zk.ErrBadVersion):
			q.setTail(n, false) // sealed: go on in the next one
		case t.known && i == 0 && errors.Is(err, zk.ErrNoNode),
			t.known && i == 1,
			!t.known && i == 0 && errors.Is(err, zk.ErrBadVersion):
			// Drained and deleted by a consumer, or another producer made
			// a newer bucket (the high mark moved): learn the newest.
			if err := q.refreshTail(ctx); err != nil {
				return nil, err
			}
		case !t.known && i == 1 && errors.Is(err, zk.ErrNodeExists):
			q.setTail(n, true) // made already: put into it
		case !t.known && i < shared && errors.Is(err, zk.ErrNoNode):
			// No items/ yet (i == 1; this put fills it at once), or the
			// queue directory was reaped since we looked (i == 0).
			if i == 1 {
				if err := znode.EnsureDir(ctx, q.s, q.items, q.acl); err != nil {
					return nil, err
				}
			}
			if err := q.refreshTail(ctx); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("put into %s: %w", q.bucketPath(n), err)
		}
	}
	return nil, fmt.Errorf("gave up after %d tries racing other clients", maxPutTries)
}

// blobbable says whether items go in one blob: several, none with a key
// (keyed finds an item by its name), nothing riding along (a promotion or
// a Requeue), small in all (a consumer reads the whole blob for any item
// of it), and one at least too large for its name (items that all hold
// their payloads in their names need no read at all).
func blobbable(items []putItem, extra []any) bool {
	if len(items) < 2 || len(extra) > 0 {
		return false
	}
	total, named := 0, true
	for _, it := range items {
		if it.key != "" {
			return false
		}
		total += len(it.data)
		named = named && len(it.data) <= inlineMax
	}
	return !named && total <= blobMax
}

// blobMax bounds a blob's payloads.
const blobMax = 64 << 10

// keyed finds the item put with key: keys/<key> names its bucket (or says
// it is delayed), and its node's name holds the key. "" when there is none
// any more.
func (q *Queue) keyed(ctx context.Context, key string) (string, error) {
	n, err := znode.Get(ctx, q.s, q.keys+"/"+key)
	if errors.Is(err, zk.ErrNoNode) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	where := string(n.Data)
	if where == "delayed" {
		names, err := znode.Children(ctx, q.s, q.delayed)
		if err != nil {
			return "", err
		}
		for _, name := range names {
			if _, k, ok := parseDelayed(name); ok && k == key {
				return name, nil
			}
		}
		return "", nil
	}
	b, ok := parseBucket(where)
	if !ok {
		return "", fmt.Errorf("%s/%s holds %q, not a bucket", q.keys, key, where)
	}
	names, err := znode.Children(ctx, q.s, q.bucketPath(b))
	if err != nil {
		return "", err
	}
	for _, name := range names {
		if seq, k, ok := parseItem(name); ok && k == key {
			return itemID(b, seq), nil
		}
	}
	return "", nil
}

// madeTail records bucket n, just made by moving the high mark up from
// the version markVersion, as the one to put into; unless the tail was
// looked at again meanwhile.
func (q *Queue) madeTail(n int64, markVersion int32) {
	q.tailMu.Lock()
	defer q.tailMu.Unlock()
	if q.tail.markVersion != markVersion {
		return
	}
	q.tail.n, q.tail.known = n, true
	q.tail.hi, q.tail.markVersion = n, markVersion+1
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
	bs, err := q.listBuckets(ctx)
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
