package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
)

// queue is `zklock queue SUBCOMMAND`.
func (c *cli) queue(args []string) (int, error) {
	subs := map[string]func([]string) (int, error){
		"put":     c.queuePut,
		"take":    c.queueTake,
		"ls":      c.queueLs,
		"dead":    c.queueDead,
		"requeue": c.queueRequeue,
	}
	// Common flags may come between queue and the subcommand; the
	// subcommand checks them.
	fs := c.flagSet("queue")
	c.synopsis = "queue put|take|ls|dead|requeue [FLAGS] PATH [ARGS]"
	fs.Usage = func() { fmt.Fprintf(c.stderr, "Usage: zklock %s\n", c.synopsis) }
	if err := fs.Parse(args); err != nil {
		return exitUsage, flagError{err}
	}
	if fs.NArg() == 0 {
		return exitUsage, usagef("queue: missing subcommand: put, take, ls, dead or requeue")
	}
	sub, ok := subs[fs.Arg(0)]
	if !ok {
		return exitUsage, usagef("queue: unknown subcommand %q: want put, take, ls, dead or requeue", fs.Arg(0))
	}
	return sub(fs.Args()[1:])
}

// queuePath parses the arguments of a queue subcommand: flags, PATH, and the
// rest.
func (c *cli) queuePath(fs *flag.FlagSet, name string) (string, []string, error) {
	if fs.NArg() == 0 {
		return "", nil, usagef("%s: missing PATH", name)
	}
	path := fs.Arg(0)
	if err := checkPath(path); err != nil {
		return "", nil, usagef("%s: %v", name, err)
	}
	return path, fs.Args()[1:], nil
}

// queueOnePath parses the arguments of a queue subcommand that takes one
// PATH and no flags of its own.
func (c *cli) queueOnePath(name string, args []string) (string, error) {
	fs := c.flagSet(name)
	if err := c.parse(fs, args, name+" PATH"); err != nil {
		return "", err
	}
	path, rest, err := c.queuePath(fs, name)
	if err != nil {
		return "", err
	}
	if len(rest) > 0 {
		return "", usagef("%s: want one PATH, got %d arguments", name, fs.NArg())
	}
	return path, nil
}

// queuePut is `zklock queue put`.
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
	if *delay < 0 {
		return exitUsage, usagef("%s: -delay must not be negative", name)
	}
	var items [][]byte
	for _, d := range data {
		items = append(items, []byte(d))
	}
	if len(data) == 0 {
		if items, err = readLines(os.Stdin); err != nil {
			return exitFailure, fmt.Errorf("reading stdin: %w", err)
		}
	}
	switch {
	case *key != "" && len(items) != 1:
		return exitUsage, usagef("%s: -key is for one item, got %d", name, len(items))
	case len(items) == 0:
		return exitUsage, usagef("%s: no items: give DATA arguments or lines on stdin", name)
	}

	ctx, q, done, err := openUntilSignal(c, path, fairqueue.New)
	if err != nil {
		return exitFailure, err
	}
	defer done()

	var ids []string
	printed := 0
	show := func() { // in text, each batch's ids as soon as they are in
		if !c.json {
			for _, id := range ids[printed:] {
				fmt.Fprintln(c.stdout, id)
			}
			printed = len(ids)
		}
	}
	err = func() error {
		if *key != "" || *delay > 0 {
			var opts []fairqueue.PutOption
			if *key != "" {
				opts = append(opts, fairqueue.WithKey(*key))
			}
			if *delay > 0 {
				opts = append(opts, fairqueue.WithDelay(*delay))
			}
			for _, item := range items {
				id, err := q.Put(ctx, item, opts...)
				if err != nil {
					return err
				}
				ids = append(ids, id)
				show()
			}
			return nil
		}
		for _, batch := range batches(items, len(path)) {
			var got []string
			var err error
			if len(batch) == 1 {
				var id string
				id, err = q.Put(ctx, batch[0])
				got = []string{id}
			} else {
				got, err = q.PutMany(ctx, batch)
			}
			if err != nil {
				return err
			}
			ids = append(ids, got...)
			show()
		}
		return nil
	}()
	if c.json {
		if code, err := c.printJSON(exitOK, jsonPut{Path: path, IDs: append([]string{}, ids...)}); err != nil {
			return code, err
		}
	}
	if err != nil {
		if errors.Is(err, fairqueue.ErrOutcomeUnknown) {
			err = fmt.Errorf("%w (%d items put before it; the next batch may or may not be in: -key makes a retry safe)", err, len(ids))
		} else if len(ids) > 0 {
			err = fmt.Errorf("%w (%d items put before it)", err, len(ids))
		}
		return exitFailure, err
	}
	return exitOK, nil
}

