package zklock

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/go-zookeeper/zk"
	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// Contender node names. Ours are "_zkr_<guid><marker><seq>", where the GUID
// lets us find our node after a create whose reply was lost. The markers are
// those of the other clients, so a Go service shares one lock path with Java
// and Python ones:
//
//	Curator       _c_<uuid>-lock-0000000007
//	go-zookeeper  _c_<hex>-lock-0000000007
//	kazoo         <uuid>__lock__0000000007
//
// The sequence suffix is a signed 32-bit counter ZooKeeper prints with
// "%010d"; it wraps to negative numbers, which sort first, in every client.
const (
	ownPrefix  = zkrecipes.NodePrefix
	lockMarker = "-lock-"
)

var lockName = regexp.MustCompile(`(?:-lock-|__lock__)(-\d{9,10}|\d{10})$`)

// seqSuffix is the sequence number at the end of any sequential node.
var seqSuffix = regexp.MustCompile(`(-\d{9,10}|\d{10})$`)

// contender is one node in a recipe's directory.
type contender struct {
	name string
	seq  int32
}

// ours reports whether the node was made by this library, and so follows its
// release protocol (see Lease.Unlock).
func (c contender) ours() bool { return strings.HasPrefix(c.name, ownPrefix) }

// contenders picks the nodes that re matches out of a directory listing and
// sorts them by sequence number: the order of the line.
func contenders(children []string, re *regexp.Regexp) []contender {
	out := make([]contender, 0, len(children))
	for _, name := range children {
		m := re.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		seq, err := strconv.ParseInt(m[len(m)-1], 10, 32)
		if err != nil {
			continue
		}
		out = append(out, contender{name, int32(seq)})
	}
	slices.SortFunc(out, func(a, b contender) int {
		return cmp.Or(cmp.Compare(a.seq, b.seq), strings.Compare(a.name, b.name))
	})
	return out
}

func indexOf(cs []contender, name string) int {
	return slices.IndexFunc(cs, func(c contender) bool { return c.name == name })
}

// listing is a directory listing, with the child watch it set.
type listing struct {
	children []string
	ev       <-chan zk.Event
	err      error
}

// entry is our node in a recipe's directory.
type entry struct {
	s    *zkrecipes.Session
	dir  string
	name string
	path string
	seq  int32
	// czxid is our node's Czxid, from the create's reply; 0 when unknown.
	czxid int64
	// first is a listing of dir taken right behind our create, when the
	// server answered it after the create (see enter); nil otherwise.
	first *listing
	// dirEv is the child watch that listing set: see ownWatch.
	dirEv <-chan zk.Event
}

// enter creates our EPHEMERAL|SEQUENCE node in dir, creating dir (and its
// ancestors) as container nodes when missing.
//
// A create whose reply is lost may have happened: then we look for our GUID,
// and adopt the node only if its ephemeralOwner is our session. If ctx ends
// mid-create, a clean-up step waits for the outcome and deletes the node.
//
// With list set, enter also lists dir in the same round trip: the listing is
// queued right behind the create, and a session's requests are answered in
// order. The queueing order is likely, not certain, so the listing is used
// only if it holds our node.
func enter(ctx context.Context, s *zkrecipes.Session, dir, marker string, data []byte, acl []zk.ACL, list bool) (*entry, error) {
	var guid [16]byte
	if _, err := rand.Read(guid[:]); err != nil {
		return nil, err
	}
	prefix := ownPrefix + hex.EncodeToString(guid[:]) + marker
	conn := s.Conn()
	for attempt := 0; ; attempt++ {
		if err := s.Err(); err != nil {
			return nil, fmt.Errorf("zklock: enter %s: %w", dir, err)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("zklock: enter %s: %w", dir, context.Cause(ctx))
		}
		type created struct {
			path  string
			first *listing
			err   error
		}
		res := make(chan created, 1)
		go func() {
			var lc chan listing
			if list {
				lc = make(chan listing, 1)
				go func() {
					ch, _, ev, err := conn.ChildrenW(dir)
					lc <- listing{ch, ev, err}
				}()
			}
			p, err := conn.Create(dir+"/"+prefix, data, zk.FlagEphemeralSequential, acl)
			var first *listing
			if err == nil && lc != nil {
				l := <-lc
				if l.err == nil && slices.Contains(l.children, p[len(dir)+1:]) {
					first = &l
				}
			}
			res <- created{p, first, err}
		}()

		var c created
		select {
		case c = <-res:
		case <-ctx.Done():
			s.Cleanup(func(conn *zk.Conn) error {
				if c, ok := <-res; ok {
					close(res) // later tries skip the wait
					if c.err == nil {
						s.CreatedZxid(c.path) // unclaimed otherwise
						return zkrecipes.DeleteNode(c.path)(conn)
					}
				}
				return znode.DeletePrefix(dir, prefix)(conn)
			})
			return nil, fmt.Errorf("zklock: enter %s: %w", dir, context.Cause(ctx))
		}

		switch err := c.err; {
		case err == nil:
			return newEntry(s, dir, c.path, c.first)
		case errors.Is(err, zk.ErrNoNode) && attempt < 8:
			// dir is missing, or a container reaped between its creation and ours.
			if err := znode.EnsureDir(ctx, s, dir, acl); err != nil {
				return nil, fmt.Errorf("zklock: %w", err)
			}
		case zkrecipes.IsAmbiguous(err) && attempt < 8:
			p, found, ferr := znode.FindOwn(ctx, s, dir, prefix)
			if ferr != nil {
				s.Cleanup(znode.DeletePrefix(dir, prefix))
				return nil, fmt.Errorf("zklock: enter %s: %w", dir, ferr)
			}
			if found {
				return newEntry(s, dir, p, nil)
			}
		default:
			return nil, fmt.Errorf("zklock: create node in %s: %w", dir, err)
		}
	}
}

