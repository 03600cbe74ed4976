package zklock

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/zkrecipes/zkrecipes"
)

// electMarker names an election's contender nodes: "_zkr_<guid>-elect-<seq>".
// It differs from lockMarker so that a Mutex and an Election given the same
// path by mistake never take each other's nodes for their own.
const electMarker = "-elect-"

var electName = regexp.MustCompile(`-elect-(-\d{9,10}|\d{10})$`)

// Election is leader election: ZooKeeper's recipe, in the shape of etcd's
// concurrency.Election. Each campaigner puts an ephemeral sequential node in
// the election's directory; the lowest node leads, with that node's Czxid as
// its term. A campaigner watches only the node just ahead of its own, so a
// change of leader wakes one campaigner, not all of them.
//
// An Election is safe for concurrent use. A Session may campaign more than
// once in one election (several goroutines, say): each Campaign is a
// separate contender and only the lowest leads.
//
// What it guarantees: at most one Leadership of an election is held at any
// time, as far as ZooKeeper knows; a leader whose session is over or whose
// node is deleted is told (its Lease's Done, Err and Context) before another
// campaigner can be elected; terms strictly increase over successive leaders.
// What it cannot guarantee: that a leader that pauses past its session
// timeout stops acting. Fence what a leader writes with its term (Token) or,
// for ZooKeeper itself, with Guard.
type Election struct {
	s    *zkrecipes.Session
	dir  string
	data []byte
	acl  []zk.ACL
}

// NewElection returns an election on the directory path. It creates nothing
// until the first Campaign: the directory is made then, as a container node
// that the server removes once empty. WithData sets the value a Campaign
// given a nil value stores; WithACL the ACL of the nodes it creates.
func NewElection(s *zkrecipes.Session, path string, opts ...Option) (*Election, error) {
	o, err := newOptions(s, path, opts)
	if err != nil {
		return nil, err
	}
	return &Election{s: s, dir: path, data: o.data, acl: o.acl}, nil
}

// Leader is the contender that leads an election, as read from ZooKeeper.
type Leader struct {
	Path      string // its node
	Value     []byte // its node's data: the value of its Campaign or latest Proclaim
	Token     int64  // its term: the node's Czxid
	SessionID int64  // the node's ephemeralOwner
}

// Leadership is one term of leadership, won by Campaign. Its Lease ends when
// the leader resigns or loses leadership; Token is the term, strictly
// increasing over the successive leaders of one election.
type Leadership struct {
	*Lease
}

// Campaign enters the election with value and blocks until this contender
// leads, ctx ends, or the session is over. value (at most
// zkrecipes.MaxDataSize bytes; nil means the election's WithData) is what
// Leader and Observe report for this contender.
//
// Before returning, Campaign checks that the lowest node is ours, owned by
// this Session's ZooKeeper session. It rides out disconnects that the session
// survives, re-reading rather than re-creating its node. Once the session is
// over it fails with an error wrapping ErrLockLost and the session's error;
// connect a new Session to campaign again. On every error its node is
// deleted before Campaign returns (or, if the server cannot be reached, as
// soon as it can be while the session lives).
func (el *Election) Campaign(ctx context.Context, value []byte) (*Leadership, error) {
	if value == nil {
		value = el.data
	}
	if len(value) > zkrecipes.MaxDataSize {
		return nil, fmt.Errorf("zklock: campaign %s: %w: value has %d bytes, the limit is %d",
			el.dir, zkrecipes.ErrDataTooLarge, len(value), zkrecipes.MaxDataSize)
	}
	if err := el.s.Err(); err != nil {
		return nil, el.fail(err)
	}
	e, err := enter(ctx, el.s, el.dir, electMarker, value, el.acl, true)
	if err != nil {
		return nil, el.fail(err)
	}
	own := e.watchOwn()
	token, err := el.await(ctx, e, own)
	if err != nil {
		e.discard()
		return nil, el.fail(err)
	}
	return &Leadership{newLease(el.s, e.path, token, own)}, nil
}

// fail names a failed campaign; once the session is over, it says so with
// ErrLockLost, whatever the call that noticed first.
func (el *Election) fail(err error) error {
	if serr := el.s.Err(); serr != nil && !errors.Is(err, ErrLockLost) {
		return fmt.Errorf("zklock: campaign %s: %w: %w (%v)", el.dir, ErrLockLost, serr, err)
	}
	return fmt.Errorf("zklock: campaign %s: %w", el.dir, err)
}

