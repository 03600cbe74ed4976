package fairqueue

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/znode"
	"github.com/zkrecipes/zkrecipes/zklock"
)

// The dispatcher hands the items out: one per queue, elected among the
// Queues that take (a zklock Election in dispatch/), so it stays, and keeps
// what it learnt: the tickets waiting, the offers standing, the free items
// oldest first. It learns what changed from watches, and lists a directory
// only when its watch fired, taking from a bucket only the names past the
// last one seen. Each round sends, at once, the multi that hands out what
// the view allows now and the reads the next round needs: one round trip.
//
// A hand-out multi, first checked against the dispatcher's election node
// (a deposed dispatcher hands out nothing), marks each ticket it serves
// (setData, version 0: a ticket that left, or was served already, fails
// the multi), writes the consumers' inboxes, and records the highest id
// ever handed out in items/'s data. An item handed out before is bumped
// (setData, version-checked) when offered again, so its version counts its
// deliveries; a new dispatcher takes every free item at or below the high
// mark for one that was handed out before.
//
// A ticket gone was settled by its consumer (acked, or given back through
// held/, which the dispatcher watches) when the consumer's inbox is still
// there; when the inbox is gone too, the consumer is, and its items that
// are still there come back. The server tells the change of consumers/ (a
// watch) before the listing of ready/ that shows the tickets gone, so a
// gone ticket is judged only while no newer listing of consumers/ is due.

// maxRound bounds the items one hand-out multi hands out; lowWater is how
// many free items the dispatcher keeps known, listing more below it. The
// dispatcher reads the payloads of the next readAhead free items, and an
// offer carries one of up to carryMax bytes, an inbox up to inboxCarry
// bytes of them.
const (
	maxRound   = 128
	lowWater   = 256
	readAhead  = 16
	carryMax   = 4 << 10
	inboxCarry = 256 << 10
)

// noDrop is triedDrop before the newest bucket was deleted: never maxSeen,
// so that a bucket drained of the items a rebuild found offered (not
// listed as new: maxSeen stays "") or found drained is deleted too.
const noDrop = "-"

var (
	errNotLeader = errors.New("no longer the queue's dispatcher")
	errResync    = errors.New("the dispatcher's view is out of date")
)