func newEntry(s *zkrecipes.Session, dir, path string, first *listing) (*entry, error) {
	name := path[len(dir)+1:]
	cs := contenders([]string{name}, seqSuffix)
	if len(cs) == 0 {
		return nil, fmt.Errorf("zklock: server returned unexpected node name %q", path)
	}
	czxid, _ := s.CreatedZxid(path)
	e := &entry{s: s, dir: dir, name: name, path: path, seq: cs[0].seq, czxid: czxid, first: first}
	if first != nil {
		e.dirEv = first.ev
	}
	return e, nil
}

// discard deletes our node on a failure path, detached from the caller's
// context (which may be why we fail) and retried until it is gone or the
// session ends.
func (e *entry) discard() {
	if err := e.s.Cleanup(zkrecipes.DeleteNode(e.path)); err != nil {
		e.s.Logger().Warn("zklock: could not delete node yet", "path", e.path, "err", err)
	}
}

// list lists the directory, or uses the listing taken with the create.
func (e *entry) list(ctx context.Context) ([]string, error) {
	if l := e.first; l != nil {
		e.first = nil
		return l.children, nil
	}
	var children []string
	err := zkrecipes.Call(ctx, func() (err error) {
		children, _, err = e.s.Conn().Children(e.dir)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("zklock: list %s: %w", e.dir, err)
	}
	return children, nil
}

// token is our node's Czxid: known from the create's reply, or else read
// with the watch on our own node.
func (e *entry) token(ctx context.Context, own *ownWatch) (int64, error) {
	if e.czxid != 0 {
		return e.czxid, nil
	}
	st, err := own.await(ctx)
	if err != nil {
		return 0, err
	}
	return st.Czxid, nil
}

// waitAny waits until one of the watched nodes changes or goes away, and
// returns which and how. It also ends when our own node changes (a loss),
// the session ends or ctx ends.
func waitAny(ctx context.Context, s *zkrecipes.Session, own *ownWatch, ws ...*zkrecipes.Watch) (int, zk.EventType, error) {
	for i, w := range ws {
		if !w.Exists() {
			return i, zk.EventNodeDeleted, nil
		}
	}
	// own's fields may be read only once ready is closed.
	ready := own.ready
	var ownEv <-chan zk.Event
	if len(ws) == 1 { // the common case, without reflection
		for {
			select {
			case ev := <-ws[0].Events():
				t, err := s.WatchEvent(ev)
				return 0, t, err
			case <-ready:
				ready = nil
				if own.err != nil {
					return 0, 0, own.loss(own.err)
				}
				ownEv = own.ev
			case ev := <-ownEv:
				if err := own.handle(ctx, ev); err != nil {
					return 0, 0, err
				}
				ownEv = own.ev
			case <-s.Done():
				return 0, 0, fmt.Errorf("%w: %w", ErrLockLost, s.Err())
			case <-ctx.Done():
				return 0, 0, context.Cause(ctx)
			}
		}
	}
	cases := make([]reflect.SelectCase, len(ws), len(ws)+4)
	for i, w := range ws {
		cases[i] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.Events())}
	}
	n := len(ws)
	cases = append(cases,
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ready)},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ownEv)},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.Done())},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
	for {
		i, v, _ := reflect.Select(cases)
		switch {
		case i < n:
			t, err := s.WatchEvent(v.Interface().(zk.Event))
			return i, t, err
		case i == n:
			cases[n].Chan = reflect.ValueOf((<-chan struct{})(nil))
			if own.err != nil {
				return 0, 0, own.loss(own.err)
			}
			cases[n+1].Chan = reflect.ValueOf(own.ev)
		case i == n+1:
			if err := own.handle(ctx, v.Interface().(zk.Event)); err != nil {
				return 0, 0, err
			}
			cases[n+1].Chan = reflect.ValueOf(own.ev)
		case i == n+2:
			return 0, 0, fmt.Errorf("%w: %w", ErrLockLost, s.Err())
		default:
			return 0, 0, context.Cause(ctx)
		}
	}
}
