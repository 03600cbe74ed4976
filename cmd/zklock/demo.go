package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
)

// demo is `zklock demo`: workers with a session each take turns on a lock.
func (c *cli) demo(args []string) (int, error) {
	fs := c.flagSet("demo")
	workers := fs.Int("workers", 5, "number of workers, each with its own ZooKeeper session")
	rounds := fs.Int("rounds", 3, "how many times each worker takes the lock")
	path := fs.String("path", "/zkrecipes/demo/lock", "lock `path`")
	hold := fs.Duration("hold", 50*time.Millisecond, "how long each worker holds the lock")
	if err := c.parse(fs, args, "demo [-workers N] [-rounds R] [-path P] [-hold D]"); err != nil {
		return exitUsage, err
	}
	switch {
	case fs.NArg() > 0:
		return exitUsage, usagef("demo: unexpected argument %q", fs.Arg(0))
	case *workers < 1:
		return exitUsage, usagef("demo: -workers must be at least 1")
	case *rounds < 1:
		return exitUsage, usagef("demo: -rounds must be at least 1")
	case *hold < 0:
		return exitUsage, usagef("demo: -hold must not be negative")
	}
	if err := checkPath(*path); err != nil {
		return exitUsage, usagef("demo: %v", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	d := &demoRun{cli: c, path: *path, workers: *workers, rounds: *rounds, hold: *hold}
	return d.run(ctx)
}

// demoRun is one run of the demo.
type demoRun struct {
	*cli
	path            string
	workers, rounds int
	hold            time.Duration

	start     time.Time
	lineShown chan struct{} // closed once the first line has been printed

	// joinMu is held by the worker joining the line until its node exists,
	// so the order of joined is the order of the line.
	joinMu sync.Mutex
	joined []string // worker names, in the order they joined the line

	mu       sync.Mutex
	handoffs []handoff // in the order the lock was acquired
}

// handoff is one acquisition of the lock.
type handoff struct {
	worker string
	token  int64
}

func (d *demoRun) run(ctx context.Context) (int, error) {
	out := d.stdout
	fmt.Fprintf(out, "%d workers, each with its own ZooKeeper session, take the lock %s %d times each and hold it %v.\n",
		d.workers, d.path, d.rounds, d.hold)
	fmt.Fprintf(out, "ZooKeeper: %s\n\n", d.servers)

	// The observer lists the line; it outlives the workers' sessions to
	// check that they left nothing behind.
	observer, err := d.connect(ctx, d.log.With("who", "observer"))
	if err != nil {
		return exitFailure, err
	}
	defer observer.Close()
	line, err := zklock.NewMutex(observer, d.path)
	if err != nil {
		return exitFailure, err
	}
	if cs, err := line.Contenders(ctx); err != nil {
		return exitFailure, err
	} else if len(cs) > 0 {
		return exitFailure, fmt.Errorf("%s is in use (%d contenders; see zklock holders %s): the demo needs a lock of its own", d.path, len(cs), d.path)
	}

	sessions := make([]*zkrecipes.Session, d.workers)
	defer func() {
		for _, s := range sessions {
			if s != nil {
				s.Close()
			}
		}
	}()
	mutexes := make([]*zklock.Mutex, d.workers)
	for i := range d.workers {
		name := workerName(i)
		s, err := d.connect(ctx, d.log.With("who", name))
		if err != nil {
			return exitFailure, fmt.Errorf("%s: %w", name, err)
		}
		sessions[i] = s
		data := fmt.Sprintf("%s pid %d", name, os.Getpid())
		if mutexes[i], err = zklock.NewMutex(s, d.path, zklock.WithData([]byte(data))); err != nil {
			return exitFailure, err
		}
	}

	// Start the workers one after another, each once the one before it is
	// in line, so that the first line is worker-1, worker-2, ...
	work, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	d.start = time.Now()
	d.lineShown = make(chan struct{})
	fmt.Fprintf(out, "The workers join the line in turn; the line as ZooKeeper sees it:\n")
	for i, m := range mutexes {
		inLine := make(chan struct{})
		wg.Go(func() {
			if err := d.worker(work, workerName(i), m, sync.OnceFunc(func() { close(inLine) })); err != nil {
				cancel(fmt.Errorf("%s: %w", workerName(i), err))
			}
		})
		select {
		case <-inLine:
		case <-work.Done():
		}
	}
	if cs, err := line.Contenders(work); err != nil {
		cancel(err)
	} else {
		printContenders(out, kindLock, cs, false)
	}
	fmt.Fprintf(out, "\nHand-offs (time since start, who got the lock, its fencing token, how long it waited):\n")
	close(d.lineShown)
	wg.Wait()

	if ctx.Err() != nil {
		return exitFailure, errors.New("demo interrupted")
	}
	if err := context.Cause(work); err != nil {
		return exitFailure, err
	}
	for i, s := range sessions {
		s.Close()
		sessions[i] = nil
	}
	left, err := children(observer, d.path)
	if err != nil {
		return exitFailure, err
	}
	if !d.summary(left) {
		return exitFailure, nil
	}
	return exitOK, nil
}

func workerName(i int) string { return fmt.Sprintf("worker-%d", i+1) }

// worker takes the lock d.rounds times. It calls inLine once it has first
// joined the line (or failed to).
func (d *demoRun) worker(ctx context.Context, name string, m *zklock.Mutex, inLine func()) error {
	defer inLine()
	for range d.rounds {
		lease, joined, err := d.join(ctx, name, m, inLine)
		if err != nil {
			return err
		}
		got := time.Now()
		select {
		case <-d.lineShown: // the first holder keeps the lock until the line is shown
		case <-ctx.Done():
		}
		d.acquired(name, lease, got, got.Sub(joined))
		select {
		case <-time.After(d.hold):
		case <-ctx.Done():
		}
		if err := lease.Unlock(ctx); err != nil {
			return err
		}
	}
	return nil
}

// join puts the worker in line, calls inLine, and waits for the lock. The
// next worker may join only once this one's node exists (or it holds the
// lock already), so the line is in the order of d.joined.
func (d *demoRun) join(ctx context.Context, name string, m *zklock.Mutex, inLine func()) (*zklock.Lease, time.Time, error) {
	d.joinMu.Lock()
	d.joined = append(d.joined, name)
	joined := time.Now()
	var lease *zklock.Lease
	var err error
	locked := make(chan struct{})
	go func() {
		lease, err = m.Lock(ctx)
		close(locked)
	}()
	d.waitInLine(ctx, m, name, locked)
	d.joinMu.Unlock()
	inLine()
	<-locked
	return lease, joined, err
}

// waitInLine returns once name's node is among m's contenders, or locked is
// closed, or ctx ends.
func (d *demoRun) waitInLine(ctx context.Context, m *zklock.Mutex, name string, locked <-chan struct{}) {
	ours := func(c zklock.Contender) bool { return strings.HasPrefix(string(c.Data), name+" ") }
	for {
		if cs, err := m.Contenders(ctx); err == nil && slices.ContainsFunc(cs, ours) {
			return
		}
		select {
		case <-locked:
			return
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// acquired records and prints a hand-off. It is called while the lock is
// held, so the records are in the order of acquisition.
func (d *demoRun) acquired(name string, lease *zklock.Lease, at time.Time, waited time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.handoffs = append(d.handoffs, handoff{name, lease.Token()})
	fmt.Fprintf(d.stdout, "  %+8.3fs  %-10s  token %-12d  waited %v\n",
		at.Sub(d.start).Seconds(), name, lease.Token(), waited.Round(100*time.Microsecond))
}

// summary prints the checks and reports whether they all passed.
func (d *demoRun) summary(left []string) bool {
	out := d.stdout
	ok := true
	fmt.Fprintf(out, "\nSummary:\n  Hand-offs: %d (%d workers x %d rounds)\n", len(d.handoffs), d.workers, d.rounds)

	fifo := len(d.handoffs) == len(d.joined)
	for i := 0; fifo && i < len(d.handoffs); i++ {
		if got, want := d.handoffs[i].worker, d.joined[i]; got != want {
			fmt.Fprintf(out, "  FIFO: NO: hand-off %d went to %s, but %s had joined the line before it\n", i+1, got, want)
			fifo = false
		}
	}
	if fifo {
		fmt.Fprintf(out, "  FIFO: yes (every hand-off went to the worker that joined the line next)\n")
	} else if len(d.handoffs) != len(d.joined) {
		fmt.Fprintf(out, "  FIFO: NO: %d joins, %d hand-offs\n", len(d.joined), len(d.handoffs))
	}
	ok = ok && fifo

	increasing := true
	for i := 1; increasing && i < len(d.handoffs); i++ {
		if prev, cur := d.handoffs[i-1].token, d.handoffs[i].token; cur <= prev {
			fmt.Fprintf(out, "  Tokens strictly increasing: NO: hand-off %d got %d after %d\n", i+1, cur, prev)
			increasing = false
		}
	}
	if increasing {
		fmt.Fprintf(out, "  Tokens strictly increasing: yes\n")
	}
	ok = ok && increasing

	if len(left) == 0 {
		fmt.Fprintf(out, "  Nodes left under %s after the sessions closed: none\n", d.path)
	} else {
		fmt.Fprintf(out, "  Nodes left under %s after the sessions closed: %d: NO: %s\n", d.path, len(left), strings.Join(left, ", "))
		ok = false
	}
	return ok
}

// children lists the nodes under path, as up to date as the leader's view.
func children(s *zkrecipes.Session, path string) ([]string, error) {
	if _, err := s.Conn().Sync(path); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, fmt.Errorf("sync %s: %w", path, err)
	}
	names, _, err := s.Conn().Children(path)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", path, err)
	}
	return names, nil
}
