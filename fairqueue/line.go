package fairqueue

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// The consumers' line is zklock's Mutex recipe: each waiting consumer has an
// EPHEMERAL|SEQUENCE node "_zkr_<guid>-take-<seq>" in line/, watches only the
// node just ahead of it, and looks at the items only once it is first. The
// GUID finds our node again after a create whose reply was lost, as in
// zklock (internal/znode).

// place is our node in the line.
type place struct {
	name string
	path string
	seq  int64
	left bool // deleted already, with the claim
}

// lineSeq is the sequence number at the end of a line node's name.
func lineSeq(name string) (int64, bool) {
	i := strings.LastIndex(name, lineMarker)
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(name[i+len(lineMarker):], 10, 32)
	return n, err == nil
}

// join puts us at the end of the line.
func (q *Queue) join(ctx context.Context) (*place, error) {
	var guid [16]byte
	if _, err := rand.Read(guid[:]); err != nil {
		return nil, err
	}
	prefix := zkrecipes.NodePrefix + hex.EncodeToString(guid[:]) + lineMarker
	for attempt := 0; ; attempt++ {
		if err := q.s.Err(); err != nil {
			return nil, fmt.Errorf("fairqueue: take: %w", err)
		}
		p, err := znode.Do(ctx, func() (string, error) {
			return q.s.Conn().Create(q.line+"/"+prefix, nil, zk.FlagEphemeralSequential, q.acl)
		})
		switch {
		case err == nil:
			return newPlace(q.line, p)
		case errors.Is(err, zk.ErrNoNode) && attempt < 8:
			if err := ensureDir(ctx, q.s, q.line, q.acl); err != nil {
				return nil, err
			}
		case zkrecipes.IsAmbiguous(err) && ctx.Err() == nil && attempt < 8:
			p, found, ferr := znode.FindOwn(ctx, q.s, q.line, prefix)
			if ferr != nil {
				q.s.Cleanup(znode.DeletePrefix(q.line, prefix))
				return nil, fmt.Errorf("fairqueue: join line: %w", ferr)
			}
			if found {
				return newPlace(q.line, p)
			}
		case zkrecipes.IsAmbiguous(err):
			// ctx ended mid-create: the node may exist; remove it.
			q.s.Cleanup(znode.DeletePrefix(q.line, prefix))
			return nil, fmt.Errorf("fairqueue: join line: %w", err)
		default:
			return nil, fmt.Errorf("fairqueue: join line: %w", err)
		}
	}
}

func newPlace(dir, p string) (*place, error) {
	name := p[len(dir)+1:]
	seq, ok := lineSeq(name)
	if !ok {
		return nil, fmt.Errorf("fairqueue: server returned unexpected node %q", p)
	}
	return &place{name: name, path: p, seq: seq}, nil
}

// awaitTurn returns once we are first in line.
func (q *Queue) awaitTurn(ctx context.Context, me *place) error {
	for {
		names, err := children(ctx, q.s, q.line)
		if err != nil {
			return err
		}
		type node struct {
			name string
			seq  int64
		}
		var line []node
		for _, name := range names {
			if seq, ok := lineSeq(name); ok {
				line = append(line, node{name, seq})
			}
		}
		slices.SortFunc(line, func(a, b node) int {
			return cmp.Or(cmp.Compare(a.seq, b.seq), strings.Compare(a.name, b.name))
		})
		i := slices.IndexFunc(line, func(n node) bool { return n.name == me.name })
		switch {
		case i < 0:
			return fmt.Errorf("fairqueue: take: our place in line %s vanished", me.path)
		case i == 0:
			return nil
		}
		w, err := q.s.WatchNode(ctx, q.line+"/"+line[i-1].name)
		if err != nil {
			return err
		}
		ev, err := w.Wait(ctx)
		if err != nil {
			return err
		}
		// Lower sequence numbers can only go away, never appear: when the
		// only one ahead of us goes, we are first without listing again.
		if ev == zk.EventNodeDeleted && i == 1 {
			return nil
		}
	}
}

// leave deletes our node, which wakes the consumer behind us. It does not
// use the caller's ctx, which may be what ended: a failed delete is retried
// in the background while the session lives.
func (q *Queue) leave(me *place) {
	if me.left {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := zkrecipes.Call(ctx, func() error { return zkrecipes.DeleteNode(me.path)(q.s.Conn()) })
	if err == nil {
		return
	}
	if err := q.s.Cleanup(zkrecipes.DeleteNode(me.path)); err != nil {
		q.log.Warn("fairqueue: could not leave the line yet", "path", me.path, "err", err)
	}
}
