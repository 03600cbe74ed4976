package zklock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/zkrecipes/zkrecipes"
)

// lostBy names the loss an event on our own node means.
func lostBy(s *zkrecipes.Session, ev zk.Event) error {
	switch ev.Type {
	case zk.EventNodeDeleted:
		return fmt.Errorf("%w: our node was deleted by another client", ErrLockLost)
	case zk.EventNodeDataChanged:
		return fmt.Errorf("%w: our node was modified by another client", ErrLockLost)
	case zk.EventNodeChildrenChanged, zk.EventNodeCreated:
		// Not an event of a node's own watch; a bug if it ever comes.
		return fmt.Errorf("%w: unexpected %v on our node's watch", ErrLockLost, ev.Type)
	default:
		<-s.Done() // the client drops watches only when the session is over
		return fmt.Errorf("%w: %w", ErrLockLost, s.Err())
	}
}

// releaseMark is written to a held node in the same multi that deletes it.
// The successor, watching that node with getData, is woken by
// NodeDataChanged, which only a holder's release produces (a waiter giving up
// or a session expiring deletes without it), and so knows it holds the lock
// without listing the directory again.
var releaseMark = []byte("released")

// Lease is one holding of a lock, a read or write lock, a semaphore permit or
// a leadership. It ends when released or lost: lost when its session is over
// (expired, declared lost by the client before the ensemble could expire it,
// or closed) or when its node is deleted by another client. A change to the
// node's data by another client is a loss too, noticed once the line has
// changed: until then the child watch on the lock's directory stands in for
// the watch on the node, and it fires on deletions, not on data changes.
//
// The holder is told of a loss through Done, Err and Context before any other
// contender can be granted the lock. No lease can stop a holder that pauses
// past that point (a long GC, a stopped VM): use Token or Guard to make the
// protected resource refuse it.
type Lease struct {
	s     *zkrecipes.Session
	path  string
	token int64
	own   *ownWatch

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	version int32         // our node's data version: 0 unless the holder set it
	err     error         // nil while held
	sent    atomic.Bool   // a release was sent; it may have been applied
	unlock  sync.Mutex    // one Unlock at a time
	write   sync.Mutex    // one setData at a time
	inUse   chan struct{} // closed when the Unlock in flight returns
	stop    chan struct{} // tells the monitor to exit
	exited  chan struct{}
}

func newLease(s *zkrecipes.Session, path string, token int64, own *ownWatch) *Lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &Lease{s: s, path: path, token: token, ctx: ctx, cancel: cancel, own: own,
		stop: make(chan struct{}), exited: make(chan struct{})}
	go l.monitor(own)
	return l
}

// Token is the fencing token: the Czxid of the lease's node, strictly
// increasing over the successive holders of one lock path, and unique across
// the ensemble. A resource that remembers the highest token it has seen and
// refuses lower ones cannot be written by a holder that lost its lease.
func (l *Lease) Token() int64 { return l.token }

// Path is the full path of this contender's node.
func (l *Lease) Path() string { return l.path }

// Done is closed when the lease ends: released or lost.
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// Context is cancelled when the lease ends; context.Cause says why (ErrReleased,
// or an error wrapping ErrLockLost). Run the work the lease protects under it.
func (l *Lease) Context() context.Context { return l.ctx }

// Err is nil while the lease is held, ErrReleased after Unlock, or an error
// wrapping ErrLockLost and its cause once lost.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Guard returns a check to put first in conn.Multi(...): the multi commits
// only while this lease's node exists unchanged, so only while it is held.
// It fences writes to ZooKeeper itself; for other resources use Token.
func (l *Lease) Guard() *zk.CheckVersionRequest {
	return &zk.CheckVersionRequest{Path: l.path, Version: l.dataVersion()}
}

// end records why the lease ended; the first reason wins.
func (l *Lease) end(why error) {
	l.mu.Lock()
	if l.err == nil {
		l.err = why
		l.cancel(why)
		close(l.stop)
	}
	l.mu.Unlock()
}