// campaign stands for election as the queue's dispatcher and, elected,
// dispatches until the leadership ends; then stands again, until ctx ends
// or the session is over.
func (q *Queue) campaign(ctx context.Context) {
	el, err := zklock.NewElection(q.pub, q.dispatch, zklock.WithACL(q.acl))
	if err != nil {
		q.log.Error("fairqueue: cannot stand as dispatcher", "err", err)
		return
	}
	for try := 0; ctx.Err() == nil && q.s.Err() == nil; {
		l, err := el.Campaign(ctx, []byte(q.name))
		if err != nil {
			if ctx.Err() == nil && q.s.Err() == nil {
				q.log.Warn("fairqueue: dispatcher election failed; standing again", "err", err)
				znode.Pause(ctx, q.s, try)
				try++
			}
			continue
		}
		try = 0
		q.log.Debug("fairqueue: dispatching", "node", l.Path())
		d := &dispatcher{q: q, l: l}
		if err := d.run(ctx); !errors.Is(err, errNotLeader) && ctx.Err() == nil && q.s.Err() == nil {
			q.log.Warn("fairqueue: dispatcher stopped; standing again", "err", err)
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = l.Resign(rctx) // lost already, or gone with the session: nothing to do
		cancel()
	}
}

// ticket is a ticket in the dispatcher's view.
type ticket struct {
	ticketName
	name    string
	offered bool
	items   []*item // the items offered, not given back since
}

// item is an item in the dispatcher's view: free, offered, held, or of a
// consumer gone (limbo).
type item struct {
	bucket, seq int64
	name, id    string
	ticket      *ticket // offered to
	// again: handed out before; its next offer bumps its version, which
	// needs its data (read).
	again, read bool
	data        []byte
	version     int32
	held        string    // its node in held/, until it is offered again
	until       time.Time // free from then
	limbo       bool      // its consumer is gone: read it to learn if it is still there
	reading     bool
	free        bool // among d.free
}

func (it *item) path(q *Queue) string { return q.bucketPath(it.bucket) + "/" + it.name }

// The directories the dispatcher watches.
const (
	wReady = iota
	wConsumers
	wHeld
	wDelayed
	wBuckets
	wTail // the bucket it lists: the newest one, the one new items come into
	nWatched
)

type dispatcher struct {
	q *Queue
	l *zklock.Leadership

	tickets  map[string]*ticket
	ready    []*ticket            // waiting, oldest first
	standing map[string][]*ticket // offered tickets not yet gone, by consumer
	live     map[string]bool      // consumers whose inbox exists
	judge    []*ticket            // offered tickets gone, judged once consumers/ is current
	items    map[string]*item     // by id
	free     []*item              // free now, oldest first
	later    []*item              // given back, free from their until on
	limbo    []*item
	heldSeen map[string]bool
	delayed  []string
	hwm      string // the highest id ever handed out

	buckets   []int64 // as items/ was last listed, oldest first
	cur       int64   // the bucket new names are taken from; -1 before the first
	maxSeen   string  // the highest id listed
	perBucket map[int64]int
	drop      []int64 // drained buckets to delete
	needDead  bool    // make dead/ before the next bury
	triedDrop string  // maxSeen when the newest bucket was last deleted (noDrop: not yet)

	dirty     [nWatched]bool
	listing   [nWatched]bool // a listing is out
	ev        [nWatched]<-chan zk.Event
	reconnect <-chan struct{}

	// What is out: at most one multi (the next is planned from its
	// outcome), and any number of reads; their outcomes come back on
	// results, to be taken in by this goroutine.
	multi    bool
	inflight int
	results  chan func() error

	// promoting counts the moves of delayed items into the queue that are
	// out: their items are in no listing yet.
	promoting int
}

// run rebuilds the view, then takes in events and hands out until the
// leadership ends; a view found out of date is built again, once nothing
// it sent is out (a multi out may still land).
func (d *dispatcher) run(ctx context.Context) error {
	d.results = make(chan func() error, 64)
	for {
		err := d.rebuild(ctx)
		for err == nil {
			err = d.step(ctx)
		}
		for ; d.inflight > 0; d.inflight-- {
			<-d.results // its outcome is read again, or no longer ours
		}
		if !errors.Is(err, errResync) {
			return err
		}
	}
}

// async runs op off this goroutine; what it returns is taken in here.
func (d *dispatcher) async(op func() func() error) {
	d.inflight++
	go func() { d.results <- op() }()
}

// rebuild reads everything the view needs: the high mark, ready/,
// consumers/, held/, delayed/ and items/ (watching them), then the inboxes
// of the consumers, which hold the offers standing. The items come next,
// from the oldest bucket on.
func (d *dispatcher) rebuild(ctx context.Context) error {
	q := d.q
	*d = dispatcher{q: q, l: d.l, tickets: map[string]*ticket{}, standing: map[string][]*ticket{},
		live: map[string]bool{}, items: map[string]*item{}, heldSeen: map[string]bool{},
		perBucket: map[int64]int{}, cur: -1, reconnect: q.s.NextReconnect(), results: d.results,
		triedDrop: noDrop}
	var r znode.Reads
	var mark znode.Node
	r.Do(func() (err error) {
		if mark, err = znode.Get(ctx, q.s, q.items); errors.Is(err, zk.ErrNoNode) {
			err = nil
		}
		return err
	})
	var lists [wTail][]string
	for w, dir := range []string{q.ready, q.consumers, q.held, q.delayed, q.items} {
		r.Do(func() error {
			names, ev, err := znode.ChildrenW(ctx, q.s, dir)
			lists[w], d.ev[w] = names, ev
			return err
		})
	}
	if err := r.Wait(ctx); err != nil {
		return d.ended(ctx, err)
	}
	d.hwm = highMark(mark.Data)
	d.applyConsumers(lists[wConsumers])
	inboxes := make(map[string][]byte, len(d.live))
	var mu sync.Mutex
	for consumer := range d.live {
		r.Do(func() error {
			n, err := znode.Get(ctx, q.s, q.consumers+"/"+consumer)
			if errors.Is(err, zk.ErrNoNode) {
				return nil // gone since: its tickets go too
			}
			mu.Lock()
			inboxes[consumer] = n.Data
			mu.Unlock()
			return err
		})
	}
	if err := r.Wait(ctx); err != nil {
		return d.ended(ctx, err)
	}
	d.applyReady(lists[wReady])
	for consumer, data := range inboxes {
		for _, o := range parseInbox(data) {
			t := d.tickets[o.ticket]
			if t == nil || t.consumer != consumer {
				continue // settled
			}
			if !t.offered {
				d.ready = slices.DeleteFunc(d.ready, func(x *ticket) bool { return x == t })
				t.offered = true
				d.standing[consumer] = append(d.standing[consumer], t)
			}
			if o.name != "" {
				it := d.item(o.bucket, o.name)
				it.version, it.ticket, t.items = o.version, t, append(t.items, it)
			}
		}
	}
	d.applyHeld(lists[wHeld])
	d.applyDelayed(lists[wDelayed])
	d.applyBuckets(lists[wBuckets])
	d.dirty[wTail] = true
	return nil
}

// step sends what the view calls for (a hand-out multi, when none is out;
// the listings whose watches fired; the items to read; the side tasks),
// then takes in one outcome or event.
func (d *dispatcher) step(ctx context.Context) error {
	d.poll()
	if !d.multi && !d.needDead {
		if h := d.plan(); len(h.ops) > 0 {
			d.multi = true
			d.async(func() func() error {
				res, err := d.q.s.Conn().Multi(h.ops...)
				if d.q.handedOut != nil {
					d.q.handedOut()
				}
				return func() error {
					d.multi = false
					return d.settle(h, res, err)
				}
			})
		}
	}
	d.listDirty(ctx)
	d.readItems(ctx)
	d.sideTasks(ctx)
	return d.wait(ctx)
}

// listDirty lists the directories whose watches fired, each leaving a new
// watch, unless a listing of it is out. The current bucket is listed only
// when more items are wanted.
func (d *dispatcher) listDirty(ctx context.Context) {
	q := d.q
	dirs := [nWatched]string{q.ready, q.consumers, q.held, q.delayed, q.items, ""}
	if d.dirty[wTail] && len(d.free) < lowWater {
		dirs[wTail] = q.bucketPath(d.cur)
	}
	apply := [nWatched]func([]string){d.applyReady, d.applyConsumers, d.applyHeld, d.applyDelayed, d.applyBuckets, d.applyTail}
	for w, dir := range dirs {
		if !d.dirty[w] || d.listing[w] || dir == "" {
			continue
		}
		d.dirty[w], d.listing[w] = false, true
		watch, cur := w != wTail || d.cur == d.newest(), d.cur
		d.async(func() func() error {
			var names []string
			var ev <-chan zk.Event
			var err error
			if watch {
				names, ev, err = znode.ChildrenW(ctx, q.s, dir)
			} else if names, err = znode.Children(ctx, q.s, dir); names == nil {
				names = []string{} // listed, and empty
			}
			return func() error {
				d.listing[w] = false
				if err != nil {
					return d.ended(ctx, err)
				}
				if ev != nil {
					d.ev[w] = ev
				}
				if w != wTail || cur == d.cur {
					apply[w](names)
				}
				return nil
			}
		})
	}
}

// readItems reads the items whose data the next hand-out needs (see
// toRead), each once. A blob is read once for all its items that have
// not been handed out (their version is 0: only a hand-out bumps one); an
// item handed out before is read for its version, and then its blob, its
// payload being there or in its name.
func (d *dispatcher) readItems(ctx context.Context) {
	q := d.q
	type ofBlob struct {
		it  *item
		idx int
	}
	byBlob := map[string][]ofBlob{}
	for _, it := range d.toRead() {
		it.reading = true
		blob, idx, isBlob := q.blobOf(it.bucket, it.name)
		if isBlob && !it.again {
			byBlob[blob] = append(byBlob[blob], ofBlob{it, idx})
			continue
		}
		d.async(func() func() error {
			n, err := znode.Get(ctx, q.s, it.path(q))
			if data, ok := inlinePayload(it.name); ok && err == nil {
				n.Data = data
			}
			if err == nil && isBlob {
				var b znode.Node
				if b, err = znode.Get(ctx, q.s, blob); err == nil {
					n.Data, _ = blobPart(b.Data, idx)
				}
			}
			return func() error { return d.applyItemRead(ctx, it, n, err) }
		})
	}
	for blob, its := range byBlob {
		d.async(func() func() error {
			b, err := znode.Get(ctx, q.s, blob)
			return func() error {
				for _, x := range its {
					n := znode.Node{Stat: &zk.Stat{}}
					n.Data, _ = blobPart(b.Data, x.idx)
					if err := d.applyItemRead(ctx, x.it, n, err); err != nil {
						return err
					}
				}
				return nil
			}
		})
	}
}

// applyItemRead takes in the read of an item.
func (d *dispatcher) applyItemRead(ctx context.Context, it *item, n znode.Node, err error) error {
	it.reading = false
	switch {
	case err != nil && !errors.Is(err, zk.ErrNoNode):
		return d.ended(ctx, err)
	case it.ticket != nil:
		// Handed out while this read was out, its offer
		// without the payload: the view keeps no data of an
		// item held, and one given back is read again.
		return nil
	case err != nil:
		it.data, it.read = nil, false
	default:
		it.data, it.version, it.read = n.Data, n.Stat.Version, true
	}
	d.applyRead(it)
	return nil
}

func (d *dispatcher) newest() int64 {
	if len(d.buckets) == 0 {
		return -1
	}
	return d.buckets[len(d.buckets)-1]
}

// poll takes in, without waiting, the watches that fired, a reconnect
// (every listing is made again: a watch re-set may have missed a change),
// and the held items whose time has come; and judges the offered tickets
// gone, if consumers/ is current.
func (d *dispatcher) poll() {
	select {
	case <-d.reconnect:
		d.reconnect = d.q.s.NextReconnect()
		d.dirty = [nWatched]bool{true, true, true, true, true, true}
	default:
	}
	for w := range d.ev {
		select {
		case <-d.ev[w]:
			d.ev[w], d.dirty[w] = nil, true
		default:
		}
	}
	if d.cur < 0 {
		d.dirty[wTail] = false // no bucket yet: items/'s watch tells of the first
	}
	now := time.Now()
	d.later = slices.DeleteFunc(d.later, func(it *item) bool {
		if it.until.After(now) {
			return false
		}
		it.until = time.Time{}
		if d.items[it.id] == it {
			d.setFree(it)
		}
		return true
	})
	if !d.dirty[wConsumers] && !d.listing[wConsumers] {
		for _, t := range d.judge {
			d.gone(t)
		}
		d.judge = nil
	}
	if n := d.newest(); n >= 0 && len(d.ready) == 0 && d.perBucket[n] == 0 && d.maxSeen != d.triedDrop && !d.dirty[wTail] && !d.listing[wTail] &&
		!d.dirty[wHeld] && !d.listing[wHeld] {
		// The newest bucket goes too, once drained while no one waits (a
		// producer that puts into it then makes the next one); while
		// consumers wait, producers would keep making it again. Not while
		// held/ is not current: an item of a ticket settled is out of the
		// view until held/ shows it given back.
		d.drop, d.triedDrop = append(d.drop, n), d.maxSeen
	}
}

// wait waits for an outcome of what is out, a watch, the next held item or
// delayed item coming due, a reconnect, or the end of the leadership.
func (d *dispatcher) wait(ctx context.Context) error {
	var due time.Time
	for _, it := range d.later {
		if due.IsZero() || it.until.Before(due) {
			due = it.until
		}
	}
	for _, name := range d.delayed {
		if at, _, ok := parseDelayed(name); ok && (due.IsZero() || at.Before(due)) {
			due = at
		}
	}
	var timer <-chan time.Time
	if !due.IsZero() {
		t := time.NewTimer(time.Until(due) + time.Millisecond)
		defer t.Stop()
		timer = t.C
	}
	cases := []reflect.SelectCase{
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(d.results)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(d.reconnect)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(d.l.Done())},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(d.q.s.Done())},
	}
	for _, ev := range d.ev {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ev)})
	}
	i, v, _ := reflect.Select(cases)
	switch i {
	case 0:
		d.inflight--
		return v.Interface().(func() error)()
	case 1:
	case 2:
		d.reconnect = d.q.s.NextReconnect()
		d.dirty = [nWatched]bool{true, true, true, true, true, true}
	case 3:
		return errNotLeader
	case 4:
		return context.Cause(ctx)
	case 5:
		return d.q.s.Err()
	default:
		w := i - 6
		d.ev[w], d.dirty[w] = nil, true
		if znode.Dropped(v.Interface().(zk.Event)) {
			<-d.q.s.Done()
			return d.q.s.Err()
		}
	}
	return nil
}

