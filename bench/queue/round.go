package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Run runs one round of impl on a fresh queue path: it starts its workers,
// waits until every one is connected, runs the loop, sums up the reports,
// and deletes the queue (untimed).
func (b *Bench) Run(ctx context.Context, impl Impl, l Loop) (res Result, err error) {
	path := b.newPath(strings.ReplaceAll(string(impl), ".", "-"))
	defer func() { err = errors.Join(err, deleteTree(b.admin, path)) }()
	var reports []Report
	var counted func() Counts
	reqs := &Requests{}
	switch impl {
	case FairQueue, FairQueueWork:
		l.Work1 = impl == FairQueueWork
		reports, counted, err = runFairqueue(ctx, b.servers, path, l, reqs)
	case Floor:
		reports, counted, err = runFloor(ctx, b.servers, path, l, reqs)
	default:
		var procs []*proc
		procs, err = b.startPeers(impl, path, l)
		if err == nil {
			reports, err = runProcs(procs, l)
		}
	}
	if err != nil {
		return Result{}, err
	}
	res, err = sum(impl, l.Duration, reports)
	if counted != nil {
		res.Counted = true
		res.Counts = counted()
	}
	return res, err
}

// startPeers starts the processes of one round of a peer implementation:
// for Curator, one JVM with a thread and a client per worker; for kazoo,
// one Python process per worker, so that they do not share a GIL.
func (b *Bench) startPeers(impl Impl, path string, l Loop) ([]*proc, error) {
	p, err := b.peerDir()
	if err != nil {
		return nil, err
	}
	connect := strings.Join(b.servers, ",")
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	common := func(name string, producers, consumers int) []string {
		return []string{path, name, strconv.Itoa(producers), strconv.Itoa(consumers),
			ms(l.Warmup), ms(l.Duration), strconv.Itoa(l.Payload), ms(l.Work)}
	}
	var procs []*proc
	start := func(name string, argv ...string) error {
		pr, err := startProc(name, p.dir, argv...)
		if err == nil {
			procs = append(procs, pr)
		}
		return err
	}
	switch impl {
	case CuratorDistributed, CuratorSimple:
		var cp string
		if cp, err = p.java(); err != nil {
			return nil, err
		}
		mode := map[Impl]string{CuratorDistributed: "distributed", CuratorSimple: "simple"}[impl]
		argv := append([]string{"java", "-cp", cp, "CuratorQueue", mode, connect}, common("curator", l.Producers, l.Consumers)...)
		err = start(string(impl), argv...)
	case KazooQueue, KazooLockingQueue:
		var script string
		if script, err = p.kazoo(); err != nil {
			return nil, err
		}
		mode := map[Impl]string{KazooQueue: "queue", KazooLockingQueue: "locking"}[impl]
		for i := range l.Producers + l.Consumers {
			name, producers, consumers := fmt.Sprintf("p%d", i), 1, 0
			if i >= l.Producers {
				name, producers, consumers = fmt.Sprintf("c%d", i-l.Producers), 0, 1
			}
			argv := append([]string{python, script, mode, connect}, common(name, producers, consumers)...)
			if err = start(fmt.Sprintf("%s %s", impl, name), append(argv, ms(b.KazooPoll))...); err != nil {
				break
			}
		}
	default:
		err = fmt.Errorf("unknown implementation %q", impl)
	}
	if err != nil {
		for _, pr := range procs {
			pr.close()
		}
		return nil, err
	}
	return procs, nil
}
