package fairqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// DeadLetter is an item that was delivered WithMaxAttempts times without
// an Ack. It stays in the queue's dead/ directory until Requeue.
type DeadLetter struct {
	ID       string // the id the item had in the queue
	Data     []byte
	Attempts int // deliveries before it was moved
}

// A dead letter's node holds "<attempts>\n" and the payload. The header is a
// few bytes, inside the room MaxDataSize leaves in a request.
func deadData(attempts int, data []byte) []byte {
	return append([]byte(strconv.Itoa(attempts)+"\n"), data...)
}

func parseDead(id string, raw []byte) (DeadLetter, error) {
	head, body, ok := bytes.Cut(raw, []byte("\n"))
	n, err := strconv.Atoi(string(head))
	if !ok || err != nil {
		return DeadLetter{}, fmt.Errorf("fairqueue: dead letter %s has no attempts header", id)
	}
	return DeadLetter{ID: id, Data: body, Attempts: n}, nil
}

// buryOps moves an item to dead/ in one multi: create the dead letter,
// delete the item (version-checked) and its key, after the given ops (the
// ticket's delete).
func (q *Queue) buryOps(id, item, key string, version int32, attempts int, data []byte, claimOps ...any) []any {
	ops := append(claimOps,
		&zk.CreateRequest{Path: q.dead + "/" + id, Data: deadData(attempts, data), Acl: q.acl},
		&zk.DeleteRequest{Path: item, Version: version})
	if key != "" {
		ops = append(ops, &zk.DeleteRequest{Path: q.keys + "/" + key, Version: -1})
	}
	return ops
}

// DeadLetters lists the dead letters, oldest id first. The dead/ directory
// is one flat directory: it is meant to stay small (one listing must fit in
// 1 MiB: some tens of thousands of dead letters).
func (q *Queue) DeadLetters(ctx context.Context) ([]DeadLetter, error) {
	ids, err := znode.Children(ctx, q.s, q.dead)
	if err != nil {
		return nil, fmt.Errorf("fairqueue: dead letters: %w", err)
	}
	slices.Sort(ids)
	out := make([]DeadLetter, 0, len(ids))
	for _, id := range ids {
		n, err := znode.Get(ctx, q.s, q.dead+"/"+id)
		if errors.Is(err, zk.ErrNoNode) {
			continue // requeued meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("fairqueue: read dead letter %s: %w", id, err)
		}
		d, err := parseDead(id, n.Data)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// Requeue puts a dead letter back at the end of the queue, as a new item
// (a new id, attempts counted from 0), and removes the dead letter, in one
// multi: it is never both or neither. It returns the new item's id. An
// unknown id gives ErrNoDeadLetter; an unknown outcome gives
// ErrOutcomeUnknown, as for Put (the new id is then unknown too: DeadLetters
// tells whether the dead letter is still there).
func (q *Queue) Requeue(ctx context.Context, id string) (newID string, err error) {
	if _, _, err := parseID(id); err != nil {
		return "", fmt.Errorf("fairqueue: requeue: %w", err)
	}
	p := q.dead + "/" + id
	n, err := znode.Get(ctx, q.s, p)
	if errors.Is(err, zk.ErrNoNode) {
		return "", fmt.Errorf("fairqueue: requeue: %w: %s", ErrNoDeadLetter, id)
	}
	if err != nil {
		return "", fmt.Errorf("fairqueue: requeue %s: %w", id, err)
	}
	d, err := parseDead(id, n.Data)
	if err != nil {
		return "", err
	}
	ids, err := q.put(ctx, []putItem{{data: d.Data}}, false, &zk.DeleteRequest{Path: p, Version: n.Stat.Version})
	switch {
	case errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion):
		return "", fmt.Errorf("fairqueue: requeue: %w: %s (requeued by another client?)", ErrNoDeadLetter, id)
	case err != nil:
		return "", fmt.Errorf("fairqueue: requeue %s: %w", id, err)
	}
	return ids[0], nil
}