// handOut is one round's multi and what it stands for.
type handOut struct {
	ops     []any
	what    []opOf              // what each op is, to read a failure by
	served  []*ticket           // in line order
	gets    map[*ticket][]*item // what each gets (none: a TryTake told so)
	planned map[*item]planned
	bury    []*item
	touched []string
	hwm     string
}

// planned is what a hand-out found of an item it hands out: its node in
// held/, which the multi deletes, and whether the multi bumps it.
type planned struct {
	held string
	bump bool
}

type opOf struct {
	t        *ticket
	it       *item
	consumer string
}

// plan hands the oldest free items to the longest-waiting tickets, in one
// multi, once it knows of every item that came back: each ticket in line
// order gets one item per pass, until it has as many as it wants; a
// TryTake's ticket with no item for it, while the view of the items is
// current, is told nothing is pending. It stops at an item that came back
// and is not read yet (its offer bumps its version), and moves to the dead
// letters an item that would be delivered more than WithMaxAttempts times.
func (d *dispatcher) plan() handOut {
	q := d.q
	h := handOut{gets: map[*ticket][]*item{}, planned: map[*item]planned{}}
	if d.dirty[wHeld] || d.listing[wHeld] || len(d.limbo) > 0 || len(d.judge) > 0 {
		// An item may be coming back, to go before those known free:
		// learn which first.
		return h
	}
	var line []*ticket
	for _, t := range d.ready {
		if d.live[t.consumer] { // else its inbox is not listed yet, or gone
			line = append(line, t)
		}
	}
	i, n := 0, 0
	next := func() *item {
		for i < len(d.free) {
			it := d.free[i]
			if it.again && !it.read {
				return nil // it must be read first
			}
			i++
			if it.again && q.maxAttempts > 0 && int(it.version)+2 > q.maxAttempts {
				h.bury = append(h.bury, it)
				continue
			}
			return it
		}
		return nil
	}
	for pass := 0; n < maxRound; pass++ {
		gave := false
		for _, t := range line {
			if pass >= t.want || n == maxRound {
				continue
			}
			it := next()
			if it == nil {
				break
			}
			if h.gets[t] == nil {
				h.served = append(h.served, t)
			}
			h.gets[t] = append(h.gets[t], it)
			gave, n = true, n+1
		}
		if !gave {
			break
		}
	}
	if i == len(d.free) && d.current() {
		for _, t := range line {
			if t.try() && h.gets[t] == nil {
				h.served = append(h.served, t) // nothing pending
			}
		}
	}
	if len(h.served) == 0 && len(h.bury) == 0 {
		return h
	}
	add := func(op any, of opOf) {
		h.ops, h.what = append(h.ops, op), append(h.what, of)
	}
	add(d.l.Guard(), opOf{})
	news := map[string][]*ticket{}
	h.hwm = d.hwm
	for _, t := range h.served {
		add(&zk.SetDataRequest{Path: q.ready + "/" + t.name, Data: []byte{}, Version: 0}, opOf{t: t})
		if news[t.consumer] == nil {
			h.touched = append(h.touched, t.consumer)
		}
		news[t.consumer] = append(news[t.consumer], &ticket{ticketName: t.ticketName, name: t.name, items: h.gets[t]})
		for _, it := range h.gets[t] {
			h.hwm = max(h.hwm, it.id)
			h.planned[it] = planned{it.held, it.again}
			if it.again {
				add(&zk.SetDataRequest{Path: it.path(q), Data: it.data, Version: it.version}, opOf{it: it})
			}
			if it.held != "" {
				add(&zk.DeleteRequest{Path: q.held + "/" + it.held, Version: -1}, opOf{it: it})
			}
		}
	}
	for _, it := range h.bury {
		_, key, _ := parseItem(it.name)
		var extra []any
		if it.held != "" {
			extra = append(extra, &zk.DeleteRequest{Path: q.held + "/" + it.held, Version: -1})
		}
		for _, op := range q.buryOps(it.id, it.path(q), key, it.version, int(it.version)+1, it.data, extra...) {
			add(op, opOf{it: it})
		}
	}
	for _, consumer := range h.touched {
		os := append(d.offers(d.standing[consumer], false), d.offers(news[consumer], true)...)
		add(&zk.SetDataRequest{Path: q.consumers + "/" + consumer, Data: encodeInbox(os), Version: -1},
			opOf{consumer: consumer})
	}
	if h.hwm != d.hwm {
		add(&zk.SetDataRequest{Path: q.items, Data: []byte(h.hwm), Version: -1}, opOf{})
	}
	return h
}

