package line

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/wire"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// maxDirTries bounds the creates that find the directory missing: it can be
// reaped (a container) between its creation and ours, but not for ever.
const maxDirTries = 8

// Entry is our node in a line, from Join until it holds (Wait) or leaves.
// It belongs to the goroutine that joined.
type Entry struct {
	s    *session.Session
	spec *Spec
	name string
	path string

	czxid int64 // our node's Czxid, from the create's reply; 0 when unknown

	// first is a listing of the directory taken right behind our create,
	// when it came back holding our node; nil once used.
	first []string
	// dirEv is the child watch that listing set. Until it fires nothing in
	// the directory has changed, so nothing can have happened to our node:
	// it stands in for a watch on the node itself.
	dirEv <-chan zk.Event
	// own is the getData watch on our node, once set.
	own *znode.Watch
	// gen is the session's NextReconnect taken before our create, for
	// the listing taken with it (or given by UseListing).
	gen <-chan struct{}
}

// Path is the full path of our node.
func (e *Entry) Path() string { return e.path }

// Name is our node's name in the directory.
func (e *Entry) Name() string { return e.name }

// Join creates our EPHEMERAL|SEQUENCE node at the end of the line, creating
// the directory (and its ancestors) as container nodes when missing.
//
// What a create may leave behind is settled before Join returns:
//
//   - a create whose connection dropped may have happened: once the client
//     has reconnected (the outcome is then settled) we look for our GUID and
//     adopt the node only if its ephemeralOwner is our session, else create
//     again;
//   - a create abandoned because ctx ended may still land: a clean-up step
//     waits for its outcome, then deletes whatever it made.
func Join(ctx context.Context, s *session.Session, spec *Spec) (*Entry, error) {
	var guid [16]byte
	if _, err := rand.Read(guid[:]); err != nil {
		return nil, err
	}
	prefix := wire.NodePrefix + hex.EncodeToString(guid[:]) + spec.Marker
	gen := s.NextReconnect() // before any read of the line: see Entry.gen
	dirTries := 0
	for try := 0; ; try++ {
		if err := s.Err(); err != nil {
			return nil, fmt.Errorf("%w: %w", spec.Lost, err)
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx) // nothing sent
		}
		res := create(s, spec, prefix)
		var c created
		select {
		case c = <-res:
		case <-ctx.Done():
			s.Cleanup("abandoned create in "+spec.Dir, settleCreate(s, spec.Dir, prefix, res))
			return nil, context.Cause(ctx)
		}
		switch err := c.err; {
		case err == nil:
			return newEntry(s, spec, c.path, c.czxid, c.first, gen)
		case errors.Is(err, zk.ErrNoNode) && dirTries < maxDirTries:
			// The directory is missing, or a container was reaped between
			// its creation and ours.
			dirTries++
			if err := znode.EnsureDir(ctx, s, spec.Dir, spec.ACL); err != nil {
				return nil, endedOr(ctx, s, spec, err)
			}
		case session.IsConnErr(err):
			p, found, ferr := findOwn(ctx, s, spec.Dir, prefix)
			if ferr != nil {
				// Not found out: whatever the create left, a clean-up finds.
				s.Cleanup("ambiguous create in "+spec.Dir, deleteOwn(s, spec.Dir, prefix))
				return nil, endedOr(ctx, s, spec, ferr)
			}
			if found {
				return newEntry(s, spec, p, 0, nil, gen)
			}
			if !znode.Pause(ctx, s, try) {
				return nil, endedOr(ctx, s, spec, err)
			}
		default:
			return nil, fmt.Errorf("create node in %s: %w", spec.Dir, err)
		}
	}
}

// created is the outcome of a create, with the listing sent right behind it.
type created struct {
	path  string
	czxid int64
	first *listing
	err   error
}

type listing struct {
	children []string
	ev       <-chan zk.Event
	err      error
}

