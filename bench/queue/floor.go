package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
)

// The floor is what any ZooKeeper queue with fairqueue's guarantees must
// write per item, and nothing else: a create of the item, a claim (a multi
// of an EPHEMERAL claim node and a version-checked setData of the item, as
// fairqueue's), and an ack (a multi deleting both). Which item a consumer
// claims is decided for free, in this process: producers hand the names
// they created to consumers through a channel, so nothing is listed, no
// claim ever loses a race and no consumer waits on another. No real queue
// can do with less; the ratio of a queue's items/s to the floor's in the
// same round says how close it comes.

// floorItem is an item put, handed to a consumer.
type floorItem struct {
	path string
	data []byte
}

// floorQueue is one round's floor: its directories and the hand-off.
type floorQueue struct {
	items, claims string
	acl           []zk.ACL
	next          chan floorItem
}

// newFloor makes the round's directories at path.
func newFloor(ctx context.Context, s *zkrecipes.Session, path string) (*floorQueue, error) {
	f := &floorQueue{items: path + "/items", claims: path + "/claims", acl: zk.WorldACL(zk.PermAll),
		next: make(chan floorItem, 1<<20)}
	for _, p := range []string{path, f.items, f.claims} {
		if _, err := s.Conn().Create(p, nil, 0, f.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return nil, fmt.Errorf("floor: create %s: %w", p, err)
		}
	}
	return f, nil
}

// put creates one item and hands it on.
func (f *floorQueue) put(conn *zk.Conn, data []byte) error {
	p, err := conn.Create(f.items+"/i-", data, zk.FlagSequence, f.acl)
	if err != nil {
		return err
	}
	f.next <- floorItem{p, data}
	return nil
}

// take waits for an item and claims it.
func (f *floorQueue) take(ctx context.Context, conn *zk.Conn) (floorItem, error) {
	var it floorItem
	select {
	case it = <-f.next:
	case <-ctx.Done():
		return it, ctx.Err()
	}
	_, err := conn.Multi(
		&zk.CreateRequest{Path: f.claims + "/" + it.path[len(f.items)+1:], Data: []byte{}, Acl: f.acl, Flags: zk.FlagEphemeral},
		&zk.SetDataRequest{Path: it.path, Data: it.data, Version: 0})
	return it, err
}

// ack deletes the item and its claim.
func (f *floorQueue) ack(conn *zk.Conn, it floorItem) error {
	_, err := conn.Multi(
		&zk.DeleteRequest{Path: it.path, Version: 1},
		&zk.DeleteRequest{Path: f.claims + "/" + it.path[len(f.items)+1:], Version: -1})
	return err
}

// floorWorkers are the sessions of one floor round.
type floorWorkers struct {
	f     *floorQueue
	conns []*zk.Conn
	close func()
}

// openFloor connects the producers' and the consumers' sessions (through
// reqs' dialers) and makes the round's directories.
func openFloor(ctx context.Context, servers []string, path string, producers, consumers int, reqs *Requests) (*floorWorkers, error) {
	ss, closeAll, err := connectAll(ctx, servers, producers, consumers, reqs)
	w := &floorWorkers{close: closeAll}
	if err != nil {
		return w, err
	}
	for _, s := range ss {
		w.conns = append(w.conns, s.Conn())
	}
	w.f, err = newFloor(ctx, ss[0], path)
	return w, err
}

// runFloor runs the loop with the floor, in this process.
func runFloor(ctx context.Context, servers []string, path string, l Loop, reqs *Requests) ([]Report, func() Counts, error) {
	fw, err := openFloor(ctx, servers, path, l.Producers, l.Consumers, reqs)
	defer fw.close()
	if err != nil {
		return nil, nil, err
	}
	w := newWindow(time.Now(), l)
	counted := reqs.during(w)
	return fw.run(ctx, l, w, nil, nil, nil), counted, nil
}

// run runs the workers until the window w ends. gate, put and taken are
// as for produce and consume.
func (fw *floorWorkers) run(ctx context.Context, l Loop, w window, gate func() bool, put, taken *atomic.Int64) []Report {
	payload := bytes.Repeat([]byte{'x'}, l.Payload)
	reports := make([]Report, len(fw.conns))
	var wg sync.WaitGroup
	for i, conn := range fw.conns {
		wg.Go(func() {
			if i < l.Producers {
				reports[i] = fw.produce(conn, fmt.Sprintf("producer-%d", i), payload, w, gate, put)
			} else {
				reports[i] = fw.consume(ctx, conn, fmt.Sprintf("consumer-%d", i-l.Producers), w, l.Work, taken)
			}
		})
	}
	wg.Wait()
	return reports
}

func (fw *floorWorkers) produce(conn *zk.Conn, name string, payload []byte, w window, gate func() bool, put *atomic.Int64) Report {
	rep := Report{Worker: name}
	for time.Now().Before(w.end) {
		if gate != nil && !gate() {
			time.Sleep(time.Millisecond)
			continue
		}
		if err := fw.f.put(conn, payload); err != nil {
			rep.Error = err.Error()
			return rep
		}
		if put != nil {
			put.Add(1)
		}
		rep.PutsAll++
		if w.in(time.Now()) {
			rep.Puts++
		}
	}
	return rep
}

func (fw *floorWorkers) consume(ctx context.Context, conn *zk.Conn, name string, w window, work time.Duration, taken *atomic.Int64) Report {
	rep := Report{Worker: name}
	tctx, cancel := context.WithDeadline(ctx, w.end)
	defer cancel()
	for {
		t0 := time.Now()
		if !t0.Before(w.end) {
			return rep
		}
		it, err := fw.f.take(tctx, conn)
		if err != nil {
			if tctx.Err() != nil && ctx.Err() == nil {
				return rep // the window is over
			}
			rep.Error = err.Error()
			return rep
		}
		got := time.Now()
		if taken != nil {
			taken.Add(1)
		}
		if w.in(got) {
			rep.TakeUS = append(rep.TakeUS, got.Sub(t0).Microseconds())
		}
		if work > 0 {
			time.Sleep(work)
		}
		if err := fw.f.ack(conn, it); err != nil {
			rep.Error = err.Error()
			return rep
		}
		rep.AckedAll++
		if w.in(time.Now()) {
			rep.Acked++
		}
	}
}