// offers are an inbox's lines for the tickets ts: each item offered (its
// version as the hand-out leaves it), with its payload when the offers are
// fresh and the dispatcher has it; a TryTake told nothing is pending.
func (d *dispatcher) offers(ts []*ticket, fresh bool) []offer {
	var os []offer
	carried := 0
	for _, t := range ts {
		if len(t.items) == 0 && t.try() {
			os = append(os, offer{ticket: t.name})
		}
		for _, it := range t.items {
			o := offer{ticket: t.name, bucket: it.bucket, name: it.name, version: it.version}
			if it.again {
				o.version++ // as the hand-out bumps it
			}
			if data := it.data; fresh && it.read && !inline(it.name) && len(data) <= carryMax && carried+len(data) <= inboxCarry {
				o.data, o.carried = data, true
				carried += len(data)
			}
			os = append(os, o)
		}
	}
	return os
}

// current says whether the view of the items is current: nothing put
// since it was listed, nothing of a consumer gone or come back unknown,
// no delayed item due. Only then is a TryTake told nothing is pending.
func (d *dispatcher) current() bool {
	for _, w := range []int{wHeld, wDelayed, wBuckets, wTail} {
		if d.dirty[w] || d.listing[w] {
			return false
		}
	}
	return d.cur >= d.newest() && len(d.limbo) == 0 && len(d.judge) == 0 && len(d.dueDelayed()) == 0 && d.promoting == 0
}

