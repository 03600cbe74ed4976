package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
	"github.com/zkrecipes/zkrecipes/zklock"
)

// queueLs is `zklock queue ls`.
func (c *cli) queueLs(args []string) (int, error) {
	const name = "queue ls"
	c.listing = true
	path, err := c.queueOnePath(name, args)
	if err != nil {
		return exitUsage, err
	}

	ctx, s, done, err := connectUntilSignal(c)
	if err != nil {
		return exitFailure, err
	}
	defer done()
	if err := useQueue(name, false).check(s, path); err != nil {
		return failed(err)
	}
	q, err := fairqueue.New(s, path)
	if err != nil {
		return exitFailure, err
	}
	st, err := readQueueState(ctx, s, q, path)
	if err != nil {
		return exitFailure, fmt.Errorf("%s %s: %w", name, path, err)
	}
	if c.json {
		return c.printJSON(exitOK, st)
	}
	dispatcher := "-"
	if st.Dispatcher != nil {
		dispatcher = st.Dispatcher.Session
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tPENDING\tIN-PROGRESS\tDELAYED\tDEAD\tCONSUMERS\tWAITING\tDISPATCHER")
	fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", path, st.Pending, st.InProgress, st.Delayed, st.Dead,
		st.Consumers, st.Waiting, dispatcher)
	tw.Flush()
	return exitOK, nil
}

// jsonQueueLs is queue ls's output: one look at the queue, read a part at
// a time (not an atomic snapshot: with puts and takes under way a count
// may be off by those).
type jsonQueueLs struct {
	Path       string `json:"path"`
	Pending    int    `json:"pending"`     // put, and neither handed out, acked nor dead (fairqueue's Len)
	InProgress int    `json:"in_progress"` // handed out to a consumer, and not yet acked or given back
	Delayed    int    `json:"delayed"`     // put with -delay, not yet due
	Dead       int    `json:"dead"`        // dead letters
	Consumers  int    `json:"consumers"`   // Queues that take (each with its inbox in consumers/)
	Waiting    int    `json:"waiting"`     // of them, those waiting for an item: a ticket in ready/ not yet served
	// Dispatcher: the consumer elected to hand items out (the lowest node
	// in dispatch/); null with none.
	Dispatcher *jsonDispatcher `json:"dispatcher"`
}

type jsonDispatcher struct {
	Node     string `json:"node"`     // its election node
	Session  string `json:"session"`  // its session id, as ZKLOCK_SESSION gives it
	Consumer string `json:"consumer"` // its consumer name, "<session, 16 hex digits>-<tag>"
}

// readQueueState reads what queue ls shows of the fairqueue q at path, as
// its layout keeps it (see the fairqueue package documentation): the items
// in the buckets of items/ are pending (Len) or in progress; the tickets in
// ready/ are served once their data version is 1.
func readQueueState(ctx context.Context, s *zkrecipes.Session, q *fairqueue.Queue, path string) (jsonQueueLs, error) {
	st := jsonQueueLs{Path: path}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		errs     []error
		items    int
		tickets  []string
		inboxes  []string
		delayed  []string
		dead     []string
		dispatch []zklock.Contender
	)
	do := func(f func() error) {
		wg.Go(func() {
			if err := f(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	// The items first, then Len: an item handed out in between counts in
	// progress, not twice.
	n, err := itemCount(s, path+"/items")
	if err != nil {
		return st, err
	}
	items = n
	do(func() (err error) { st.Pending, err = q.Len(ctx); return err })
	for dir, names := range map[string]*[]string{"ready": &tickets, "consumers": &inboxes, "delayed": &delayed, "dead": &dead} {
		do(func() (err error) { *names, err = listChildren(s, path+"/"+dir); return err })
	}
	do(func() error {
		el, err := zklock.NewElection(s, path+"/dispatch")
		if err == nil {
			dispatch, err = el.Contenders(ctx)
		}
		return err
	})
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return st, err
	}
	st.InProgress = max(0, items-st.Pending)
	st.Delayed, st.Dead, st.Consumers = len(delayed), len(dead), len(inboxes)
	for _, c := range dispatch {
		if c.Holds {
			st.Dispatcher = &jsonDispatcher{Node: c.Path, Session: sessionID(c.SessionID), Consumer: string(c.Data)}
			break
		}
	}
	waiting, err := waitingConsumers(s, path+"/ready", tickets)
	st.Waiting = len(waiting)
	return st, err
}

// itemCount counts the items in the buckets of dir (items/): one read of
// each bucket's Stat (not of the blob directories beside them, "p...").
func itemCount(s *zkrecipes.Session, dir string) (int, error) {
	all, err := listChildren(s, dir)
	if err != nil {
		return 0, err
	}
	var buckets []string
	for _, b := range all {
		if strings.HasPrefix(b, "b") {
			buckets = append(buckets, b)
		}
	}
	counts := make([]int32, len(buckets))
	errs := make([]error, len(buckets))
	var wg sync.WaitGroup
	for i, b := range buckets {
		wg.Go(func() {
			_, st, err := s.Conn().Exists(dir + "/" + b)
			if err == nil && st != nil {
				counts[i] = st.NumChildren
			}
			errs[i] = err
		})
	}
	wg.Wait()
	n := 0
	for _, c := range counts {
		n += int(c)
	}
	return n, errors.Join(errs...)
}

// waitingConsumers returns the consumers that have a ticket in dir
// (ready/) the dispatcher has not served yet: its data version is still 0.
// A ticket is "<kind>-<consumer>-<tag>-<want>-<seq>", the consumer
// "<session>-<tag>".
func waitingConsumers(s *zkrecipes.Session, dir string, tickets []string) (map[string]bool, error) {
	waiting := map[string]bool{}
	var mu sync.Mutex
	errs := make([]error, len(tickets))
	var wg sync.WaitGroup
	for i, t := range tickets {
		consumer, ok := ticketConsumer(t)
		if !ok {
			continue
		}
		wg.Go(func() {
			_, st, err := s.Conn().Exists(dir + "/" + t)
			if err == nil && st != nil && st.Version == 0 {
				mu.Lock()
				waiting[consumer] = true
				mu.Unlock()
			}
			if !errors.Is(err, zk.ErrNoNode) {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	return waiting, errors.Join(errs...)
}

// ticketConsumer returns the consumer whose ticket name is.
func ticketConsumer(name string) (string, bool) {
	f := strings.Split(name, "-")
	if len(f) != 6 || len(f[0]) != 1 || len(f[1]) != 16 {
		return "", false
	}
	if _, err := strconv.ParseUint(f[1], 16, 64); err != nil {
		return "", false
	}
	return f[1] + "-" + f[2], true
}