// create sends the create, and, for specs that ask, a listing of the
// directory in the same round trip: a session's requests are answered in
// the order sent, so a listing queued right behind the create sees our
// node. Which of the two goroutines queues first is likely, not certain,
// so the listing is kept only if it holds our node. The create's Czxid is
// claimed here, whoever waits for the outcome.
func create(s *session.Session, spec *Spec, prefix string) <-chan created {
	res := make(chan created, 1)
	conn := s.Conn()
	go func() {
		var lc chan listing
		if spec.ListWithCreate {
			lc = make(chan listing, 1)
			go func() {
				children, _, ev, err := conn.ChildrenW(spec.Dir)
				lc <- listing{children, ev, err}
			}()
		}
		p, err := conn.Create(spec.Dir+"/"+prefix, spec.Data, zk.FlagEphemeralSequential, spec.ACL)
		c := created{path: p, err: err}
		if err == nil {
			c.czxid, _ = s.Created(p)
		}
		if lc != nil {
			l := <-lc
			if err == nil && l.err == nil && slices.Contains(l.children, p[len(spec.Dir)+1:]) {
				c.first = &l
			}
		}
		res <- c
	}()
	return res
}

// settleCreate is the clean-up step of an abandoned create: it waits for
// the create's outcome and deletes what it made. When the connection
// dropped under the create, its outcome is settled once the client has
// reconnected, and a look for our GUID finds the node if it was made.
func settleCreate(s *session.Session, dir, prefix string, res <-chan created) func() error {
	var c *created
	return func() error {
		if c == nil {
			got := <-res
			c = &got
		}
		switch {
		case c.err == nil:
			return s.DeleteStep(c.path)()
		case session.IsConnErr(c.err):
			return deleteOwn(s, dir, prefix)()
		default:
			return nil // refused: nothing was made
		}
	}
}

// findOwn looks in dir for our node, whose name starts with prefix, after
// a create whose connection dropped. It adopts a node only if its
// ephemeralOwner is our session: a lagging server may still list a node of
// a closed session (CURATOR-498).
func findOwn(ctx context.Context, s *session.Session, dir, prefix string) (string, bool, error) {
	names, err := znode.Children(ctx, s, dir)
	if err != nil {
		return "", false, err
	}
	for _, name := range names {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		p := dir + "/" + name
		st, err := znode.Retry(ctx, s, func() (*zk.Stat, error) {
			_, st, err := s.Conn().Exists(p)
			return st, err
		})
		if err != nil {
			return "", false, err
		}
		if st != nil && st.EphemeralOwner == s.ID() {
			return p, true, nil
		}
	}
	return "", false, nil
}

// deleteOwn is a clean-up step: delete whatever node of ours in dir has a
// name starting with prefix.
func deleteOwn(s *session.Session, dir, prefix string) func() error {
	return func() error {
		p, found, err := findOwn(context.Background(), s, dir, prefix)
		if err != nil || !found {
			return err
		}
		return s.DeleteStep(p)()
	}
}

func newEntry(s *session.Session, spec *Spec, path string, czxid int64, first *listing, gen <-chan struct{}) (*Entry, error) {
	name := path[len(spec.Dir)+1:]
	if _, ok := ParseName(name); !ok {
		s.Cleanup("unexpected node "+path, s.DeleteStep(path))
		return nil, fmt.Errorf("server returned unexpected node name %q", path)
	}
	e := &Entry{s: s, spec: spec, name: name, path: path, czxid: czxid, gen: gen}
	if first != nil {
		e.first, e.dirEv = first.children, first.ev
	}
	return e, nil
}

// Leave deletes our node on a failure path, detached from the caller's
// context (which may be why we fail), asking again across disconnects
// until it is gone or the session is over.
func (e *Entry) Leave() { e.s.Cleanup("leave "+e.path, e.s.DeleteStep(e.path)) }

// endedOr names why a retried call stopped: the session's end (a loss, in
// the recipe's words), ctx's cause, or err itself.
func endedOr(ctx context.Context, s *session.Session, spec *Spec, err error) error {
	if serr := s.Err(); serr != nil {
		return fmt.Errorf("%w: %w", spec.Lost, serr)
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// UseListing gives Wait its first listing, taken by the recipe after our
// create was answered (with other reads in the same round trip), if it
// holds our node.
func (e *Entry) UseListing(children []string) {
	if slices.Contains(children, e.name) {
		e.first = children
	}
}