// settle takes in the outcome of a round's multi. A refusal changes
// nothing but the view of what refused it; a multi whose connection
// dropped may have landed, so the view is read again.
func (d *dispatcher) settle(h handOut, res []zk.MultiResponse, err error) error {
	i, err := znode.MultiErr(res, err)
	switch {
	case err == nil:
	case i < 0 && session.IsConnErr(err):
		return errResync
	case i < 0:
		return err
	case i == 0:
		return errNotLeader
	default:
		return d.refused(h.what[i], err)
	}
	for _, t := range h.served {
		d.ready = slices.DeleteFunc(d.ready, func(x *ticket) bool { return x == t })
		t.offered = true
		d.standing[t.consumer] = append(d.standing[t.consumer], t)
		for _, it := range h.gets[t] {
			p := h.planned[it]
			if p.bump {
				it.version++
				d.q.s.Telemetry().Redelivered()
			}
			if it.held != p.held {
				// Given back already: a listing of held/ taken in before
				// this reply (their goroutines race to hand them over)
				// showed a node of its that the multi did not delete. It
				// stays free, to be read again.
				it.read, it.data = false, nil
				continue
			}
			it.ticket, t.items = t, append(t.items, it)
			it.again, it.read, it.data, it.held = false, false, nil, ""
		}
	}
	taken := make(map[*item]bool, len(h.bury))
	for _, t := range h.served {
		for _, it := range t.items {
			taken[it] = true
		}
		if d.tickets[t.name] != t {
			d.judge = append(d.judge, t) // seen gone meanwhile
		}
	}
	for _, it := range h.bury {
		taken[it] = true
	}
	d.free = slices.DeleteFunc(d.free, func(it *item) bool { return taken[it] })
	for it := range taken {
		it.free = false
	}
	for _, it := range h.bury {
		d.forget(it)
		d.q.s.Telemetry().Buried()
		d.q.log.Info("fairqueue: item moved to dead letters", "id", it.id, "attempts", it.version+1)
	}
	d.hwm = h.hwm
	return nil
}

