package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
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
	c.synopsis = "queue SUBCOMMAND [FLAGS] PATH [ARGS]\n\nSubcommands:\n" + queueUsage()
	fs.Usage = func() { fmt.Fprintf(c.stderr, "Usage: zklock %s", c.synopsis) }
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

// queueUsage is what the usage says of the queue subcommands.
func queueUsage() string {
	from := strings.Index(usage, "  queue put")
	return usage[from : from+strings.Index(usage[from:], "  demo")]
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

// queueTake is `zklock queue take`.
func (c *cli) queueTake(args []string) (int, error) {
	const name = "queue take"
	fs := c.flagSet(name)
	once := fs.Bool("once", false, "take one item, run CMD for it, and exit with CMD's status")
	timeout := fs.Duration("timeout", 0, "wait at most `D` for an item: then exit 73 with -once, else stop (status 0); 0 waits forever")
	maxAttempts := fs.Int("max-attempts", defaultMaxAttempts, "move an item delivered `N` times, CMD failing each time, to the dead letters; 0: no limit")
	backoff := fs.Duration("backoff", defaultBackoff, "hold an item CMD failed on back for `D` before it is delivered again, doubled on each further failure; 0: give it back at once")
	maxBackoff := fs.Duration("max-backoff", defaultMaxBackoff, "the longest `D` an item is held back")
	grace := fs.Duration("grace", 5*time.Second, "wait `D` between SIGTERM and SIGKILL to CMD's process group when the item's delivery is lost, or when CMD exits leaving processes in its group")
	prefetch := fs.Int("prefetch", 0, "without -once, hold `N` items ahead of CMD, taken while it runs: their CMDs start sooner, but no other consumer gets them meanwhile")
	if err := c.parse(fs, args, "queue take [-once] [-timeout D] [-max-attempts N] [-backoff D] [-max-backoff D] [-grace D] [-prefetch N] PATH -- CMD [ARGS...]"); err != nil {
		return exitUsage, err
	}
	path, argv, err := cmdArgs(name, fs.Args(), false)
	switch {
	case err != nil:
		return exitUsage, err
	case *timeout < 0:
		return exitUsage, usagef("%s: -timeout must not be negative", name)
	case *maxAttempts < 0:
		return exitUsage, usagef("%s: -max-attempts must not be negative", name)
	case *backoff < 0:
		return exitUsage, usagef("%s: -backoff must not be negative", name)
	case *maxBackoff < *backoff && isSet(fs, "max-backoff"):
		return exitUsage, usagef("%s: -max-backoff %v is less than -backoff %v", name, *maxBackoff, *backoff)
	case *maxBackoff < *backoff:
		*maxBackoff = *backoff
	case *grace < 0:
		return exitUsage, usagef("%s: -grace must not be negative", name)
	case *prefetch < 0:
		return exitUsage, usagef("%s: -prefetch must not be negative", name)
	case *prefetch > 0 && *once:
		return exitUsage, usagef("%s: -prefetch is for the loop: -once takes one item", name)
	}
	var opts []fairqueue.Option
	if *maxAttempts > 0 {
		opts = append(opts, fairqueue.WithMaxAttempts(*maxAttempts))
	}
	t := &taker{cli: c, path: path, argv: argv, once: *once, timeout: *timeout, prefetch: *prefetch,
		maxAttempts: *maxAttempts, backoff: *backoff, maxBackoff: *maxBackoff, grace: *grace}

	// From here on, the signals a user sends (SIGINT, SIGTERM, SIGHUP, ...)
	// are ours to handle: they stop the wait for an item, or are forwarded
	// to CMD.
	sigs := make(chan os.Signal, 4)
	notifyUnlessIgnored(sigs, forwardedSignals()...)
	defer signal.Stop(sigs)

	type opened struct {
		s *zkrecipes.Session
		q *fairqueue.Queue
	}
	o, sig, err := interruptible(sigs, func(ctx context.Context) (opened, error) {
		s, q, err := openRecipe(ctx, c, path, useQueue(name, true), fairqueue.New, opts...)
		return opened{s, q}, err
	})
	if o.s != nil {
		defer o.s.Close()
	}
	switch {
	case sig != nil:
		return t.interrupted(sig)
	case err != nil:
		return failed(err)
	}
	t.s, t.q = o.s, o.q
	defer t.close()
	return t.loop(sigs)
}

// close closes the Queue, before its session is: it no longer stands as
// the queue's dispatcher (if it was dispatching, another consumer's Queue
// is elected at once, rather than when the session's close is seen) and
// its inbox is removed. A Queue that took keeps both until then.
func (t *taker) close() {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := t.q.Close(ctx); err != nil {
		t.log.Warn("could not close the queue; closing the session removes what it left", "err", err)
	}
}

// taker is one `zklock queue take`.
type taker struct {
	*cli
	path     string
	argv     []string
	once     bool
	timeout  time.Duration
	grace    time.Duration
	prefetch int // Work's WithPrefetch

	// What becomes of an item CMD failed on: see retry.
	maxAttempts         int
	backoff, maxBackoff time.Duration

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
			env:   t.jobEnv(job),
			stdin: bytes.NewReader(job.Data()),
			what:  fmt.Sprintf("the delivery of %s item %s", t.path, job.ID()),
			grace: t.grace,
			lost:  job.Done(),
			err:   func() error { return t.claimErr(job) },

			session: t.s,
		}, sigs)
		if out.lost {
			return exitLost, nil // reported when it happened
		}
		if err := t.settle(job, out.code); errors.Is(err, fairqueue.ErrClaimLost) {
			fmt.Fprintf(t.stderr, "zklock: lost the delivery of %s item %s: %s\n", t.path, job.ID(), lossCause(err))
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

// work runs CMD for each item with fairqueue's Work (one handler, holding
// -prefetch items ahead): it acks an item CMD exited 0 for, and gives one
// back otherwise, as retry says. Items held ahead when it stops are given
// back at once (they count as delivered: their Attempt is one higher).
// A signal stops it while it waits for an item (status 0), and is
// forwarded to CMD while one runs (then it stops once CMD exits); so does
// -timeout with no item. A lost delivery stops CMD and exits 75.
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
		if ctx.Err() != nil {
			// Stopping: an item held ahead (-prefetch) is given back
			// untouched, its CMD not started.
			t.log.Info("gave back", "id", job.ID())
			return context.Cause(ctx)
		}
		mu.Lock()
		cmdSigs = make(chan os.Signal, 4)
		mu.Unlock()
		t.log.Info("took", "id", job.ID(), "attempt", job.Attempt())
		out := t.supervise(child{
			argv:  t.argv,
			env:   t.jobEnv(job),
			stdin: bytes.NewReader(job.Data()),
			what:  fmt.Sprintf("the delivery of %s item %s", t.path, job.ID()),
			grace: t.grace,
			lost:  job.Done(),
			err:   func() error { return t.claimErr(job) },

			session: t.s,
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
		if out.code == 0 || out.lost {
			return nil // acked; or the delivery is lost, and the ack fails
		}
		// Work gives the item back (held as retry says: WithBackoff is
		// its rule; at once when it is stopping) or, at -max-attempts,
		// moves it to the dead letters.
		failed := fmt.Sprintf("zklock: queue take %s: item %s: CMD failed (status %d) on delivery %d", t.path, job.ID(), out.code, job.Attempt())
		if t.maxAttempts > 0 {
			failed += fmt.Sprintf(" of %d", t.maxAttempts)
		}
		switch delay, dead := t.retry(job.Attempt()); {
		case dead:
			fmt.Fprintf(t.stderr, "%s: moved to the dead letters (see zklock queue dead %s)\n", failed, t.path)
		case delay > 0 && ctx.Err() == nil:
			fmt.Fprintf(t.stderr, "%s: given back, delivered again in %v at the soonest\n", failed, delay)
		default:
			fmt.Fprintf(t.stderr, "%s: given back\n", failed)
		}
		return fmt.Errorf("%s exited %d", t.argv[0], out.code)
	}
	err := t.q.Work(ctx, h, fairqueue.WithBackoff(t.backoff, t.maxBackoff), fairqueue.WithPrefetch(t.prefetch))
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

// jobEnv is what CMD learns of its item from its environment: the queue's
// path, the item's id and delivery, and the session's id.
func (t *taker) jobEnv(job *fairqueue.Job) []string {
	return []string{
		"ZKLOCK_PATH=" + t.path,
		"ZKLOCK_JOB_ID=" + job.ID(),
		"ZKLOCK_JOB_ATTEMPT=" + strconv.Itoa(job.Attempt()),
		"ZKLOCK_SESSION=" + sessionID(t.s.ID()),
	}
}

// The defaults of queue take: a CMD that fails on every item must not
// spin through the queue, and a poison item must not stay in it for ever.
// With them an item is delivered at most 5 times, over some 15 seconds
// (1s, 2s, 4s, 8s between deliveries).
const (
	defaultMaxAttempts = 5
	defaultBackoff     = time.Second
	defaultMaxBackoff  = time.Minute
)

// settle acks the job when CMD exited 0; otherwise it gives it back, held
// back for the job's back-off, or, at its last attempt, moves it to the
// dead letters (the queue's WithMaxAttempts does that), and says so on
// stderr.
func (t *taker) settle(job *fairqueue.Job, code int) error {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if code == 0 {
		err := job.Ack(ctx)
		t.log.Info("settled", "id", job.ID(), "ack", true, "err", err)
		return err
	}
	delay, dead := t.retry(job.Attempt())
	var err error
	if delay > 0 {
		err = job.NackAfter(ctx, delay)
	} else {
		err = job.Nack(ctx)
	}
	t.log.Info("settled", "id", job.ID(), "ack", false, "err", err)
	if err != nil {
		return err
	}
	failed := fmt.Sprintf("zklock: queue take %s: item %s: CMD failed (status %d) on delivery %d", t.path, job.ID(), code, job.Attempt())
	if t.maxAttempts > 0 {
		failed += fmt.Sprintf(" of %d", t.maxAttempts)
	}
	switch {
	case dead:
		fmt.Fprintf(t.stderr, "%s: moved to the dead letters (see zklock queue dead %s)\n", failed, t.path)
	case delay > 0:
		fmt.Fprintf(t.stderr, "%s: given back, delivered again in %v at the soonest\n", failed, delay)
	default:
		fmt.Fprintf(t.stderr, "%s: given back\n", failed)
	}
	return nil
}

// retry says what becomes of an item CMD failed on at its attempt-th
// delivery: held back for delay (-backoff, doubled for each delivery
// before this one, at most -max-backoff; 0: given back at once), or, at
// -max-attempts, moved to the dead letters.
func (t *taker) retry(attempt int) (delay time.Duration, dead bool) {
	if t.maxAttempts > 0 && attempt >= t.maxAttempts {
		return 0, true
	}
	delay = t.backoff
	for i := 1; i < attempt && delay < t.maxBackoff; i++ {
		delay *= 2
	}
	return min(delay, t.maxBackoff), false
}

// claimErr says why job's claim was lost, or nil while it is held. Job has
// no Err of its own: Done is closed when the session is over or another
// client deleted the delivery's ticket (in the queue's ready/).
func (t *taker) claimErr(job *fairqueue.Job) error {
	select {
	case <-job.Done():
	default:
		return nil
	}
	if err := t.s.Err(); err != nil {
		return fmt.Errorf("%w: %w", fairqueue.ErrClaimLost, err)
	}
	return fmt.Errorf("%w: its ticket was deleted by another client", fairqueue.ErrClaimLost)
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

// queueDead is `zklock queue dead`.
func (c *cli) queueDead(args []string) (int, error) {
	c.listing = true
	path, err := c.queueOnePath("queue dead", args)
	if err != nil {
		return exitUsage, err
	}

	ctx, q, done, err := openUntilSignal(c, path, useQueue("queue dead", false), fairqueue.New)
	if err != nil {
		return failed(err)
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
	c.listing = true
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

	ctx, q, done, err := openUntilSignal(c, path, useQueue(name, false), fairqueue.New)
	if err != nil {
		return failed(err)
	}
	defer done()
	code := exitOK
	out := jsonRequeue{Path: path, Requeued: []jsonRequeued{}}
	for _, id := range ids {
		newID, err := q.Requeue(ctx, id)
		switch {
		case errors.Is(err, zkrecipes.ErrInvalidArgument):
			// Checked before anything is sent: bad input, as a usage
			// error is; the other ids are requeued all the same.
			fmt.Fprintf(c.stderr, "zklock: %s: %q is no item id (queue dead lists the ids)\n", name, id)
			out.Malformed = append(out.Malformed, id)
			code = exitUsage
		case errors.Is(err, fairqueue.ErrNoDeadLetter):
			fmt.Fprintf(c.stderr, "zklock: %s: %s has no dead letter %s\n", name, path, id)
			out.NotFound = append(out.NotFound, id)
			if code == exitOK {
				code = exitNoDeadLetter
			}
		case err != nil && c.json:
			if _, perr := c.printJSON(exitFailure, out); perr != nil {
				return exitFailure, perr
			}
			return exitFailure, err
		case err != nil:
			return exitFailure, err
		case c.json:
			out.Requeued = append(out.Requeued, jsonRequeued{ID: id, NewID: newID})
		default:
			fmt.Fprintln(c.stdout, newID)
		}
	}
	if c.json {
		return c.printJSON(code, out)
	}
	return code, nil
}

// jsonRequeue is queue requeue's output.
type jsonRequeue struct {
	Path      string         `json:"path"`
	Requeued  []jsonRequeued `json:"requeued"`
	NotFound  []string       `json:"not_found,omitempty"` // ids that are no dead letter
	Malformed []string       `json:"malformed,omitempty"` // arguments that are no item id
}

type jsonRequeued struct {
	ID    string `json:"id"`     // the dead letter's
	NewID string `json:"new_id"` // the item's, back in the queue
}

// isSet reports whether the flag name was given.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
