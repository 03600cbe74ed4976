package fairqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// A Queue that takes has an inbox, consumers/<consumer> (see
// consumerName), EPHEMERAL: the dispatcher writes into it every offer
// standing for the Queue's tickets, each a line
// "<ticket> <bucket>/<item> <version> <n>" and the item's payload, n
// bytes (n = -1: not carried, the consumer reads the item, or takes the
// payload from its name), or a line
// "<ticket> -" to tell a TryTake that nothing is pending. A ticket's
// offers are together, and those after its first name it "." (a ticket's
// name is half a line). An offer stands until its ticket is gone; as the
// inbox is the consumer's, a consumer that dies takes its offers with it,
// and the dispatcher offers their items again. One read of the inbox tells
// a consumer of every offer made since it last looked; only the offers new
// in a write carry payloads (the consumer has most likely read the others
// already, and reads an item itself when it has not).

// offer is one offer of an inbox.
type offer struct {
	ticket  string
	bucket  int64
	name    string // the item's node; "" tells a TryTake: nothing pending
	version int32  // the item's data version: its deliveries before this one
	data    []byte // the payload, when carried
	carried bool
}

func (o offer) id() string { return itemID(o.bucket, mustSeq(o.name)) }

func mustSeq(name string) int64 {
	seq, _, _ := parseItem(name)
	return seq
}

func encodeInbox(os []offer) []byte {
	var b []byte
	for i, o := range os {
		t := o.ticket
		if i > 0 && t == os[i-1].ticket {
			t = "." // the ticket of the offer before
		}
		// No fmt: the dispatcher writes every standing offer again with
		// each hand-out.
		b = append(append(b, t...), ' ')
		if o.name == "" {
			b = append(b, "-\n"...)
			continue
		}
		b = appendPadded(append(b, bucketPrefix...), o.bucket, 10)
		b = append(append(append(b, '/'), o.name...), ' ')
		b = append(strconv.AppendInt(b, int64(o.version), 10), ' ')
		if !o.carried {
			b = append(b, "-1\n"...)
			continue
		}
		b = append(strconv.AppendInt(b, int64(len(o.data)), 10), '\n')
		b = append(b, o.data...)
	}
	return b
}

// parseInbox reads an inbox's offers, up to the first it cannot read.
func parseInbox(b []byte) []offer {
	var out []offer
	for len(b) > 0 {
		line, rest, ok := bytes.Cut(b, []byte("\n"))
		f := strings.Fields(string(line))
		b = rest
		if len(f) > 0 && f[0] == "." {
			if len(out) == 0 {
				return out
			}
			f[0] = out[len(out)-1].ticket
		}
		switch {
		case !ok:
			return out
		case len(f) == 2 && f[1] == "-":
			out = append(out, offer{ticket: f[0]})
			continue
		case len(f) != 4:
			return out
		}
		bk, name, _ := strings.Cut(f[1], "/")
		n, bok := parseBucket(bk)
		_, _, iok := parseItem(name)
		v, verr := strconv.ParseInt(f[2], 10, 32)
		size, serr := strconv.Atoi(f[3])
		if !bok || !iok || verr != nil || serr != nil || size > len(b) {
			return out
		}
		o := offer{ticket: f[0], bucket: n, name: name, version: int32(v)}
		if size >= 0 {
			o.data, o.carried, b = b[:size:size], true, b[size:]
		}
		out = append(out, o)
	}
	return out
}

// answer is what a ticket got, as its consumer read it: the offers made
// to it, with the inbox's Mzxid at that read, the deliveries' fencing
// token (Job.Token).
type answer struct {
	ticket string
	offers []offer
	token  int64
}

// inbox is a Queue's inbox: one goroutine reads it whenever it changes and
// hands each answer to the ticket that waits for it.
type inbox struct {
	q    *Queue
	path string

	mu       sync.Mutex
	made     bool                     // the inbox node exists, as far as we know
	running  bool                     // the reader runs
	waiting  map[string]chan<- answer // our tickets waiting for their answer
	answered map[string]bool          // tickets answered, as the last read showed them
	early    map[string]answer        // answers read before their ticket was waited on
}

// expect sends ticket's answer on ch, once: at once if it was read
// already, else when it is.
func (in *inbox) expect(ticket string, ch chan<- answer) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if a, ok := in.early[ticket]; ok {
		delete(in.early, ticket)
		in.answered[ticket] = true
		ch <- a
		return
	}
	in.waiting[ticket] = ch
	if !in.running && in.q.s.Err() == nil {
		in.running = true
		go in.read()
	}
}