// refused takes in the op that made a multi fail: what it names changed.
func (d *dispatcher) refused(of opOf, err error) error {
	switch {
	case of.consumer != "":
		d.live[of.consumer] = false // its inbox is gone: its consumer is
		d.dirty[wConsumers] = true
	case of.t != nil && errors.Is(err, zk.ErrNoNode):
		t := of.t
		d.ready = slices.DeleteFunc(d.ready, func(x *ticket) bool { return x == t })
		delete(d.tickets, t.name)
	case of.t != nil:
		return fmt.Errorf("%w: ticket %s served already", errResync, of.t.name)
	case of.it != nil && errors.Is(err, zk.ErrNoNode) && of.it.held != "":
		of.it.held, d.dirty[wHeld] = "", true
	case of.it != nil && errors.Is(err, zk.ErrNodeExists):
		d.forget(of.it) // buried already
	case of.it != nil:
		of.it.read = false // changed under us, or dead/ is missing: read it again
		if errors.Is(err, zk.ErrNoNode) {
			d.needDead = true
		}
	default:
		return fmt.Errorf("%w: hand-out refused: %w", errResync, err)
	}
	return nil
}

// gone judges an offered ticket that is gone, now that consumers/ is
// current: its consumer settled it (acked, or gave its item back through
// held/), or, gone too, left its item to come back.
func (d *dispatcher) gone(t *ticket) {
	d.standing[t.consumer] = slices.DeleteFunc(d.standing[t.consumer], func(x *ticket) bool { return x == t })
	if len(d.standing[t.consumer]) == 0 {
		delete(d.standing, t.consumer)
	}
	for _, it := range t.items {
		if it.ticket != t {
			continue
		}
		it.ticket = nil
		if d.live[t.consumer] {
			d.forget(it)
			continue
		}
		it.limbo, it.again = true, true
		d.limbo = append(d.limbo, it)
		d.dirty[wHeld] = true // listed after this, held/ shows the item if its consumer gave it back
	}
}

// toRead returns the items whose data the next hand-out needs, not read
// nor being read: those that came back, near the head of free; those of
// consumers gone; and the next few free ones (readAhead) past those the
// tickets waiting will take, whose offers then carry their payloads: a
// consumer that asks for one item at a time gets it a round trip sooner
// (only while readsAhead). Beyond those, in a big round, consumers read
// their items themselves, so that the dispatcher's session does not read
// for everyone.
func (d *dispatcher) toRead() []*item {
	var out []*item
	for _, it := range d.limbo {
		if !it.reading {
			out = append(out, it)
		}
	}
	// Not those the tickets waiting will be handed before a read could
	// come back (their offers would go without the payloads).
	skip := 0
	for _, t := range d.ready {
		skip += t.want
	}
	ahead := 0
	if d.readsAhead() {
		ahead = readAhead
	}
	for i, it := range d.free[:min(len(d.free), maxRound)] {
		if !it.read && !it.reading && (it.again || i >= skip && i < skip+ahead) {
			out = append(out, it)
		}
	}
	return out
}

// readsAhead says whether the items past those the tickets waiting will
// take are read ahead: while half or more of the tickets known ask for one
// item, or they ask for few (2*readAhead) in all. Many consumers that ask
// for lots read their own, and in a busy round an item read ahead is often
// handed out before its read is back (both then read it).
func (d *dispatcher) readsAhead() bool {
	singles, wants := 0, 0
	for _, t := range d.tickets {
		if t.want == 1 {
			singles++
		}
		wants += t.want
	}
	return 2*singles >= len(d.tickets) || wants <= 2*readAhead
}

// applyRead takes in the read of an item: a consumer gone left it, and it
// is free again unless held/ showed it given back; one gone was settled.
func (d *dispatcher) applyRead(it *item) {
	d.limbo = slices.DeleteFunc(d.limbo, func(x *item) bool { return x == it })
	switch {
	case !it.read:
		d.forget(it)
	case it.limbo && it.held == "":
		it.limbo = false
		d.setFree(it)
	default:
		it.limbo = false
	}
}