// jsonPut is queue put's output.
type jsonPut struct {
	Path string   `json:"path"`
	IDs  []string `json:"ids"`
}

// readLines reads r's lines, without their line ends: each is an item.
func readLines(r io.Reader) ([][]byte, error) {
	var items [][]byte
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), zkrecipes.MaxDataSize+2)
	for sc.Scan() {
		items = append(items, bytes.TrimSuffix(bytes.Clone(sc.Bytes()), []byte("\r")))
	}
	return items, sc.Err()
}

// batches splits items into PutMany's batches: at most fairqueue.MaxBatch
// items and zkrecipes.MaxDataSize bytes of request each, pathLen being the
// length of the queue's path.
func batches(items [][]byte, pathLen int) [][][]byte {
	var out [][][]byte
	var cur [][]byte
	size := 0
	for _, item := range items {
		n := len(item) + pathLen + 64 // the data, and the path and header of its create
		if len(cur) > 0 && (len(cur) == fairqueue.MaxBatch || size+n > zkrecipes.MaxDataSize) {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, item)
		size += n
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// queueTake is `zklock queue take`.
func (c *cli) queueTake(args []string) (int, error) {
	const name = "queue take"
	fs := c.flagSet(name)
	once := fs.Bool("once", false, "take one item, run CMD for it, and exit with CMD's status")
	timeout := fs.Duration("timeout", 0, "wait at most `D` for an item: then exit 73 with -once, else stop (status 0); 0 waits forever")
	maxAttempts := fs.Int("max-attempts", 0, "move an item delivered `N` times to the dead letters instead of giving it back; 0: no limit")
	backoff := fs.Duration("backoff", 0, "hold an item CMD failed on back from every consumer for `D` before it is delivered again")
	grace := fs.Duration("grace", 5*time.Second, "if the claim on the item is lost, wait `D` between SIGTERM and SIGKILL to CMD")
	if err := c.parse(fs, args, "queue take [-once] [-timeout D] [-max-attempts N] [-backoff D] [-grace D] PATH -- CMD [ARGS...]"); err != nil {
		return exitUsage, err
	}
	path, argv, err := cmdArgs(name, fs.Args())
	switch {
	case err != nil:
		return exitUsage, err
	case *timeout < 0:
		return exitUsage, usagef("%s: -timeout must not be negative", name)
	case *maxAttempts < 0:
		return exitUsage, usagef("%s: -max-attempts must not be negative", name)
	case *backoff < 0:
		return exitUsage, usagef("%s: -backoff must not be negative", name)
	case *grace < 0:
		return exitUsage, usagef("%s: -grace must not be negative", name)
	}
	var opts []fairqueue.Option
	if *maxAttempts > 0 {
		opts = append(opts, fairqueue.WithMaxAttempts(*maxAttempts))
	}
	t := &taker{cli: c, path: path, argv: argv, once: *once, timeout: *timeout, backoff: *backoff, grace: *grace}

	// From here on, SIGINT and SIGTERM are ours to handle: they stop the
	// wait for an item, or are forwarded to CMD.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	type opened struct {
		s *zkrecipes.Session
		q *fairqueue.Queue
	}
	o, sig, err := interruptible(sigs, func(ctx context.Context) (opened, error) {
		s, q, err := openRecipe(ctx, c, path, fairqueue.New, opts...)
		return opened{s, q}, err
	})
	if o.s != nil {
		defer o.s.Close()
	}
	switch {
	case sig != nil:
		return t.interrupted(sig)
	case err != nil:
		return exitFailure, err
	}
	t.s, t.q = o.s, o.q
	return t.loop(sigs)
}

// taker is one `zklock queue take`.
type taker struct {
	*cli
	path    string
	argv    []string
	once    bool
	timeout time.Duration
	backoff time.Duration
	grace   time.Duration

	s *zkrecipes.Session
	q *fairqueue.Queue
}

// interrupted is the end of a take stopped by sig while it waited for an
// item: in a loop a clean stop, with -once an interruption.
func (t *taker) interrupted(sig os.Signal) (int, error) {
	if t.once {
		return 128 + signum(sig), fmt.Errorf("gave up waiting for an item of %s: got %s", t.path, signame(sig))
	}
	t.log.Info("stopping", "signal", signame(sig))
	return exitOK, nil
}

// loop takes items and runs CMD for each, until told to stop: one with
// -once, else with fairqueue's Work.
func (t *taker) loop(sigs <-chan os.Signal) (int, error) {
	if !t.once {
		return t.work(sigs)
	}
	for {
		job, sig, err := interruptible(sigs, t.take)
		if sig != nil {
			if job != nil { // taken as the signal came: give it back untouched
				ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
				err := job.Nack(ctx)
				cancel()
				t.log.Info("gave back", "id", job.ID(), "err", err)
			}
			return t.interrupted(sig)
		}
		switch {
		case errors.Is(err, errTimeout) && t.once:
			return exitTimeout, fmt.Errorf("no item in %s within %v", t.path, t.timeout)
		case errors.Is(err, errTimeout):
			t.log.Info("stopping: no item came", "within", t.timeout)
			return exitOK, nil
		case err != nil:
			return exitFailure, err
		}

		t.log.Info("took", "id", job.ID(), "attempt", job.Attempt())
		out := t.supervise(child{
			argv:  t.argv,
			env:   []string{"ZKLOCK_JOB_ID=" + job.ID(), "ZKLOCK_JOB_ATTEMPT=" + strconv.Itoa(job.Attempt())},
			stdin: bytes.NewReader(job.Data()),
			what:  fmt.Sprintf("the claim on %s item %s", t.path, job.ID()),
			grace: t.grace,
			lost:  job.Done(),
			err:   func() error { return t.claimErr(job) },
		}, sigs)
		if out.lost {
			return exitLost, nil // reported when it happened
		}
		if err := t.settle(job, out.code == 0); errors.Is(err, fairqueue.ErrClaimLost) {
			fmt.Fprintf(t.stderr, "zklock: lost the claim on %s item %s: %v\n", t.path, job.ID(), err)
			return exitLost, nil
		} else if err != nil {
			return exitFailure, err
		}
		switch {
		case t.once:
			return out.code, nil
		case !out.started:
			return out.code, nil // reported by supervise; every item would fail alike
		case out.signal != nil:
			t.log.Info("stopping", "signal", signame(out.signal))
			return exitOK, nil
		}
	}
}

// work runs CMD for each item with fairqueue's Work (one handler): it acks
// an item CMD exited 0 for, and gives one back otherwise, held for -backoff.
// A signal stops it while it waits for an item (status 0), and is
// forwarded to CMD while one runs (then it stops once CMD exits); so does
// -timeout with no item. A lost claim stops CMD and exits 75.
func (t *taker) work(sigs <-chan os.Signal) (int, error) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var mu sync.Mutex
	var cmdSigs chan os.Signal // while CMD runs
	go func() {
		for {
			select {
			case sig := <-sigs:
				mu.Lock()
				if cmdSigs != nil {
					cmdSigs <- sig
				} else {
					t.log.Info("stopping", "signal", signame(sig))
					cancel(stop(exitOK))
				}
				mu.Unlock()
			case <-ctx.Done():
				return
			}
		}
	}()
	idle := func() {} // restarts the -timeout's clock
	if t.timeout > 0 {
		timer := time.AfterFunc(t.timeout, func() {
			t.log.Info("stopping: no item came", "within", t.timeout)
			cancel(stop(exitOK))
		})
		defer timer.Stop()
		idle = func() { timer.Reset(t.timeout) }
		defer idle()
	}
	h := func(_ context.Context, job *fairqueue.Job) error {
		mu.Lock()
		cmdSigs = make(chan os.Signal, 4)
		mu.Unlock()
		t.log.Info("took", "id", job.ID(), "attempt", job.Attempt())
		out := t.supervise(child{
			argv:  t.argv,
			env:   []string{"ZKLOCK_JOB_ID=" + job.ID(), "ZKLOCK_JOB_ATTEMPT=" + strconv.Itoa(job.Attempt())},
			stdin: bytes.NewReader(job.Data()),
			what:  fmt.Sprintf("the claim on %s item %s", t.path, job.ID()),
			grace: t.grace,
			lost:  job.Done(),
			err:   func() error { return t.claimErr(job) },
		}, cmdSigs)
		mu.Lock()
		cmdSigs = nil
		mu.Unlock()
		idle()
		t.log.Info("done", "id", job.ID(), "ack", out.code == 0)
		switch {
		case out.lost:
			cancel(stop(exitLost)) // reported when it happened
		case !out.started:
			cancel(stop(out.code)) // reported by supervise; every item would fail alike
		case out.signal != nil:
			t.log.Info("stopping", "signal", signame(out.signal))
			cancel(stop(exitOK))
		}
		if out.code != 0 {
			return fmt.Errorf("%s exited %d", t.argv[0], out.code)
		}
		return nil
	}
	backoff := fairqueue.WithBackoff(t.backoff, t.backoff)
	err := t.q.Work(ctx, h, backoff)
	var s stop
	if errors.As(context.Cause(ctx), &s) {
		return int(s), nil
	}
	return exitFailure, err
}

