package line

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/telemetry"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// Wait is the one wait loop of every recipe, ZooKeeper's lock recipe with
// the kind of lock left to a Rule:
//
//  1. List the directory (the first time, use the listing taken with the
//     create when there is one).
//  2. Ask the Rule. If we hold, return. If we may not wait, return Busy.
//  3. Watch the contenders the Rule names, with getData, and our own node
//     (unless the first listing's child watch stands in for it), all in one
//     round trip.
//  4. Wait for one of them to change. If the Rule's shortcut says what that
//     change proves, hold without listing again; otherwise go to 1. If the
//     client reconnects meanwhile, go to 1 as well: the watches it re-set
//     may have missed what changed while it was away (see
//     session.NextReconnect).
//
// Nodes ahead of ours can only go away, never appear: sequence numbers only
// grow. That is what makes the shortcuts sound, and why a contender never
// has to watch anything behind it.
//
// Wait returns Lost if our node vanishes or the session ends while we wait,
// Mixed if the directory holds another kind of recipe's contenders, or
// ctx's cause. Connection errors it rides out: reads are asked again, and
// after a reconnect the line is listed and watched afresh.
func (e *Entry) Wait(ctx context.Context, wait bool) (*Held, error) {
	var seen written
	for waited := false; ; waited = true {
		children, gen, err := e.list(ctx)
		if err != nil {
			return nil, e.fail(ctx, err)
		}
		line, foreign := Parse(children, e.spec.Kind)
		if foreign != "" {
			return nil, fmt.Errorf("%w: %s holds %s", e.spec.Mixed, e.spec.Dir, foreign)
		}
		me := Index(line, e.name)
		if me < 0 {
			return nil, e.vanished()
		}
		d := e.spec.Rule(line, me)
		if d.Hold {
			return e.hold(ctx, me+1 < len(line), waited, gen)
		}
		if !wait {
			return nil, fmt.Errorf("%w: %d ahead, first %s", e.spec.Busy, me, line[0].Name)
		}
		if !waited {
			telemetry.Waiting(ctx, me)
		}

		ws, err := e.watch(ctx, line, d.Watch)
		if err != nil {
			return nil, e.fail(ctx, err)
		}
		i, ev, err := e.await(ctx, ws, d.Written, &seen, gen)
		if errors.Is(err, errReconnected) {
			// Our own node's watches are as suspect as the others: set
			// afresh with the next watches.
			e.own, e.dirEv = nil, nil
			continue
		}
		if err != nil {
			return nil, e.fail(ctx, err)
		}
		// Events reach us in the order the server made them: a change to
		// our own node made before this one has been delivered already.
		if err := e.ownFired(ctx); err != nil {
			return nil, e.fail(ctx, err)
		}
		switch {
		case ev == zk.EventNodeDeleted && d.GoneHolds,
			ev == zk.EventNodeDataChanged && d.ReleaseHolds && line[d.Watch[i]].Ours():
			return e.hold(ctx, false, true, gen)
		}
		// Something changed ahead of us, and the rule needs a fresh look.
	}
}

// errReconnected: the client reconnected while we waited; list again.
var errReconnected = errors.New("reconnected")

// list lists the directory, or uses the listing taken with the create. It
// returns, too, the session's NextReconnect taken before the listing.
func (e *Entry) list(ctx context.Context) ([]string, <-chan struct{}, error) {
	if e.first != nil {
		l := e.first
		e.first = nil
		return l, e.gen, nil
	}
	gen := e.s.NextReconnect()
	children, err := znode.Children(ctx, e.s, e.spec.Dir)
	return children, gen, err
}