// applyReady takes in a listing of ready/: new tickets wait, oldest first;
// a waiting one gone left; an offered one gone is judged (see gone).
func (d *dispatcher) applyReady(names []string) {
	if names == nil {
		return
	}
	present := make(map[string]bool, len(names))
	var fresh []*ticket
	for _, name := range names {
		tn, ok := parseTicket(name)
		if !ok {
			continue
		}
		present[name] = true
		if d.tickets[name] == nil {
			t := &ticket{ticketName: tn, name: name}
			d.tickets[name] = t
			fresh = append(fresh, t)
		}
	}
	for name, t := range d.tickets {
		if present[name] {
			continue
		}
		delete(d.tickets, name)
		if t.offered {
			d.judge = append(d.judge, t)
		} else {
			d.ready = slices.DeleteFunc(d.ready, func(x *ticket) bool { return x == t })
		}
	}
	slices.SortFunc(fresh, func(a, b *ticket) int { return int(a.seq - b.seq) })
	d.ready = append(d.ready, fresh...)
}

func (d *dispatcher) applyConsumers(names []string) {
	if names == nil {
		return
	}
	d.live = make(map[string]bool, len(names))
	for _, n := range names {
		d.live[n] = true
	}
}

// applyHeld takes in a listing of held/: an item given back is held until
// its time, then free; its next offer bumps it.
func (d *dispatcher) applyHeld(names []string) {
	if names == nil {
		return
	}
	present := make(map[string]bool, len(names))
	for _, name := range names {
		present[name] = true
		until, b, iname, ok := parseHeld(name)
		if !ok || d.heldSeen[name] {
			continue
		}
		d.heldSeen[name] = true
		it := d.item(b, iname)
		if t := it.ticket; t != nil { // given back by its consumer
			t.items = slices.DeleteFunc(t.items, func(x *item) bool { return x == it })
			it.ticket = nil
		}
		d.unfree(it)
		it.again, it.held, it.limbo = true, name, false
		if until.After(time.Now()) {
			it.until, d.later = until, append(d.later, it)
		} else {
			d.setFree(it)
		}
	}
	for name := range d.heldSeen {
		if !present[name] {
			delete(d.heldSeen, name) // offered again (by us), or buried
		}
	}
}

func (d *dispatcher) applyDelayed(names []string) {
	if names != nil {
		d.delayed = names
	}
}

func (d *dispatcher) dueDelayed() []string {
	var due []string
	for _, name := range d.delayed {
		if at, _, ok := parseDelayed(name); ok && !at.After(time.Now()) {
			due = append(due, name)
		}
	}
	return due
}

// applyBuckets takes in a listing of items/: the buckets, oldest first.
func (d *dispatcher) applyBuckets(names []string) {
	if names == nil {
		return
	}
	d.buckets = d.buckets[:0]
	for _, name := range names {
		if n, ok := parseBucket(name); ok {
			d.buckets = append(d.buckets, n)
		}
	}
	slices.Sort(d.buckets)
	switch {
	case len(d.buckets) == 0:
		d.cur = -1 // drained, and its last bucket deleted
	case d.cur < 0 && len(d.buckets) > 0:
		d.cur, d.dirty[wTail] = d.buckets[0], true
	case d.cur != d.newest():
		d.dirty[wTail] = true // list it once more, then go on
	}
}

// applyTail takes in the listing of the current bucket: its names past the
// last one seen are free, handed out before if at or below the high mark.
// A bucket that is not the newest is then done: the next one is listed,
// and it is deleted once its items are settled.
func (d *dispatcher) applyTail(names []string) {
	if names == nil {
		return
	}
	var fresh []*item
	for _, name := range names {
		seq, _, ok := parseItem(name)
		if id := itemID(d.cur, seq); ok && id > d.maxSeen && d.items[id] == nil {
			fresh = append(fresh, d.item(d.cur, name))
		}
	}
	slices.SortFunc(fresh, func(a, b *item) int { return int(a.seq - b.seq) })
	for _, it := range fresh {
		d.maxSeen = it.id
		it.again, it.free = it.id <= d.hwm, true
		if !it.again {
			it.data, it.read = inlinePayload(it.name) // its version is 0: nothing to read
		}
		d.free = append(d.free, it)
	}
	if d.cur != d.newest() {
		// Nothing more comes into a bucket once a newer one exists.
		if i, _ := slices.BinarySearch(d.buckets, d.cur+1); i < len(d.buckets) {
			old := d.cur
			d.cur, d.dirty[wTail] = d.buckets[i], true
			d.maxSeen = max(d.maxSeen, itemID(old, 1<<31-1))
			if d.perBucket[old] == 0 {
				d.drop = append(d.drop, old)
			}
		}
	}
}