// stop ends `queue take`'s Work with its exit status.
type stop int

func (s stop) Error() string { return fmt.Sprintf("stop with status %d", int(s)) }

// take waits for an item, at most t.timeout if not 0; then the error wraps
// errTimeout.
func (t *taker) take(ctx context.Context) (*fairqueue.Job, error) {
	if t.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, t.timeout, errTimeout)
		defer cancel()
	}
	job, err := t.q.Take(ctx)
	if err != nil && errors.Is(context.Cause(ctx), errTimeout) && !errors.Is(err, errTimeout) {
		err = fmt.Errorf("%w: %w", errTimeout, err)
	}
	return job, err
}

// settle acks the job, or gives it back.
func (t *taker) settle(job *fairqueue.Job, ack bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	var err error
	switch {
	case ack:
		err = job.Ack(ctx)
	case t.backoff > 0:
		err = job.NackAfter(ctx, t.backoff)
	default:
		err = job.Nack(ctx)
	}
	t.log.Info("settled", "id", job.ID(), "ack", ack, "err", err)
	return err
}

// claimErr says why job's claim was lost, or nil while it is held. Job has
// no Err of its own: Done is closed when the session is over or another
// client deleted the claim.
func (t *taker) claimErr(job *fairqueue.Job) error {
	select {
	case <-job.Done():
	default:
		return nil
	}
	if err := t.s.Err(); err != nil {
		return fmt.Errorf("%w: %w", fairqueue.ErrClaimLost, err)
	}
	return fmt.Errorf("%w: the claim node was deleted by another client", fairqueue.ErrClaimLost)
}

