package zklock

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/line"
	"github.com/zkrecipes/zkrecipes/internal/owner"
	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// Lease is one holding of a lock, a read or write lock, a semaphore permit
// or a leadership; for a CachedMutex, one critical section of a holding
// (see CachedMutex).
//
// It ends when released (Unlock) or lost. It is lost when its session is
// over (expired, declared lost by the client before the ensemble could
// expire it, or closed), or when another client deletes or writes its node.
// A disconnect that the session survives is not a loss.
//
// What it guarantees: the holder is told of the loss of its session, through
// Done, Err and Context, before any other contender can be granted the lock.
// A node deleted or written by another client is told when the watch fires,
// which is when the next contender hears of it too: not before (do not touch
// contenders' nodes). What it cannot: stop a holder that pauses past that
// point (a long GC, a stopped VM). Make the protected resource refuse such
// a holder with Token (or Fence), or, for writes to ZooKeeper itself, send
// them with Multi.
//
// A write to the node by another client is noticed once the line has
// changed: until then the child watch on the lock's directory stands in for
// the watch on the node, and it fires on deletions, not on data changes.
// Do not write to contenders' nodes.
//
// One goroutine owns the lease's state; the methods are messages to it, and
// are safe for concurrent use.
type Lease struct {
	o     *owner.Owner
	sec   *owner.Section // a CachedMutex's critical section; nil: the lease is the whole holding
	path  string
	token int64
}

// newLease hands a contender that holds to the owner of its lease.
func newLease(s *session.Session, h *line.Held) *Lease {
	return &Lease{o: owner.Start(leaseConfig(s, h)), path: h.Path, token: h.Token}
}

// leaseConfig is what the owner of h's lease starts with.
func leaseConfig(s *session.Session, h *line.Held) owner.Config {
	return owner.Config{
		Session: s, Path: h.Path, DirEv: h.DirEv, Own: h.Own, Reconnect: h.Reconnect,
		Lost: ErrLockLost, Released: ErrReleased, Settled: ErrSettled, Release: releaseNode(h.Path),
		Hold: s.Telemetry().StartHold(h.Recipe),
	}
}

// Token is the fencing token: the Czxid of the lease's node, strictly
// increasing over the successive holders of one lock path, and unique across
// the ensemble. A resource that remembers the highest token it has seen and
// refuses lower ones cannot be written by a holder that lost its lease.
func (l *Lease) Token() int64 { return l.token }

// Path is the full path of this contender's node.
func (l *Lease) Path() string { return l.path }

// Fence is the lease's place in the order of every lease granted on its
// path: {Token, 0} for a Mutex's (and every recipe's but a CachedMutex's),
// {Token, n} for the n-th critical section of a CachedMutex's holding. See
// Fence.
func (l *Lease) Fence() Fence {
	if l.sec != nil {
		return Fence{Holding: l.token, Section: l.sec.N()}
	}
	return Fence{Holding: l.token}
}

// Done is closed when the lease ends: released or lost.
func (l *Lease) Done() <-chan struct{} {
	if l.sec != nil {
		return l.sec.Done()
	}
	return l.o.Done()
}

// Context is cancelled when the lease ends; context.Cause says why
// (ErrReleased, or an error wrapping ErrLockLost). Run the work the lease
// protects under it.
func (l *Lease) Context() context.Context {
	if l.sec != nil {
		return l.sec.Context()
	}
	return l.o.Context()
}

// Err is nil while the lease is held, ErrReleased after Unlock, or an error
// wrapping ErrLockLost and its cause once lost.
func (l *Lease) Err() error {
	if l.sec != nil {
		return l.sec.Err()
	}
	return l.o.Err()
}

// impossibleVersion is a version no node has: the server takes only -1 as
// "any version", so a check of it always fails.
const impossibleVersion = -2

