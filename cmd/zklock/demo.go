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

// demo is `zklock demo`: the three uses of the library, one after the
// other, on one ZooKeeper, every client with a session of its own: workers
// take turns on a fair mutex (demo_lock.go), replicas hand a leadership
// over (demo_election.go), producers and consumers share a queue
// (demo_queue.go). Each part checks what it shows.
func (c *cli) demo(args []string) (int, error) {
	fs := c.flagSet("demo")
	d := &demoRun{cli: c}
	fs.StringVar(&d.path, "path", "/zkrecipes/demo", "the demo's `directory`: the lock is PATH/lock, the election PATH/election, the queue PATH/queue")
	fs.IntVar(&d.workers, "workers", 5, "mutex: number of workers")
	fs.IntVar(&d.rounds, "rounds", 3, "mutex: how many times each worker takes the lock")
	fs.IntVar(&d.replicas, "replicas", 3, "election: number of replicas campaigning")
	fs.IntVar(&d.producers, "producers", 2, "queue: number of producers")
	fs.IntVar(&d.consumers, "consumers", 3, "queue: number of consumers")
	fs.IntVar(&d.items, "items", 3, "queue: how many jobs each producer puts")
	fs.DurationVar(&d.hold, "hold", 50*time.Millisecond, "how long a worker holds the lock, a leader leads, a consumer works on a job")
	synopsis := "demo [-path P] [-workers N] [-rounds R] [-replicas N] [-producers N] [-consumers N] [-items N] [-hold D]"
	if err := c.parse(fs, args, synopsis); err != nil {
		return exitUsage, err
	}
	if fs.NArg() > 0 {
		return exitUsage, usagef("demo: unexpected argument %q", fs.Arg(0))
	}
	for _, n := range []struct {
		flag  string
		value int
	}{{"workers", d.workers}, {"rounds", d.rounds}, {"replicas", d.replicas}, {"producers", d.producers}, {"consumers", d.consumers}, {"items", d.items}} {
		if n.value < 1 {
			return exitUsage, usagef("demo: -%s must be at least 1", n.flag)
		}
	}
	if d.hold < 0 {
		return exitUsage, usagef("demo: -hold must not be negative")
	}
	if err := checkPath(d.path); err != nil {
		return exitUsage, usagef("demo: %v", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return d.run(ctx)
}

// demoRun is one run of the demo.
type demoRun struct {
	*cli
	path                        string
	workers, rounds             int
	replicas                    int
	producers, consumers, items int
	hold                        time.Duration
	observer                    *zkrecipes.Session // lists lines, observes the election, checks what is left
	lockPath, electPath, qPath  string
	outMu                       sync.Mutex // the parts' goroutines print
	checks                      int
	failed                      []string // the checks that failed
}

func (d *demoRun) run(ctx context.Context) (int, error) {
	d.lockPath, d.electPath, d.qPath = d.path+"/lock", d.path+"/election", d.path+"/queue"
	d.printf("zklock demo: a fair mutex, a leader election and a job queue on one ZooKeeper (%s),\n", d.servers)
	d.printf("each worker, replica, producer and consumer with a ZooKeeper session of its own.\n")

	var err error
	if d.observer, err = d.connect(ctx, d.log.With("who", "observer")); err != nil {
		return exitFailure, err
	}
	defer d.observer.Close()
	if err := d.checkUnused(ctx); err != nil {
		return exitFailure, err
	}
	for _, part := range []func(context.Context) error{d.mutexPart, d.electionPart, d.queuePart} {
		err := part(ctx)
		if ctx.Err() != nil {
			return exitFailure, errors.New("demo interrupted")
		}
		if err != nil {
			return exitFailure, err
		}
	}
	if len(d.failed) > 0 {
		d.printf("\n%d of %d checks FAILED: %s\n", len(d.failed), d.checks, strings.Join(d.failed, "; "))
		return exitFailure, nil
	}
	d.printf("\nAll %d checks passed.\n", d.checks)
	return exitOK, nil
}

// checkUnused fails unless the demo's lock, election and queue are unused:
// the demo checks what it finds there against what it did.
func (d *demoRun) checkUnused(ctx context.Context) error {
	m, err := zklock.NewMutex(d.observer, d.lockPath)
	if err != nil {
		return err
	}
	if cs, err := m.Contenders(ctx); err != nil {
		return err
	} else if len(cs) > 0 {
		return fmt.Errorf("%s is in use (%d contenders; see zklock holders %s): the demo needs a lock of its own (-path)", d.lockPath, len(cs), d.lockPath)
	}
	el, err := zklock.NewElection(d.observer, d.electPath)
	if err != nil {
		return err
	}
	if cs, err := el.Contenders(ctx); err != nil {
		return err
	} else if len(cs) > 0 {
		return fmt.Errorf("%s is in use (%d contenders; see zklock holders %s): the demo needs an election of its own (-path)", d.electPath, len(cs), d.electPath)
	}
	if left, err := queueLeft(d.observer, d.qPath); err != nil {
		return err
	} else if len(left) > 0 {
		return fmt.Errorf("%s is in use (it holds %s; see zklock queue ls %s): the demo needs a queue of its own (-path)", d.qPath, nodeList(left), d.qPath)
	}
	return nil
}

// printf prints to stdout; the parts' goroutines print concurrently.
func (d *demoRun) printf(format string, args ...any) {
	d.outMu.Lock()
	defer d.outMu.Unlock()
	fmt.Fprintf(d.stdout, format, args...)
}

// event prints one line of a part's timeline: the time since start, who,
// and what happened.
func (d *demoRun) event(start time.Time, who, format string, args ...any) {
	d.printf("  %+8.3fs  %-11s  %s\n", time.Since(start).Seconds(), who, fmt.Sprintf(format, args...))
}

// check prints the outcome of one check: "yes", or "NO: why".
func (d *demoRun) check(what string, ok bool, why string) {
	d.checks++
	if ok {
		d.printf("  %s: yes\n", what)
		return
	}
	d.printf("  %s: NO: %s\n", what, why)
	d.failed = append(d.failed, what)
}

// checkNoneLeft checks that nothing of a part is left under path once its
// sessions are closed (left lists it).
func (d *demoRun) checkNoneLeft(path string, left []string) {
	d.check(fmt.Sprintf("Nothing left under %s after the sessions closed", path), len(left) == 0,
		fmt.Sprintf("%d nodes: %s", len(left), nodeList(left)))
}

// nodeList shows a few of a list of nodes.
func nodeList(nodes []string) string {
	const most = 5
	if len(nodes) <= most {
		return strings.Join(nodes, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(nodes[:most], ", "), len(nodes)-most)
}

// connectAll connects n sessions, for the clients name-1 ... name-n. On
// error it closes those it made.
func (d *demoRun) connectAll(ctx context.Context, name string, n int) ([]*zkrecipes.Session, error) {
	ss := make([]*zkrecipes.Session, n)
	for i := range n {
		who := clientName(name, i)
		s, err := d.connect(ctx, d.log.With("who", who))
		if err != nil {
			closeAll(ss)
			return nil, fmt.Errorf("%s: %w", who, err)
		}
		ss[i] = s
	}
	return ss, nil
}

// closeAll closes the sessions not closed yet, and forgets them.
func closeAll(ss []*zkrecipes.Session) {
	for i, s := range ss {
		if s != nil {
			s.Close()
			ss[i] = nil
		}
	}
}

// count is "1 worker", "2 workers".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func clientName(name string, i int) string { return fmt.Sprintf("%s-%d", name, i+1) }

// clientData is what a client stores in its nodes: its name first.
func clientData(name string) []byte { return fmt.Appendf(nil, "%s pid %d", name, os.Getpid()) }

// clientOf is the name of the client whose node holds data (clientData).
func clientOf(data []byte) string {
	name, _, _ := strings.Cut(string(data), " ")
	return name
}

// waitInLine returns once name's node is among the contenders, or done is
// closed (its acquire returned), or ctx ends: so that the next client joins
// the line behind it.
func waitInLine(ctx context.Context, contenders func(context.Context) ([]zklock.Contender, error), name string, done <-chan struct{}) {
	ours := func(c zklock.Contender) bool { return clientOf(c.Data) == name }
	for {
		if cs, err := contenders(ctx); err == nil && slices.ContainsFunc(cs, ours) {
			return
		}
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
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