// interruptible calls f with a context that a signal on sigs cancels. It
// returns what f returned, and the signal if one came; f's results are
// returned even then, since it may have finished first.
func interruptible[T any](sigs <-chan os.Signal, f func(context.Context) (T, error)) (T, os.Signal, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f(ctx)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, nil, r.err
	case sig := <-sigs:
		cancel()
		r := <-done
		return r.v, sig, r.err
	}
}

// queueLs is `zklock queue ls`.
func (c *cli) queueLs(args []string) (int, error) {
	c.listing = true
	path, err := c.queueOnePath("queue ls", args)
	if err != nil {
		return exitUsage, err
	}

	ctx, q, done, err := openUntilSignal(c, path, fairqueue.New)
	if err != nil {
		return exitFailure, err
	}
	defer done()
	n, err := q.Len(ctx)
	if err != nil {
		return exitFailure, err
	}
	dead, err := q.DeadLetters(ctx)
	if err != nil {
		return exitFailure, err
	}
	if c.json {
		return c.printJSON(exitOK, jsonQueueLs{Path: path, Pending: n, Dead: len(dead)})
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tPENDING\tDEAD")
	fmt.Fprintf(tw, "%s\t%d\t%d\n", path, n, len(dead))
	tw.Flush()
	return exitOK, nil
}

// jsonQueueLs is queue ls's output.
type jsonQueueLs struct {
	Path    string `json:"path"`
	Pending int    `json:"pending"` // put and neither claimed, acked nor dead
	Dead    int    `json:"dead"`    // dead letters
}

// queueDead is `zklock queue dead`.
func (c *cli) queueDead(args []string) (int, error) {
	c.listing = true
	path, err := c.queueOnePath("queue dead", args)
	if err != nil {
		return exitUsage, err
	}

	ctx, q, done, err := openUntilSignal(c, path, fairqueue.New)
	if err != nil {
		return exitFailure, err
	}
	defer done()
	dead, err := q.DeadLetters(ctx)
	if err != nil {
		return exitFailure, err
	}
	if c.json {
		out := jsonDead{Path: path, DeadLetters: []jsonDeadLetter{}}
		for _, d := range dead {
			out.DeadLetters = append(out.DeadLetters, jsonDeadLetter{ID: d.ID, Attempts: d.Attempts, jsonData: newJSONData(d.Data)})
		}
		return c.printJSON(exitOK, out)
	}
	if len(dead) == 0 {
		fmt.Fprintf(c.stdout, "%s: no dead letters\n", path)
		return exitOK, nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tATTEMPTS\tDATA")
	for _, d := range dead {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", d.ID, d.Attempts, printable(d.Data))
	}
	tw.Flush()
	return exitOK, nil
}

// jsonDead is queue dead's output.
type jsonDead struct {
	Path        string           `json:"path"`
	DeadLetters []jsonDeadLetter `json:"dead_letters"`
}

type jsonDeadLetter struct {
	ID       string `json:"id"`
	Attempts int    `json:"attempts"` // deliveries before it was moved
	jsonData
}

// queueRequeue is `zklock queue requeue`.
func (c *cli) queueRequeue(args []string) (int, error) {
	const name = "queue requeue"
	fs := c.flagSet(name)
	if err := c.parse(fs, args, name+" PATH ID..."); err != nil {
		return exitUsage, err
	}
	path, ids, err := c.queuePath(fs, name)
	if err != nil {
		return exitUsage, err
	}
	if len(ids) == 0 {
		return exitUsage, usagef("%s: missing ID after PATH", name)
	}

	ctx, q, done, err := openUntilSignal(c, path, fairqueue.New)
	if err != nil {
		return exitFailure, err
	}
	defer done()
	code := exitOK
	for _, id := range ids {
		err := q.Requeue(ctx, id)
		switch {
		case errors.Is(err, fairqueue.ErrNoDeadLetter):
			fmt.Fprintf(c.stderr, "zklock: %s: no dead letter %s\n", path, id)
			code = exitNoDeadLetter
		case err != nil:
			return exitFailure, err
		default:
			fmt.Fprintf(c.stdout, "%s requeued\n", id)
		}
	}
	return code, nil
}