// item returns the item of bucket b named name in the view, adding it.
func (d *dispatcher) item(b int64, name string) *item {
	seq, _, _ := parseItem(name)
	id := itemID(b, seq)
	if it := d.items[id]; it != nil {
		return it
	}
	it := &item{bucket: b, seq: seq, name: name, id: id}
	d.items[id] = it
	d.perBucket[b]++
	// An item may come back into the view with no new id listed: one given
	// back after its ticket was judged settled (a Job lost while its
	// consumer lives). A delete of the newest bucket tried meanwhile found
	// it there; once drained again, the bucket is tried again.
	d.triedDrop = noDrop
	return it
}

// forget takes an item settled for good out of the view; its bucket, once
// drained, is deleted.
func (d *dispatcher) forget(it *item) {
	if d.items[it.id] != it {
		return
	}
	delete(d.items, it.id)
	d.unfree(it)
	if d.perBucket[it.bucket]--; d.perBucket[it.bucket] <= 0 {
		delete(d.perBucket, it.bucket)
		if it.bucket < d.cur {
			d.drop = append(d.drop, it.bucket)
		}
	}
}

// setFree puts it among the free items, at its place by id.
func (d *dispatcher) setFree(it *item) {
	if it.free {
		return
	}
	i, _ := slices.BinarySearchFunc(d.free, it.id, func(x *item, id string) int { return strings.Compare(x.id, id) })
	d.free, it.free = slices.Insert(d.free, i, it), true
}

// unfree takes it out of the free items (an item settled is most often
// not among them: no look then).
func (d *dispatcher) unfree(it *item) {
	if it.free {
		d.free, it.free = slices.DeleteFunc(d.free, func(x *item) bool { return x == it }), false
	}
}

// sideTasks sends what the dispatcher does besides handing out: moving
// the delayed items that came due to the end of the queue, deleting
// drained buckets (one that is not empty after all stays), and making
// dead/ when a bury found it missing.
func (d *dispatcher) sideTasks(ctx context.Context) {
	q := d.q
	if due := d.dueDelayed(); len(due) > 0 {
		d.delayed = slices.DeleteFunc(d.delayed, func(n string) bool { return slices.Contains(due, n) })
		d.promoting++
		d.async(func() func() error {
			err := q.promote(ctx, due)
			return func() error {
				d.promoting--
				if err != nil {
					q.log.Warn("fairqueue: could not move delayed items into the queue; trying again", "err", err)
					d.dirty[wDelayed] = true
				}
				return nil
			}
		})
	}
	for _, b := range d.drop {
		d.async(func() func() error {
			err := q.dropBucket(b)
			if err != nil && !errors.Is(err, zk.ErrNotEmpty) && !errors.Is(err, zk.ErrNoNode) && !session.IsConnErr(err) {
				q.log.Debug("fairqueue: could not delete drained bucket", "bucket", b, "err", err)
			}
			return func() error {
				if session.IsConnErr(err) {
					// It may not have landed: again (a bucket's number is
					// never made again, so a late delete harms nothing).
					d.drop = append(d.drop, b)
				}
				return nil
			}
		})
	}
	d.drop = nil
	if d.needDead && !d.multi {
		d.needDead = false
		d.async(func() func() error {
			err := znode.EnsureDir(ctx, q.s, q.dead, q.acl)
			return func() error {
				if err != nil {
					return d.ended(ctx, err)
				}
				return nil
			}
		})
	}
}

// dropBucket deletes a drained bucket with its blobs; not while an item
// is in it (the multi fails).
func (q *Queue) dropBucket(b int64) error {
	blobs, _, err := q.s.Conn().Children(q.blobDir(b))
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	var ops []any
	for _, name := range blobs {
		ops = append(ops, &zk.DeleteRequest{Path: q.blobDir(b) + "/" + name, Version: -1})
	}
	if err == nil {
		ops = append(ops, &zk.DeleteRequest{Path: q.blobDir(b), Version: -1})
	}
	ops = append(ops, &zk.DeleteRequest{Path: q.bucketPath(b), Version: -1})
	res, err := q.s.Conn().Multi(ops...)
	_, err = znode.MultiErr(res, err)
	return err
}

// ended names why a read stopped: the end of the leadership, ctx or the
// session (each ends the dispatcher), or anything else (read again).
func (d *dispatcher) ended(ctx context.Context, err error) error {
	switch {
	case d.l.Err() != nil:
		return errNotLeader
	case ctx.Err() != nil:
		return context.Cause(ctx)
	case d.q.s.Err() != nil:
		return d.q.s.Err()
	}
	d.q.log.Debug("fairqueue: dispatcher read failed; reading the queue again", "err", err)
	return fmt.Errorf("%w: %w", errResync, err)
}

// highMark is the highest id a queue's dispatchers handed out, from
// items/'s data.
func highMark(data []byte) string {
	if _, _, err := parseID(string(data)); err != nil {
		return ""
	}
	return string(data)
}