// await waits until our node is the lowest and returns its Czxid.
func (el *Election) await(ctx context.Context, e *entry, own *ownWatch) (int64, error) {
	for {
		children, err := e.list(ctx)
		if err != nil {
			if el.pause(ctx, err) {
				continue
			}
			return 0, err
		}
		line := contenders(children, electName)
		i := indexOf(line, e.name)
		if i < 0 {
			return 0, fmt.Errorf("%w: our node %s vanished while campaigning", ErrLockLost, e.path)
		}
		if i == 0 {
			return el.lead(ctx, e, own)
		}

		// Wait for the contender just ahead of us, and for nothing else.
		w, err := el.s.WatchNode(ctx, el.dir+"/"+line[i-1].name)
		if err != nil {
			if el.pause(ctx, err) {
				continue
			}
			return 0, err
		}
		_, ev, err := waitAny(ctx, el.s, own, w)
		if err != nil {
			return 0, err
		}
		if err := own.fired(ctx); err != nil {
			return 0, err
		}
		// Nodes lower than ours can only go away, never appear, so when the
		// only one ahead of us is gone, we lead. Unlike the Mutex, a change to
		// the predecessor's data proves nothing: a leader's Proclaim makes one.
		if ev == zk.EventNodeDeleted && i == 1 {
			return el.lead(ctx, e, own)
		}
	}
}

// lead is the last check before declaring leadership: the node is ours, owned
// by our session (a lagging server may list a node of a closing session), and
// the session still lives. From here on, the Lease's monitor takes over.
func (el *Election) lead(ctx context.Context, e *entry, own *ownWatch) (int64, error) {
	st, err := own.await(ctx)
	if err != nil {
		return 0, err
	}
	if st.EphemeralOwner != el.s.ID() {
		return 0, fmt.Errorf("%w: node %s is owned by session 0x%x, not ours (0x%x)",
			ErrLockLost, e.path, st.EphemeralOwner, el.s.ID())
	}
	if err := own.fired(ctx); err != nil {
		return 0, err
	}
	if err := el.s.Err(); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrLockLost, err)
	}
	if e.czxid != 0 {
		return e.czxid, nil
	}
	return st.Czxid, nil
}

// pause decides whether a failed read is worth retrying: the connection
// dropped but the session lives, so the client is reconnecting and our node
// is still there. It waits a little and says true; false means give up.
func (el *Election) pause(ctx context.Context, err error) bool {
	if !zkrecipes.IsAmbiguous(err) || ctx.Err() != nil || el.s.Err() != nil {
		return false
	}
	t := time.NewTimer(50 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-el.s.Done():
	}
	return false
}

// Proclaim replaces the leader's value without an election. It fails with
// an error wrapping ErrNotLeader once the leadership has ended (resigned or
// lost), and with one wrapping zkrecipes.ErrDataTooLarge, writing nothing,
// when value is larger than zkrecipes.MaxDataSize. The write is fenced by the
// node's data version: it cannot land on a node someone else changed. Other
// errors (a dropped connection) leave its outcome unknown.
func (l *Leadership) Proclaim(ctx context.Context, value []byte) error {
	if len(value) > zkrecipes.MaxDataSize {
		return fmt.Errorf("zklock: proclaim: %w: value has %d bytes, the limit is %d",
			zkrecipes.ErrDataTooLarge, len(value), zkrecipes.MaxDataSize)
	}
	if value == nil {
		value = []byte{}
	}
	err := l.setData(ctx, value)
	if err == nil {
		return nil
	}
	if lerr := l.Err(); lerr != nil {
		return fmt.Errorf("zklock: proclaim %s: %w: %w", l.path, ErrNotLeader, lerr)
	}
	if serr := l.s.Err(); serr != nil {
		return fmt.Errorf("zklock: proclaim %s: %w: %w", l.path, ErrNotLeader, serr)
	}
	if errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("zklock: proclaim %s: %w: our node is gone", l.path, ErrNotLeader)
	}
	return fmt.Errorf("zklock: proclaim %s: %w", l.path, err)
}