// Guard returns a check to put first in conn.Multi(...): the multi commits
// only while this lease's node exists unchanged, so only while it is held.
// Once the lease has ended it returns a check that always fails. It fences
// writes to ZooKeeper itself; for other resources use Token or Fence.
//
// Built while the lease is held and sent after it ended, the check still
// passes while the node lives: for a CachedMutex lease, while its holding
// is kept for later critical sections. Multi leaves no such gap.
func (l *Lease) Guard() *zk.CheckVersionRequest {
	v := l.o.Version()
	if l.Err() != nil {
		v = impossibleVersion
	}
	return &zk.CheckVersionRequest{Path: l.path, Version: v}
}

// Multi sends ops (*zk.CreateRequest, *zk.SetDataRequest,
// *zk.DeleteRequest, *zk.CheckVersionRequest) in one multi behind the
// lease's Guard, so that it commits only while the lease holds: the
// lease's owner sends it, only while the lease is held, and a later Unlock
// of the lease waits for its outcome. It is not sent if ctx has ended, nor
// once the lease has ended (the error then wraps the lease's Err). If ctx
// ends while it is in flight, Multi returns ctx's cause, and the multi may
// land, inside the lease. A connection dropped under it leaves its outcome
// unknown (zkrecipes.IsAmbiguous); it is not sent again.
//
// The results are those of ops, the Guard's left out. When the Guard's
// check failed, the error wraps ErrLockLost (the lease's node is gone or
// was written: Done tells once its owner has looked); when one of ops
// failed, it is that op's (see the results for which). Do not write the
// lease's own node in ops.
func (l *Lease) Multi(ctx context.Context, ops ...any) ([]zk.MultiResponse, error) {
	res, err := l.o.Multi(ctx, l.sec, ops)
	guard, err := znode.MultiErr(res, err)
	if len(res) > 0 {
		res = res[1:]
	}
	switch {
	case err == nil:
		return res, nil
	case guard == 0:
		return res, fmt.Errorf("zklock: multi guarded by %s: %w: the lease's check failed: %w", l.path, ErrLockLost, err)
	}
	return res, fmt.Errorf("zklock: multi guarded by %s: %w", l.path, err)
}

// Unlock releases the lease: its node is deleted and the next contender in
// line is woken. It returns nil once the node is confirmed gone, and nil
// again if called again; an error wrapping ErrLockLost if the lease had
// been lost; one wrapping ErrSettled after a Leadership's Resign.
//
// Once called, the release is sent and goes on until it is confirmed or
// the session is over, whatever becomes of ctx, even a ctx that had ended
// before the call: ctx bounds only the wait. A lease whose Unlock returned
// ctx's cause is released in the background (across disconnects, too), and
// Done is closed when it is. So `defer lease.Unlock(reqCtx)` releases the
// lock even when the request's context was cancelled.
func (l *Lease) Unlock(ctx context.Context) error { return l.release(ctx, "unlock") }

func (l *Lease) release(ctx context.Context, kind string) error {
	var err error
	if l.sec != nil {
		err = l.o.Park(ctx, l.sec)
	} else {
		err = l.o.Release(ctx, kind)
	}
	if err != nil {
		return fmt.Errorf("zklock: %s %s: %w", kind, l.path, err)
	}
	return nil
}

// releaseMark is written to a held node in the same multi that deletes it.
// The successor, watching that node with getData, is woken by
// NodeDataChanged, which only a holder's release produces (a waiter giving
// up or a session expiring deletes without it), and so knows it holds the
// lock without listing the directory again.
var releaseMark = []byte("released")

// releaseNode releases a lease's node: with the release mark, or, when no
// one has joined or left the line since we listed it (quiet), with a plain
// delete, since no one waits for the mark.
func releaseNode(path string) owner.ReleaseFunc {
	return func(conn *zk.Conn, quiet bool) error {
		var err error
		if quiet {
			err = conn.Delete(path, -1)
		} else {
			_, err = znode.MultiErr(conn.Multi(
				&zk.SetDataRequest{Path: path, Data: releaseMark, Version: -1},
				&zk.DeleteRequest{Path: path, Version: -1},
			))
		}
		if errors.Is(err, zk.ErrNoNode) {
			return owner.ErrGone
		}
		return err
	}
}
