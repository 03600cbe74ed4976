package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
)

// queuePut is `zklock queue put`: put each DATA argument, or each line of
// stdin as it comes, in the queue.
func (c *cli) queuePut(args []string) (int, error) {
	const name, synopsis = "queue put", "queue put [-key K] [-delay D] PATH [DATA...]"
	fs := c.flagSet(name)
	key := fs.String("key", "", "put one item with this `key`: a retry with the same key adds nothing while the item is in the queue")
	delay := fs.Duration("delay", 0, "keep the items from consumers until `D` has passed")
	c.listing = true
	if err := c.parse(fs, args, synopsis); err != nil {
		return exitUsage, err
	}
	path, data, err := c.queuePath(fs, name)
	if err != nil {
		return exitUsage, err
	}
	switch {
	case *delay < 0:
		return exitUsage, usagef("%s: -delay must not be negative", name)
	case *key != "" && len(data) > 1:
		return exitUsage, usagef("%s: -key is for one item, got %d", name, len(data))
	}
	p := &putter{cli: c, path: path, key: *key, delay: *delay, fromArgs: len(data) > 0}
	if p.fromArgs {
		p.items = make(chan item, len(data))
		for i, d := range data {
			p.items <- newItem(i+1, []byte(d), len(d))
		}
		close(p.items)
	} else {
		// Read before connecting, so that a line that is ready is
		// not held up by the connect.
		p.items = make(chan item, fairqueue.MaxBatch)
		go readItems(os.Stdin, p.items)
	}

	ctx, q, done, err := openUntilSignal(c, path, useQueue(name, true), fairqueue.New)
	if err != nil {
		return failed(err)
	}
	defer done()
	p.q = q
	return p.run(ctx)
}

// item is one item to put: an argument or a line of stdin.
type item struct {
	n    int    // its argument's or line's number, from 1
	data []byte // without the line end; nil when too large
	size int    // its length in bytes
	err  error  // reading stdin failed: no item, and no more
}

func newItem(n int, data []byte, size int) item {
	if size > zkrecipes.MaxDataSize {
		data = nil
	}
	return item{n: n, data: data, size: size}
}

// tooLarge reports whether the item is over the size limit of an item.
func (it item) tooLarge() bool { return it.size > zkrecipes.MaxDataSize }

// readItems sends each line of r on out as soon as it is read, and closes
// out at the end of r. A line's "\n" or "\r\n" is not part of it (nor is a
// "\r" ending the last line, as with bufio.ScanLines); a last line without
// a line end is a line. Lines of any length are read, but only the size
// limit of an item is kept: a longer line is sent with its size and no
// data. A failed read is sent as an item with err, and ends it.
//
// It may be left blocked on a read of stdin when zklock stops early:
// zklock exits then.
func readItems(r io.Reader, out chan<- item) {
	defer close(out)
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		data, size, err := nextLine(br)
		switch {
		case err != nil:
			out <- item{n: n, err: fmt.Errorf("reading stdin: %w", err)}
			return
		case size < 0:
			return
		}
		out <- newItem(n, data, size)
	}
}

// nextLine reads a line: its data (when not over the size limit) and its
// size, both without the line end; size -1 at the end of input.
func nextLine(br *bufio.Reader) ([]byte, int, error) {
	const room = zkrecipes.MaxDataSize + 2 // the data and "\r\n"
	var kept, tail []byte                  // the line's first bytes, its last two
	size := 0
	for {
		frag, err := br.ReadSlice('\n')
		size += len(frag)
		kept = append(kept, frag[:min(len(frag), room-len(kept))]...)
		tail = append(tail, frag[max(0, len(frag)-2):]...)
		tail = tail[max(0, len(tail)-2):]
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && size == 0:
			return nil, -1, nil
		case err != nil && !errors.Is(err, io.EOF):
			return nil, 0, err
		}
		if k := len(tail); k > 0 && tail[k-1] == '\n' {
			size, tail = size-1, tail[:k-1]
		}
		if k := len(tail); k > 0 && tail[k-1] == '\r' { // as bufio.ScanLines does
			size--
		}
		if size > zkrecipes.MaxDataSize {
			return nil, size, nil
		}
		return kept[:size], size, nil
	}
}

// putter is one `zklock queue put`.
type putter struct {
	*cli
	path     string
	key      string
	delay    time.Duration
	fromArgs bool
	items    chan item
	q        *fairqueue.Queue

	ids    []string   // of the items put, in order
	failed []jsonFail // the items not put: too large
	next   *item      // read, and left out of the last batch
	read   int        // items read
}

// what names an item in messages.
func (p *putter) what(it item) string {
	if p.fromArgs {
		return "argument " + strconv.Itoa(it.n)
	}
	return "line " + strconv.Itoa(it.n)
}

// run puts the items as they come, until there are no more or ctx ends
// (SIGINT, SIGTERM). A put under way is not cut short by ctx.
func (p *putter) run(ctx context.Context) (int, error) {
	put := context.WithoutCancel(ctx)
	if p.key != "" {
		return p.putKeyed(ctx, put)
	}
	for {
		batch, more := p.batch(ctx)
		if err := p.putBatch(put, batch); err != nil {
			return p.finish(err)
		}
		if p.next != nil && p.next.tooLarge() {
			p.fail(*p.next)
			p.next = nil
		}
		switch {
		case p.next != nil && p.next.err != nil:
			return p.finish(p.next.err)
		case !more && ctx.Err() != nil:
			if left := len(p.items); left > 0 {
				return p.finish(fmt.Errorf("stopped by a signal: %d items read and not put", left))
			}
			p.log.Info("stopping", "signal", context.Cause(ctx))
			return p.finish(nil)
		case !more:
			return p.finish(nil)
		}
	}
}