// Resign gives up the leadership: the node is deleted and the next
// campaigner in line is elected. It is Lease.Unlock: idempotent, nil once
// the node is confirmed gone, an error wrapping ErrLockLost if leadership had
// already been lost. In that last case the node, if it is still there, is
// deleted all the same.
func (l *Leadership) Resign(ctx context.Context) error {
	err := l.Unlock(ctx)
	if errors.Is(err, ErrLockLost) && l.s.Err() == nil {
		// Lost to a write by another client: our node is still there, owned
		// by our live session, and would keep everyone behind it waiting
		// until that session ends. Only we created that path, so deleting it
		// cannot touch anyone else's node.
		if cerr := l.s.Cleanup(zkrecipes.DeleteNode(l.path)); cerr != nil {
			l.s.Logger().Warn("zklock: could not delete node yet", "path", l.path, "err", cerr)
		}
	}
	return err
}

// Leader reads who leads: the contender whose node is lowest. It may be one
// that is about to learn it leads, or, briefly, one whose campaign is being
// abandoned. With no contender it returns ErrNoLeader.
func (el *Election) Leader(ctx context.Context) (Leader, error) {
	for {
		children, err := el.children(ctx)
		if err != nil {
			return Leader{}, err
		}
		line := contenders(children, electName)
		if len(line) == 0 {
			return Leader{}, fmt.Errorf("zklock: %s: %w", el.dir, ErrNoLeader)
		}
		p := el.dir + "/" + line[0].name
		var data []byte
		var st *zk.Stat
		err = zkrecipes.Call(ctx, func() (err error) {
			data, st, err = el.s.Conn().Get(p)
			return err
		})
		if errors.Is(err, zk.ErrNoNode) {
			continue // it went between the listing and the read: list again
		}
		if err != nil {
			return Leader{}, fmt.Errorf("zklock: read %s: %w", p, err)
		}
		return Leader{Path: p, Value: data, Token: st.Czxid, SessionID: st.EphemeralOwner}, nil
	}
}