// forget stops waiting for ticket's answer; it returns it, if it came.
func (in *inbox) forget(ticket string) (answer, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.waiting, ticket)
	a, ok := in.early[ticket]
	delete(in.early, ticket)
	return a, ok
}

// read reads the inbox, and again each time it changes or the client
// reconnects (a watch re-set then may have missed a change), until the
// Queue is closed or the session is over. While no ticket of ours waits,
// the dispatcher writes nothing there, and the reader costs nothing.
func (in *inbox) read() {
	q := in.q
	defer func() {
		in.mu.Lock()
		in.running = false
		in.mu.Unlock()
	}()
	for {
		reconnect := q.s.NextReconnect()
		n, err := znode.WatchNode(context.Background(), q.s, in.path)
		if err != nil {
			return // the session is over: every waiter sees it
		}
		if n.Gone() {
			// Deleted by Close, or by a stranger: then make it again, or
			// the dispatcher skips our tickets for good.
			in.mu.Lock()
			in.made = false
			in.mu.Unlock()
			if q.isClosed() || in.ensure(context.Background()) != nil {
				return
			}
			continue
		}
		in.deliver(parseInbox(n.Data), n.Stat.Mzxid)
		select {
		case e := <-n.Ev:
			if znode.Dropped(e) {
				return
			}
		case <-reconnect:
		case <-q.closing:
			return
		case <-q.s.Done():
			return
		}
	}
}

// deliver hands the answers read to the tickets waiting for them. An
// answer for a ticket not waited on yet (its create's reply has not come
// back) is kept for expect, until a read no longer shows it.
func (in *inbox) deliver(os []offer, token int64) {
	var order []string
	byTicket := map[string]*answer{}
	for _, o := range os {
		a := byTicket[o.ticket]
		if a == nil {
			a = &answer{ticket: o.ticket, token: token}
			byTicket[o.ticket], order = a, append(order, o.ticket)
		}
		a.offers = append(a.offers, o)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	answered, early := map[string]bool{}, map[string]answer{}
	for _, t := range order {
		ch, waits := in.waiting[t]
		switch {
		case in.answered[t]:
		case waits:
			delete(in.waiting, t)
			ch <- *byTicket[t]
		default:
			if a, ok := in.early[t]; ok {
				early[t] = a // as first read: a later write carries no payloads
			} else {
				early[t] = *byTicket[t]
			}
			continue
		}
		answered[t] = true
	}
	in.answered, in.early = answered, early
}

// ensure makes the inbox, once; the directory too when it is missing.
func (in *inbox) ensure(ctx context.Context) error {
	in.mu.Lock()
	made := in.made
	in.mu.Unlock()
	if made {
		return nil
	}
	q := in.q
	for range maxDirTries {
		_, err := znode.Retry(ctx, q.s, func() (string, error) {
			return q.s.Conn().Create(in.path, []byte{}, zk.FlagEphemeral, q.acl)
		})
		switch {
		case errors.Is(err, zk.ErrNoNode):
			if err := znode.EnsureDir(ctx, q.s, q.consumers, q.acl); err != nil {
				return err
			}
			continue
		case err == nil, errors.Is(err, zk.ErrNodeExists):
			// Made (NodeExists: by a create whose reply was lost).
		default:
			return err
		}
		in.mu.Lock()
		in.made = true
		in.mu.Unlock()
		return nil
	}
	return fmt.Errorf("make %s: %s keeps vanishing", in.path, q.consumers)
}

// remove deletes the inbox once the Queue is closed (Close): its tickets
// still waiting are dropped first; while a Job holds a ticket, its offer
// stands in the inbox, and the last Job to end removes it. A write of the
// dispatcher's meanwhile (the version moved) leaves it to the session's
// end.
func (in *inbox) remove(ctx context.Context) error {
	q := in.q
	if q.s.Err() != nil {
		return nil // gone with the session
	}
	n, err := znode.Get(ctx, q.s, in.path)
	if err != nil {
		return ignoreNoNode(err)
	}
	names, err := znode.Children(ctx, q.s, q.ready)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	for _, name := range names {
		t, ok := parseTicket(name)
		switch {
		case !ok || t.consumer != q.name:
		case q.holds(name):
			return nil
		default:
			if err := q.dropStep(name)(); err != nil {
				return err
			}
		}
	}
	_, err = znode.Retry(ctx, q.s, func() (struct{}, error) { return struct{}{}, q.s.Conn().Delete(in.path, n.Stat.Version) })
	if err == nil || errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
		return nil
	}
	return err
}
