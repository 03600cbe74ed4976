package zklock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/go-zookeeper/zk"
	"github.com/zkrecipes/zkrecipes"
)

// ownWatch watches our own node, to learn that someone else deleted or
// changed it: a lease must end then.
//
// It starts, when it can, with the child watch that the listing taken right
// behind our create set on the directory: until something in the directory
// changes, nothing can have happened to our node, so an uncontended lock
// spends no request of its own on it. At the first change it moves onto the
// node itself, with a getData watch. Without such a listing, the getData is
// sent as soon as the node exists and awaited only when needed.
//
// An ownWatch is used by one goroutine at a time: the acquirer, then the
// lease's monitor. Only quiet is read by others.
type ownWatch struct {
	s     *zkrecipes.Session
	path  string
	ready chan struct{} // closed once ev, stat and err are set
	ev    <-chan zk.Event
	stat  *zk.Stat // nil while on the directory
	err   error
	onDir bool // ev is the directory's child watch

	// quiet: the directory's watch has not fired, so no one joined the line
	// behind us (or left it) since we listed. The release then needs no
	// wake-up signal for a successor (see Lease.Unlock).
	quiet atomic.Bool
}

// watchOwn starts watching our node: on the directory if the listing taken
// with the create set a watch there, else on the node.
func (e *entry) watchOwn() *ownWatch {
	w := &ownWatch{s: e.s, path: e.path, ready: make(chan struct{})}
	if e.dirEv != nil {
		w.ev, w.onDir = e.dirEv, true
		w.quiet.Store(true)
		close(w.ready)
		return w
	}
	go func() {
		_, w.stat, w.ev, w.err = e.s.Conn().GetW(e.path)
		close(w.ready)
	}()
	return w
}

// loss turns an error about our node into the loss it means.
func (w *ownWatch) loss(err error) error {
	if errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("%w: our node was deleted by another client", ErrLockLost)
	}
	if serr := w.s.Err(); serr != nil {
		return fmt.Errorf("%w: %w", ErrLockLost, serr)
	}
	return err
}

// onNode moves the watch from the directory onto our node.
func (w *ownWatch) onNode(ctx context.Context) error {
	w.onDir = false
	w.quiet.Store(false)
	var st *zk.Stat
	var ev <-chan zk.Event
	err := zkrecipes.Call(ctx, func() (err error) {
		_, st, ev, err = w.s.Conn().GetW(w.path)
		return err
	})
	if err != nil {
		w.ev = nil
		return w.loss(err)
	}
	w.stat, w.ev = st, ev
	return nil
}

// await waits for the watch to be set and returns our node's Stat.
func (w *ownWatch) await(ctx context.Context) (*zk.Stat, error) {
	select {
	case <-w.ready:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	if w.err != nil {
		return nil, w.loss(w.err)
	}
	if w.stat == nil {
		if err := w.onNode(ctx); err != nil {
			return nil, err
		}
	}
	return w.stat, nil
}

// handle takes an event of the watch: nil if it only meant that the
// directory changed (the watch is then on our node), or the loss it means.
func (w *ownWatch) handle(ctx context.Context, ev zk.Event) error {
	if w.onDir && ev.Type == zk.EventNodeChildrenChanged {
		return w.onNode(ctx)
	}
	return lostBy(w.s, ev)
}

// fired handles, without blocking, the events already delivered. Events
// reach the client in the order the server made them, so a change to our
// node made before the event being handled is visible here.
func (w *ownWatch) fired(ctx context.Context) error {
	select {
	case <-w.ready:
	default:
		return nil // not set yet: token's await will find out
	}
	if w.err != nil {
		return w.loss(w.err)
	}
	for {
		select {
		case ev := <-w.ev:
			if err := w.handle(ctx, ev); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}