// children lists the election's directory; a missing one is empty.
func (el *Election) children(ctx context.Context) ([]string, error) {
	var children []string
	err := zkrecipes.Call(ctx, func() (err error) {
		children, _, err = el.s.Conn().Children(el.dir)
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("zklock: list %s: %w", el.dir, err)
	}
	return children, nil
}

// Observe reports the election's leader: the current one, if any, then every
// change (a new leader, or a Proclaim by the current one), in order. The
// channel holds one value: a reader that falls behind skips to the latest
// rather than holding anything up. Nothing is sent while there is no leader.
// The channel is closed when ctx ends or the session is over.
//
// Each call runs one goroutine, gone once the channel is closed. It watches
// the leader's node (an observer is no contender, so it does not wait in
// line) or, with no leader, the directory.
func (el *Election) Observe(ctx context.Context) <-chan Leader {
	ch := make(chan Leader, 1)
	if ctx.Err() != nil || el.s.Err() != nil {
		close(ch)
		return ch
	}
	go el.observe(ctx, ch)
	return ch
}

func (el *Election) observe(ctx context.Context, ch chan Leader) {
	defer close(ch)
	var (
		sent    bool
		path    string
		version int32
	)
	backoff := 50 * time.Millisecond
	for {
		l, st, ev, err := el.watchLeader(ctx)
		if err != nil {
			if ctx.Err() != nil || el.s.Err() != nil {
				return
			}
			el.s.Logger().Warn("zklock: observe: retrying", "path", el.dir, "err", err, "in", backoff)
			if !sleep(ctx, el.s, backoff) {
				return
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		if st != nil && (!sent || l.Path != path || st.Version != version) {
			sent, path, version = true, l.Path, st.Version
			offer(ch, l)
		}
		select {
		case e := <-ev:
			if _, err := el.s.WatchEvent(e); err != nil {
				return
			}
		case <-el.s.Done():
			return
		case <-ctx.Done():
			return
		}
	}
}

// offer puts v in ch, replacing a value the reader has not taken. Only one
// goroutine sends on ch, so once emptied it has room.
func offer(ch chan Leader, v Leader) {
	select {
	case ch <- v:
		return
	default:
	}
	select {
	case <-ch:
	default:
	}
	ch <- v
}

// watchLeader reads the leader and sets a watch that fires when it changes:
// on the leader's node, or, with no leader, on the directory (its children,
// or its creation). st is nil when there is no leader.
func (el *Election) watchLeader(ctx context.Context) (Leader, *zk.Stat, <-chan zk.Event, error) {
	conn := el.s.Conn()
	for {
		children, _, err := callChildren(ctx, conn, el.dir, false)
		if errors.Is(err, zk.ErrNoNode) {
			// No directory yet. An exists watch on a missing node is a
			// creation watch: it stays on the server until the directory is
			// made, which the first Campaign does.
			var found bool
			var ev <-chan zk.Event
			err := zkrecipes.Call(ctx, func() (err error) {
				found, _, ev, err = conn.ExistsW(el.dir)
				return err
			})
			if err != nil {
				return Leader{}, nil, nil, err
			}
			if found {
				continue
			}
			return Leader{}, nil, ev, nil
		}
		if err != nil {
			return Leader{}, nil, nil, err
		}
		line := contenders(children, electName)
		if len(line) == 0 {
			// Watch the directory, and list it again with the watch set, so
			// that a campaigner who came in between is not missed.
			children, ev, err := callChildren(ctx, conn, el.dir, true)
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			if err != nil {
				return Leader{}, nil, nil, err
			}
			if line = contenders(children, electName); len(line) == 0 {
				return Leader{}, nil, ev, nil
			}
			// Someone came in: that watch fires later, into a channel no one
			// reads, and is gone.
		}
		p := el.dir + "/" + line[0].name
		var data []byte
		var st *zk.Stat
		var ev <-chan zk.Event
		err = zkrecipes.Call(ctx, func() (err error) {
			data, st, ev, err = conn.GetW(p)
			return err
		})
		if errors.Is(err, zk.ErrNoNode) {
			continue // that leader is gone already: list again
		}
		if err != nil {
			return Leader{}, nil, nil, err
		}
		return Leader{Path: p, Value: data, Token: st.Czxid, SessionID: st.EphemeralOwner}, st, ev, nil
	}
}

// callChildren lists dir, with a watch when watch is set.
func callChildren(ctx context.Context, conn *zk.Conn, dir string, watch bool) ([]string, <-chan zk.Event, error) {
	var children []string
	var ev <-chan zk.Event
	err := zkrecipes.Call(ctx, func() (err error) {
		if watch {
			children, _, ev, err = conn.ChildrenW(dir)
		} else {
			children, _, err = conn.Children(dir)
		}
		return err
	})
	if err != nil {
		// Call may have returned early (ctx): the closure may still write.
		return nil, nil, err
	}
	return children, ev, nil
}

// sleep waits d, and reports false if ctx ended or the session is over first.
func sleep(ctx context.Context, s *zkrecipes.Session, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-s.Done():
	}
	return false
}

// resignWait bounds a Resign that Run makes after its caller's context ended.
const resignWait = 10 * time.Second

// Run is the leader-selector loop: it campaigns with value, calls lead with
// a context that is cancelled the moment leadership is lost (or ctx ends),
// and when lead returns, resigns and campaigns again. lead returning nil
// means "let someone else lead for a while"; lead should return promptly
// once its context is cancelled, since until it does the Election is not
// campaigning.
//
// Run returns when ctx ends (context.Cause(ctx)), when lead returns an error
// (that error, after resigning), or when the session is over (an error
// wrapping ErrLockLost and the session's error: connect a new Session to go
// on). It never calls lead twice at once, and never without holding
// leadership at the time of the call.
func (el *Election) Run(ctx context.Context, value []byte, lead func(ctx context.Context) error) error {
	if lead == nil {
		return fmt.Errorf("%w: nil lead func", zkrecipes.ErrInvalidArgument)
	}
	for {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		l, err := el.Campaign(ctx, value)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case el.s.Err() == nil && errors.Is(err, ErrLockLost):
			// Our node was deleted by someone else while in line: try again.
			sleep(ctx, el.s, 50*time.Millisecond)
			continue
		default:
			return err
		}

		lerr := el.serve(ctx, l, lead)

		// Resign even when ctx ended: detached, but bounded.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), resignWait)
		rerr := l.Resign(rctx)
		cancel()
		if rerr != nil && !errors.Is(rerr, ErrLockLost) && el.s.Err() == nil {
			// Outcome unknown: make sure the node goes, or our own stale node
			// would lead ahead of our next campaign.
			el.s.Logger().Warn("zklock: resign failed; deleting in the background", "path", l.Path(), "err", rerr)
			el.s.Cleanup(zkrecipes.DeleteNode(l.Path()))
		}
		if lerr != nil {
			return lerr
		}
	}
}

// serve calls lead under a context that ends with ctx or with the
// leadership, whichever comes first, with the cause of that end.
func (el *Election) serve(ctx context.Context, l *Leadership, lead func(context.Context) error) error {
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(l.Context(), func() { cancel(context.Cause(l.Context())) })
	defer stop()
	return lead(lctx)
}