// batch waits for an item, then takes the items that are ready as well,
// as many as one PutMany takes: at most fairqueue.MaxBatch items, of at
// most zkrecipes.MaxDataSize bytes in all (each counted with the path and
// header of its create). A delayed item goes alone. An item that does not
// fit, is too large, or is a read error ends the batch, and is left in
// p.next. more is false once the items have run out or ctx has ended.
func (p *putter) batch(ctx context.Context) (batch []item, more bool) {
	size := 0
	take := func(it item) bool { // whether it joined the batch
		n := it.size + len(p.path) + 64
		switch {
		case it.err != nil || it.tooLarge(),
			len(batch) > 0 && (p.delay > 0 || len(batch) == fairqueue.MaxBatch || size+n > zkrecipes.MaxDataSize):
			p.next = &it
			return false
		}
		batch, size = append(batch, it), size+n
		return true
	}
	if p.next != nil {
		it := *p.next
		p.next = nil
		if !take(it) {
			return batch, true
		}
	} else {
		select {
		case it, ok := <-p.items:
			if !ok {
				return nil, false
			}
			p.read++
			if !take(it) {
				return batch, true
			}
		case <-ctx.Done():
			return nil, false
		}
	}
	for {
		select {
		case it, ok := <-p.items:
			if !ok {
				return batch, false
			}
			p.read++
			if !take(it) {
				return batch, true
			}
		default:
			return batch, true
		}
	}
}

// putBatch puts the items, in order, and shows their ids.
func (p *putter) putBatch(ctx context.Context, batch []item) error {
	if len(batch) == 0 {
		return nil
	}
	var ids []string
	var err error
	switch {
	case p.delay > 0:
		var id string
		id, err = p.q.Put(ctx, batch[0].data, fairqueue.WithDelay(p.delay))
		ids = []string{id}
	case len(batch) == 1:
		var id string
		id, err = p.q.Put(ctx, batch[0].data)
		ids = []string{id}
	default:
		data := make([][]byte, len(batch))
		for i, it := range batch {
			data[i] = it.data
		}
		ids, err = p.q.PutMany(ctx, data)
	}
	if err != nil {
		return err
	}
	p.show(ids)
	return nil
}

// show records ids as put and, in text, prints them at once.
func (p *putter) show(ids []string) {
	p.ids = append(p.ids, ids...)
	if !p.json {
		for _, id := range ids {
			fmt.Fprintln(p.stdout, id)
		}
	}
}

// fail reports an item too large to put: it fails alone.
func (p *putter) fail(it item) {
	msg := fmt.Sprintf("%d bytes, over the limit of %d bytes for an item", it.size, zkrecipes.MaxDataSize)
	fmt.Fprintf(p.stderr, "zklock: queue put %s: %s: %s: not put\n", p.path, p.what(it), msg)
	p.failed = append(p.failed, jsonFail{Line: it.n, Size: it.size, Error: msg})
}

// putKeyed puts the one item there must be with -key.
func (p *putter) putKeyed(ctx, put context.Context) (int, error) {
	var items []item
	for collecting := true; collecting; {
		select {
		case it, ok := <-p.items:
			if !ok {
				collecting = false
				break
			}
			if it.err != nil {
				return exitFailure, it.err
			}
			items = append(items, it)
		case <-ctx.Done():
			return exitFailure, fmt.Errorf("queue put %s: stopped by a signal before the end of stdin: nothing put", p.path)
		}
	}
	p.read = len(items)
	switch {
	case len(items) != 1:
		return exitUsage, usagef("queue put: -key is for one item, got %d", len(items))
	case items[0].tooLarge():
		p.fail(items[0])
		return p.finish(nil)
	}
	opts := []fairqueue.PutOption{fairqueue.WithKey(p.key)}
	if p.delay > 0 {
		opts = append(opts, fairqueue.WithDelay(p.delay))
	}
	id, err := p.q.Put(put, items[0].data, opts...)
	if err == nil {
		p.show([]string{id})
	}
	return p.finish(err)
}

// finish prints the JSON output, if asked for, and says how the put
// ended.
func (p *putter) finish(err error) (int, error) {
	if p.json {
		out := jsonPut{Path: p.path, IDs: append([]string{}, p.ids...), Failed: p.failed}
		if code, err := p.printJSON(exitOK, out); err != nil {
			return code, err
		}
	}
	switch {
	case errors.Is(err, fairqueue.ErrOutcomeUnknown):
		return exitFailure, fmt.Errorf("%w (%d items put before it; the next may or may not be in: -key makes a retry safe)", err, len(p.ids))
	case err != nil && len(p.ids) > 0:
		return exitFailure, fmt.Errorf("%w (%d items put before it)", err, len(p.ids))
	case err != nil:
		return exitFailure, err
	case p.read == 0:
		return exitUsage, usagef("queue put: no items: give DATA arguments or lines on stdin")
	case len(p.failed) > 0:
		return exitFailure, fmt.Errorf("queue put %s: %d of %d items not put: over the limit of %d bytes for an item",
			p.path, len(p.failed), p.read, zkrecipes.MaxDataSize)
	}
	return exitOK, nil
}

// jsonPut is queue put's output.
type jsonPut struct {
	Path   string     `json:"path"`
	IDs    []string   `json:"ids"`              // of the items put, in order
	Failed []jsonFail `json:"failed,omitempty"` // the items not put
}

// jsonFail is an item queue put could not put.
type jsonFail struct {
	Line  int    `json:"line"` // its line of stdin, or its DATA argument, from 1
	Size  int    `json:"size"` // in bytes
	Error string `json:"error"`
}