// Unlock releases the lease: its node is deleted and the next contender in
// line is woken. It returns nil once the node is confirmed gone, and nil
// again if called again. If the lease had been lost, it returns that error,
// wrapping ErrLockLost. If the outcome is unknown (connection trouble, ctx
// ended), it returns an error and the lease is still held as far as anyone
// can tell: call Unlock again, or let the session end.
func (l *Lease) Unlock(ctx context.Context) error {
	l.unlock.Lock()
	defer l.unlock.Unlock()
	if err := l.Err(); err != nil {
		if errors.Is(err, ErrReleased) {
			return nil
		}
		return err
	}
	// The monitor waits on inUse for this attempt's answer, so the lease
	// must have ended (or not) before inUse closes.
	inUse := make(chan struct{})
	defer close(inUse)
	l.mu.Lock()
	retry := l.sent.Swap(true)
	l.inUse = inUse
	l.mu.Unlock()

	// If no one joined the line since we listed it, no one waits for our
	// signal: a plain delete will do.
	quiet := l.own.quiet.Load()
	err := zkrecipes.Call(ctx, func() error {
		if quiet {
			return l.s.Conn().Delete(l.path, -1)
		}
		res, err := l.s.Conn().Multi(
			&zk.SetDataRequest{Path: l.path, Data: releaseMark, Version: -1},
			&zk.DeleteRequest{Path: l.path, Version: -1},
		)
		return multiErr(res, err)
	})
	switch {
	case err == nil, errors.Is(err, zk.ErrNoNode) && retry:
		l.end(ErrReleased)
	case errors.Is(err, zk.ErrNoNode):
		l.end(fmt.Errorf("%w: our node was deleted by another client", ErrLockLost))
	default:
		if serr := l.s.Err(); serr != nil {
			// The session is over, and the node with it.
			l.end(fmt.Errorf("%w: %w", ErrLockLost, serr))
		} else {
			return fmt.Errorf("zklock: unlock %s: %w", l.path, err)
		}
	}
	if err := l.Err(); !errors.Is(err, ErrReleased) {
		return err
	}
	return nil
}

// monitor ends the lease when it is lost: the session is over, or our node
// was deleted or changed by anyone but its holder.
func (l *Lease) monitor(own *ownWatch) {
	defer close(l.exited)
	select {
	case <-own.ready:
	case <-l.s.Done():
	}
	if own.err != nil {
		l.end(own.loss(own.err))
		return
	}
	for {
		select {
		case e := <-own.ev:
			if l.event(own, e) {
				return
			}
		case <-l.s.Done():
			l.end(fmt.Errorf("%w: %w", ErrLockLost, l.s.Err()))
			return
		case <-l.stop:
			return
		}
	}
}

// event handles an event on our node's watch and reports whether the lease
// has ended. The directory changing, or the holder's own write (election's
// Proclaim), is no loss: the watch is then set on the node again and its
// version compared with the holder's writes.
func (l *Lease) event(own *ownWatch, e zk.Event) bool {
	if l.settled() {
		return true
	}
	// pending: a release was sent, and its Unlock gave up without an answer.
	pending := l.sent.Load()
	if !pending && e.Type != zk.EventNodeDataChanged && !(own.onDir && e.Type == zk.EventNodeChildrenChanged) {
		l.end(lostBy(l.s, e))
		return true
	}
	err := own.onNode(l.ctx)
	switch {
	case err == nil && own.stat.Version <= l.dataVersion():
		return false
	case err == nil:
		l.end(fmt.Errorf("%w: our node was modified by another client", ErrLockLost))
	case errors.Is(err, ErrLockLost) && (pending || l.settled()):
		// Gone after our release was sent: that release. (end keeps the
		// first reason, if Unlock gave one.)
		l.end(ErrReleased)
	default:
		l.end(err)
	}
	return true
}

// settled waits for an Unlock in flight, whose answer decides, and reports
// whether the lease has ended.
func (l *Lease) settled() bool {
	l.mu.Lock()
	inUse := l.inUse
	l.mu.Unlock()
	if inUse != nil {
		select {
		case <-inUse:
		case <-l.stop:
		}
	}
	return l.Err() != nil
}

func (l *Lease) dataVersion() int32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.version
}

// setData changes the data of the lease's node, as its holder: the watch on
// the node then takes the change for the holder's own, and Guard checks the
// new version.
func (l *Lease) setData(ctx context.Context, data []byte) error {
	l.write.Lock() // one write at a time, so versions go up in the order sent
	defer l.write.Unlock()
	if err := l.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	v := l.version
	l.version = v + 1
	l.mu.Unlock()
	err := zkrecipes.Call(ctx, func() error {
		_, err := l.s.Conn().Set(l.path, data, v)
		return err
	})
	switch {
	case errors.Is(err, zk.ErrBadVersion):
		// Someone else wrote our node: that is a loss, which the monitor,
		// comparing versions, might take for this write.
		l.end(fmt.Errorf("%w: our node was modified by another client", ErrLockLost))
	case errors.Is(err, zk.ErrNoNode):
		l.end(fmt.Errorf("%w: our node was deleted by another client", ErrLockLost))
	case err != nil && !zkrecipes.IsAmbiguous(err):
		l.mu.Lock()
		l.version = v
		l.mu.Unlock()
	case err != nil && l.s.Err() == nil:
		// The write may or may not have landed: learn the version it left,
		// so Guard and the monitor stay right either way.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		var st *zk.Stat
		if zkrecipes.Call(rctx, func() (err error) { _, st, err = l.s.Conn().Get(l.path); return err }) == nil {
			l.mu.Lock()
			l.version = st.Version
			l.mu.Unlock()
		}
	}
	return err
}

// multiErr returns the first error of a multi.
func multiErr(res []zk.MultiResponse, err error) error {
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Error != nil {
			return r.Error
		}
	}
	return nil
}