// watch sets a watch on each contender at the places idx, and on our own
// node when nothing watches it yet, all requests in one round trip.
func (e *Entry) watch(ctx context.Context, line []Node, idx []int) ([]*znode.Watch, error) {
	paths := make([]string, 0, len(idx)+1)
	for _, i := range idx {
		paths = append(paths, e.spec.Dir+"/"+line[i].Name)
	}
	needOwn := e.dirEv == nil && e.own == nil
	if needOwn {
		paths = append(paths, e.path)
	}
	ws := make([]*znode.Watch, len(paths))
	errs := make([]error, len(paths))
	if len(paths) == 1 {
		ws[0], errs[0] = znode.WatchNode(ctx, e.s, paths[0])
	} else {
		var wg sync.WaitGroup
		for i, p := range paths {
			wg.Go(func() { ws[i], errs[i] = znode.WatchNode(ctx, e.s, p) })
		}
		wg.Wait()
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	if needOwn {
		own := ws[len(ws)-1]
		if own.Gone() {
			return nil, e.vanished()
		}
		e.own, ws = own, ws[:len(ws)-1]
	}
	return ws, nil
}

// written remembers the one watched node we listed again for because it
// was found written, so that finding it so again does not loop.
type written struct {
	path    string
	version int32
}

// await waits until one of the watched nodes changes or goes away and
// returns which and how, or errReconnected once gen is closed. It looks
// after our own node meanwhile.
func (e *Entry) await(ctx context.Context, ws []*znode.Watch, checkWritten bool, seen *written, gen <-chan struct{}) (int, zk.EventType, error) {
	for i, w := range ws {
		if w.Gone() {
			return i, zk.EventNodeDeleted, nil
		}
		if checkWritten && w.Stat.Version > 0 && *seen != (written{w.Path, w.Stat.Version}) {
			*seen = written{w.Path, w.Stat.Version}
			return i, zk.EventNodeDataChanged, nil
		}
	}
	for {
		i, ev, err := e.next(ctx, ws, gen)
		switch {
		case err != nil:
			return 0, 0, err
		case i >= 0 && znode.Dropped(ev):
			return 0, 0, e.sessionOver()
		case i >= 0:
			return i, ev.Type, nil
		}
		if err := e.ownEvent(ctx, ev); err != nil {
			return 0, 0, err
		}
	}
}

// next waits for the first event of the watches (its index) or of our own
// node's watch (index -1), a reconnect (errReconnected), the session's end,
// or ctx's.
func (e *Entry) next(ctx context.Context, ws []*znode.Watch, gen <-chan struct{}) (int, zk.Event, error) {
	own := e.ownWatch()
	done := e.s.Done()
	if len(ws) == 1 { // the common case, without reflection
		select {
		case ev := <-ws[0].Ev:
			return 0, ev, nil
		case ev := <-own:
			return -1, ev, nil
		case <-gen:
			return 0, zk.Event{}, errReconnected
		case <-done:
			return 0, zk.Event{}, e.sessionOver()
		case <-ctx.Done():
			return 0, zk.Event{}, context.Cause(ctx)
		}
	}
	cases := make([]reflect.SelectCase, 0, len(ws)+4)
	for _, w := range ws {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.Ev)})
	}
	n := len(ws)
	cases = append(cases,
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(own)},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(done)},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(gen)})
	i, v, _ := reflect.Select(cases)
	switch i {
	case n:
		return -1, v.Interface().(zk.Event), nil
	case n + 1:
		return 0, zk.Event{}, e.sessionOver()
	case n + 2:
		return 0, zk.Event{}, context.Cause(ctx)
	case n + 3:
		return 0, zk.Event{}, errReconnected
	}
	return i, v.Interface().(zk.Event), nil
}

// ownWatch is the channel that tells of a change to our node: the
// directory's child watch while it stands in, else the node's own watch.
func (e *Entry) ownWatch() <-chan zk.Event {
	if e.dirEv != nil {
		return e.dirEv
	}
	if e.own != nil {
		return e.own.Ev
	}
	return nil
}

// ownEvent handles an event of our own node's watch while we wait: the
// directory changed (the watch then moves onto our node), or our node was
// deleted or written by another client, a loss.
func (e *Entry) ownEvent(ctx context.Context, ev zk.Event) error {
	switch {
	case znode.Dropped(ev):
		return e.sessionOver()
	case e.dirEv != nil:
		e.dirEv = nil
		w, err := znode.WatchNode(ctx, e.s, e.path)
		if err != nil {
			return err
		}
		if w.Gone() {
			return e.vanished()
		}
		e.own = w
		return nil
	case ev.Type == zk.EventNodeDataChanged:
		return fmt.Errorf("%w: our node %s was written by another client while waiting", e.spec.Lost, e.path)
	default:
		return e.vanished()
	}
}

// ownFired handles, without blocking, the events of our own node's watch
// that were delivered already.
func (e *Entry) ownFired(ctx context.Context) error {
	for {
		select {
		case ev := <-e.ownWatch():
			if err := e.ownEvent(ctx, ev); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// hold is the last step before we hold: learn our token (from the create's
// reply, else from our node's Stat), check the node is our session's when
// the spec asks, and that nothing happened to it or to the session.
func (e *Entry) hold(ctx context.Context, behind, waited bool, gen <-chan struct{}) (*Held, error) {
	token := e.czxid
	if e.own == nil && (token == 0 || e.spec.VerifyOwner) {
		w, err := znode.WatchNode(ctx, e.s, e.path)
		if err != nil {
			return nil, e.fail(ctx, err)
		}
		if w.Gone() {
			return nil, e.vanished()
		}
		e.own, e.dirEv = w, nil
	}
	if token == 0 {
		token = e.own.Stat.Czxid
	}
	if e.spec.VerifyOwner {
		if owner := e.own.Stat.EphemeralOwner; owner != e.s.ID() {
			return nil, fmt.Errorf("%w: node %s is owned by session 0x%x, not ours (0x%x)", e.spec.Lost, e.path, owner, e.s.ID())
		}
	}
	// The directory's watch firing says nothing of our node: the lease's
	// owner looks into it. Our node's own watch firing does.
	if e.dirEv == nil {
		if err := e.ownFired(ctx); err != nil {
			return nil, e.fail(ctx, err)
		}
	}
	if e.s.Err() != nil {
		return nil, e.sessionOver()
	}
	return &Held{Path: e.path, Token: token, Behind: behind, Waited: waited, DirEv: e.dirEv, Own: e.own, Reconnect: gen, Recipe: e.spec.Recipe}, nil
}

func (e *Entry) vanished() error {
	return fmt.Errorf("%w: our node %s vanished while waiting", e.spec.Lost, e.path)
}

// sessionOver waits for the session to be over (the client drops watches
// only then) and says so as a loss.
func (e *Entry) sessionOver() error {
	<-e.s.Done()
	return fmt.Errorf("%w: %w", e.spec.Lost, e.s.Err())
}

func (e *Entry) fail(ctx context.Context, err error) error {
	return endedOr(ctx, e.s, e.spec, err)
}
