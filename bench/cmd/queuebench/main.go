// Command queuebench compares fairqueue with the ZooKeeper queues a user
// would otherwise pick, and with the floor (the three writes per item any
// such queue must make, with the choice of item made for free in process:
// see bench/queue/floor.go), on one server: kazoo's Queue (at most once) and
// LockingQueue (at least once), Curator's DistributedQueue with a lock path
// (at least once) and SimpleDistributedQueue (at most once), from Debian's
// packages (interop/install.sh). Every implementation runs the same loop in
// each round, in an order that rotates from round to round: -producers
// producers and -consumers consumers, each its own session, putting small
// payloads and taking (and acking) as fast as they can for -warmup, then
// -d measured. fairqueue runs twice: with Take and Ack, one job at a time
// and nothing held ahead, and with Work (one handler per consumer, -prefetch
// items held ahead). It prints items/s (consumed, acked where the queue has
// an ack), take latency (take call to item in hand) and the ratio of
// fairqueue's items/s to each other's, and each one's to the floor's, round
// by round.
//
// For fairqueue and the floor it counts on the wire what the consumers'
// sessions send, per item consumed: reads, writes (a multi is one), and
// the writes the server refused (a lost race, a version that moved on: the
// server logs each as it does a write that lands). fairqueue's dispatcher
// is one of its consumers' Queues, elected among them, so its requests are
// counted with theirs; the producers' are not (how they batch is in their
// puts/s).
//
// Then (-mode work) fairqueue's batching beside the floor with one item per
// call: -producers producers each putting -work-batch items per PutMany,
// and -work-consumers consumers each running Work with -work-handlers
// handlers, while the producers keep -work-backlog items pending. The
// defaults, 4 producers with PutMany(100) and 16 consumers with Work(16),
// are issue 25's gate (Work with 16 handlers and PutMany(100): at least 3x
// the single-item floor), measured with 16 consumers as the dispatcher
// probe's batched rows were (16 consumers x 16 credits: 2.56x the floor
// with the dispatcher reading the payloads, 4.24x with the consumers
// reading their own); -work-consumers 1 measures one consumer's Work.
//
// Then the consumer-scaling curve of fairqueue and the floor (-scale-impls),
// alternating rounds: -work of simulated work per job, for each of -scale
// consumer counts, with producers keeping a backlog; it prints acked
// items/s per consumer count, the ratio to the floor and the refused writes
// per item, and writes the curve to -out/queue-scaling.csv and
// -out/queue-scaling.png.
//
// -fsync says that the server syncs its transaction log to disk before it
// acknowledges a write (forceSync=yes), which the servers of
// scripts/zk-up.sh and package zktest do not (forceSync=no), and the output
// says so. The flag labels the output only; the server's configuration is
// what makes it true: make bench-queue-fsync starts a server of its own
// with forceSync=yes and runs the 4x4 comparison and the 64-consumer point
// on it, with -fsync.
//
//	go run ./cmd/queuebench -zk 127.0.0.1:2181 -rounds 5 -d 5s -scale 1,4,16,64
//	go run ./cmd/queuebench -mode compare,scale -impls fairqueue,fairqueue.Work,floor -scale 64
//	go run ./cmd/queuebench -quick   # 2 rounds of 3s, scaling 1,4
//
// Any error in any worker (a lost claim or lock included: no faults are
// injected) stops the run with exit status 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/zkrecipes/zkrecipes/bench"
	"github.com/zkrecipes/zkrecipes/bench/queue"
)

type config struct {
	servers        []string
	impls          []queue.Impl
	loop           queue.Loop
	rounds         int
	compare, scale bool
	workMode       bool
	workLoop       queue.Loop
	workBacklog    int
	counts         []int
	work           time.Duration
	scaleProducers int
	scaleBacklog   int
	scaleRounds    int
	scaleImpls     []queue.Impl
	out            string
	kazooPoll      time.Duration
	fsync          bool
}

func main() {
	servers := bench.ServersFlag()
	impls := flag.String("impls", "all", "implementations to compare, comma-separated: all, or some of "+fmt.Sprint(queue.Impls))
	producers := flag.Int("producers", 4, "producers, each its own session")
	consumers := flag.Int("consumers", 4, "consumers, each its own session")
	d := flag.Duration("d", 5*time.Second, "measured time of each implementation in each round")
	warmup := flag.Duration("warmup", 2*time.Second, "unmeasured run before -d, in each round")
	rounds := flag.Int("rounds", 5, "rounds of the comparison")
	payload := flag.Int("payload", 16, "bytes per item")
	kazooPoll := flag.Duration("kazoo-poll", 2*time.Millisecond, "sleep of a kazoo.Queue consumer after get finds the queue empty (it has no blocking get)")
	mode := flag.String("mode", "all", "what to run, comma-separated: compare (the table), work (Work and PutMany beside the floor), scale (the curve); all: the three")
	scale := flag.String("scale", "1,4,16,64", "consumer counts of the scaling curve")
	work := flag.Duration("work", 10*time.Millisecond, "simulated work per job in the scaling curve")
	scaleProducers := flag.Int("scale-producers", 0, "producers in the scaling curve (0: max(4, consumers/8))")
	scaleBacklog := flag.Int("scale-backlog", 0, "items the scaling producers keep pending (0: max(200, 10 x consumers))")
	scaleRounds := flag.Int("scale-rounds", 3, "rounds per consumer count of the scaling curve")
	scaleImpls := flag.String("scale-impls", "fairqueue,fairqueue.Work,floor", "implementations of the scaling curve: some of fairqueue, fairqueue.Work, floor")
	workHandlers := flag.Int("work-handlers", 16, "mode work: handlers of each consumer's Work")
	workBatch := flag.Int("work-batch", 100, "mode work: items per PutMany of each producer")
	workConsumers := flag.Int("work-consumers", 16, "mode work: consumers (sessions), each running Work (16: issue 25's gate, as the dispatcher probe measured it)")
	prefetch := flag.Int("prefetch", queue.DefaultPrefetch, "items each fairqueue Work holds ahead of its handlers (WithPrefetch), wherever Work runs; -1: Work's default")
	fsync := flag.Bool("fsync", false, "the server runs with forceSync=yes: say so in the output (a label: the server's configuration makes it true; see make bench-queue-fsync)")
	workBacklog := flag.Int("work-backlog", 2000, "mode work: items the producers keep pending")
	out := flag.String("out", "results", "directory for queue-scaling.csv and queue-scaling.png")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (all implementations, this process only) to this file")
	quick := flag.Bool("quick", false, "a short try: -rounds 2 -warmup 1s -d 3s -scale 1,4 -scale-rounds 1 -out results/quick, where not set")
	flag.Parse()

	if *quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range map[string]string{"rounds": "2", "warmup": "1s", "d": "3s", "scale": "1,4",
			"scale-rounds": "1", "out": filepath.Join("results", "quick")} {
			if !set[name] {
				_ = flag.Set(name, v)
			}
		}
	}

	c := config{servers: servers(), rounds: *rounds, work: *work, scaleProducers: *scaleProducers,
		scaleBacklog: *scaleBacklog, scaleRounds: *scaleRounds, out: *out, kazooPoll: *kazooPoll, fsync: *fsync,
		loop: queue.Loop{Producers: *producers, Consumers: *consumers, Warmup: *warmup, Duration: *d, Payload: *payload, Prefetch: *prefetch}}
	var err error
	for m := range strings.SplitSeq(*mode, ",") {
		switch strings.TrimSpace(m) {
		case "all":
			c.compare, c.workMode, c.scale = true, true, true
		case "compare":
			c.compare = true
		case "work":
			c.workMode = true
		case "scale":
			c.scale = true
		default:
			err = fmt.Errorf("-mode: want all, or some of compare, work, scale, comma-separated, not %q", m)
		}
	}
	c.workBacklog = *workBacklog
	c.workLoop = queue.Loop{Producers: *producers, Consumers: *workConsumers, Warmup: *warmup, Duration: *d, Payload: *payload,
		Handlers: *workHandlers, Prefetch: *prefetch, Batch: *workBatch}
	if err == nil {
		c.impls, err = queue.ParseImpls(*impls)
	}
	if err == nil {
		c.counts, err = bench.ParseCounts(*scale, "scale", "consumer count")
	}
	if err == nil {
		c.scaleImpls, err = queue.ParseImpls(*scaleImpls)
		for _, i := range c.scaleImpls {
			if i != queue.FairQueue && i != queue.FairQueueWork && i != queue.Floor && err == nil {
				err = fmt.Errorf("-scale-impls: the scaling curve runs fairqueue, fairqueue.Work and floor, not %s", i)
			}
		}
	}
	if err == nil && (c.rounds < 1 || c.scaleRounds < 1 || *d <= 0 || *warmup < 0 || *producers < 1 || *consumers < 1 || *payload < 0 || *work < 0) {
		err = errors.New("-rounds, -scale-rounds, -d, -producers and -consumers must be positive; -warmup, -payload and -work not negative")
	}
	if err == nil && (*workConsumers < 1 || *workHandlers < 1 || *workBatch < 1 || *workBacklog < 1) {
		err = errors.New("-work-consumers, -work-handlers, -work-batch and -work-backlog must be positive")
	}
	if err == nil && *prefetch < queue.DefaultPrefetch {
		err = fmt.Errorf("-prefetch %d: want 0 or more, or -1 for Work's default", *prefetch)
	}
	bench.Main("queuebench", err, func(ctx context.Context) error {
		if *cpuprofile != "" {
			f, err := os.Create(*cpuprofile)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
			defer pprof.StopCPUProfile()
		}
		return run(ctx, c)
	})
}

func run(ctx context.Context, c config) (err error) {
	b, err := queue.New(ctx, c.servers)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.Close()) }()
	b.KazooPoll = c.kazooPoll
	fmt.Printf("ZooKeeper %s; GOMAXPROCS=%d, %s; %d CPUs\n", strings.Join(c.servers, ","), runtime.GOMAXPROCS(0), runtime.Version(), runtime.NumCPU())
	if c.fsync {
		fmt.Println("The server's fsync is ON (forceSync=yes, -fsync): each write is on disk before it is acknowledged")
	} else {
		fmt.Println("The server's fsync is off (forceSync=no, as scripts/zk-up.sh and zktest start servers; -fsync labels a run against one with forceSync=yes)")
	}
	prefetch := "Work's default"
	if c.loop.Prefetch != queue.DefaultPrefetch {
		prefetch = strconv.Itoa(c.loop.Prefetch)
	}
	fmt.Printf("fairqueue's Work holds ahead of its handlers: %s (-prefetch)\n", prefetch)
	if c.compare {
		if err := compare(ctx, b, c); err != nil {
			return err
		}
	}
	if c.workMode {
		if c.compare {
			fmt.Println()
		}
		if err := workRounds(ctx, b, c); err != nil {
			return err
		}
	}
	if c.scale {
		if c.compare || c.workMode {
			fmt.Println()
		}
		if err := scale(ctx, b, c); err != nil {
			return err
		}
	}
	return nil
}

// workRounds runs fairqueue with its batching on (producers' PutMany,
// consumers' Work) beside the floor with one item per call, alternating
// rounds; in both, producers keep -work-backlog items pending, so that the
// round measures what flows through the queue, not who loads the server
// hardest. It prints the ratio.
func workRounds(ctx context.Context, b *queue.Bench, c config) error {
	wl := queue.ScaleLoop{Producers: c.loop.Producers, Consumers: c.workLoop.Consumers, Backlog: c.workBacklog,
		Warmup: c.loop.Warmup, Duration: c.loop.Duration, Payload: c.loop.Payload, Handlers: c.workLoop.Handlers,
		Prefetch: c.workLoop.Prefetch, Batch: c.workLoop.Batch}
	fl := queue.ScaleLoop{Producers: c.loop.Producers, Consumers: c.loop.Consumers, Backlog: c.workBacklog,
		Warmup: c.loop.Warmup, Duration: c.loop.Duration, Payload: c.loop.Payload}
	fmt.Printf("Batching: fairqueue with %d producers putting %d items per PutMany and %d consumer(s) running Work with %d handlers,\n",
		wl.Producers, wl.Batch, wl.Consumers, wl.Handlers)
	fmt.Printf("beside the floor with one item per call (%d x %d); producers keep %d items pending; no work per job;\n",
		fl.Producers, fl.Consumers, c.workBacklog)
	fmt.Printf("%d rounds of %v warm-up + %v measured, alternating. Issue 25's gate: 16 consumers x Work(16), PutMany(100), at least 3x the floor\n",
		c.rounds, wl.Warmup, wl.Duration)
	fmt.Println("refused: the consumers' writes the server refused, per item acked; reads, writes: the consumers' requests per item acked (a multi is one write), over all rounds")
	var fq, floor, ratio []float64
	sums := map[queue.Impl]queue.Result{}
	for r := range c.rounds {
		for k := range 2 {
			impl, l := queue.FairQueueWork, wl
			if (r+k)%2 == 1 {
				impl, l = queue.Floor, fl
			}
			res, err := b.Scale(ctx, impl, l)
			if err != nil {
				return fmt.Errorf("work round %d: %w", r+1, err)
			}
			if impl == queue.Floor {
				floor = append(floor, res.PerSec())
			} else {
				fq = append(fq, res.PerSec())
			}
			sums[impl] = add(sums[impl], res.Result)
			fmt.Fprintf(os.Stderr, "work round %d: %-15s %7.0f items/s  %7.0f puts/s  min backlog %d  refused writes/item %.3f  reads/item %.2f  writes/item %.2f\n",
				r+1, impl, res.PerSec(), res.PutsPerSec(), res.MinBacklog, res.RefusedPerItem(), res.ReadsPerItem(), res.WritesPerItem())
		}
		ratio = append(ratio, fq[r]/floor[r])
	}
	row := func(name string, perSec float64, vs string, sum queue.Result) {
		fmt.Printf("%-46s  %8.0f  %-18s  %7.3f  %5.2f  %6.2f\n", name, perSec, vs, sum.RefusedPerItem(), sum.ReadsPerItem(), sum.WritesPerItem())
	}
	fmt.Printf("%-46s  %8s  %-18s  %7s  %5s  %6s\n", "", "items/s", "/floor", "refused", "reads", "writes")
	row(fmt.Sprintf("fairqueue %d x Work(%d) + PutMany(%d)", wl.Consumers, wl.Handlers, wl.Batch), bench.Median(fq), bench.MedianRange(ratio, 2), sums[queue.FairQueueWork])
	row(fmt.Sprintf("floor, one item per call (%d x %d)", fl.Producers, fl.Consumers), bench.Median(floor), "("+bench.MedianRange(floor, 0)+")", sums[queue.Floor])
	return nil
}

// add adds up two rounds' items acked and requests counted.
func add(a, b queue.Result) queue.Result {
	a.Acked += b.Acked
	a.Refused += b.Refused
	a.Reads += b.Reads
	a.Writes += b.Writes
	return a
}

// compare runs the rounds of the comparison and prints its table.
func compare(ctx context.Context, b *queue.Bench, c config) error {
	l := c.loop
	fmt.Printf("%d producers x %d consumers, each its own session; %d-byte items; %d rounds of %v warm-up + %v measured per implementation; the order rotates each round\n",
		l.Producers, l.Consumers, l.Payload, c.rounds, l.Warmup, l.Duration)
	perSec := map[queue.Impl][]float64{}
	putsPerSec := map[queue.Impl][]float64{}
	left := map[queue.Impl][]float64{}
	take := map[queue.Impl][]time.Duration{}
	counts := map[queue.Impl]queue.Result{} // the requests counted and the items consumed, over all rounds
	for r := range c.rounds {
		order := slices.Concat(c.impls[r%len(c.impls):], c.impls[:r%len(c.impls)])
		for _, impl := range order {
			res, err := b.Run(ctx, impl, l)
			if err != nil {
				return fmt.Errorf("round %d: %w", r+1, err)
			}
			perSec[impl] = append(perSec[impl], res.PerSec())
			putsPerSec[impl] = append(putsPerSec[impl], res.PutsPerSec())
			left[impl] = append(left[impl], float64(res.Left()))
			take[impl] = append(take[impl], res.Take...)
			reqs := ""
			if res.Counted {
				counts[impl] = add(counts[impl], res)
				reqs = fmt.Sprintf("  refused writes/item %.3f  reads/item %.2f  writes/item %.2f", res.RefusedPerItem(), res.ReadsPerItem(), res.WritesPerItem())
			}
			fmt.Fprintf(os.Stderr, "round %d: %-31s %7.0f items/s  %7.0f puts/s  take p50 %s  left %d%s\n",
				r+1, impl, res.PerSec(), res.PutsPerSec(), bench.Millis(bench.Percentile(res.Take, 50)), res.Left(), reqs)
		}
	}
	fmt.Println("items/s: items consumed (acked, where the queue has an ack) per second, median over rounds; puts/s likewise;")
	fmt.Println("take: from the take call to the item in hand, over all rounds; left: items put and not consumed by a round's end, median;")
	fmt.Println("refused: the consumers' writes the server refused, per item consumed (fairqueue, its dispatcher included, and the floor; -: not counted);")
	fmt.Println("reads, writes: the consumers' requests per item consumed (a multi is one write; fairqueue, its dispatcher included, and the floor);")
	fmt.Println("fairqueue/x and x/floor: median (min-max) over rounds of the ratio of items/s in the same round")
	fmt.Printf("%-31s  %-13s  %8s  %8s  %10s  %10s  %7s  %7s  %5s  %6s  %-18s  %s\n", "implementation", "delivery", "items/s", "puts/s",
		"take p50", "take p99", "left", "refused", "reads", "writes", "fairqueue/x", "x/floor")
	ratio := func(num, den []float64) string {
		if len(num) == 0 || len(den) == 0 {
			return ""
		}
		var rs []float64
		for i := range num {
			rs = append(rs, num[i]/den[i])
		}
		return bench.MedianRange(rs, 2)
	}
	for _, impl := range c.impls {
		var vsFQ, vsFloor string
		if impl != queue.FairQueue {
			vsFQ = ratio(perSec[queue.FairQueue], perSec[impl])
		}
		if impl != queue.Floor {
			vsFloor = ratio(perSec[impl], perSec[queue.Floor])
		}
		refused, reads, writes := "-", "-", "-"
		if c, ok := counts[impl]; ok && c.Acked > 0 {
			refused = fmt.Sprintf("%.3f", c.RefusedPerItem())
			reads, writes = fmt.Sprintf("%.2f", c.ReadsPerItem()), fmt.Sprintf("%.2f", c.WritesPerItem())
		}
		fmt.Printf("%-31s  %-13s  %8.0f  %8.0f  %10s  %10s  %7.0f  %7s  %5s  %6s  %-18s  %s\n", impl, impl.Delivery(),
			bench.Median(perSec[impl]), bench.Median(putsPerSec[impl]),
			bench.Millis(bench.Percentile(take[impl], 50)), bench.Millis(bench.Percentile(take[impl], 99)), bench.Median(left[impl]),
			refused, reads, writes, vsFQ, vsFloor)
	}
	return nil
}

// scale measures the consumer-scaling curve of fairqueue and the floor,
// alternating them round by round, prints it and writes its CSV and PNG.
func scale(ctx context.Context, b *queue.Bench, c config) error {
	l := c.loop
	fmt.Printf("Consumer scaling, %v: %v of work per job (take, work, ack); %d rounds of %v warm-up + %v measured per consumer count, alternating;\n",
		c.scaleImpls, c.work, c.scaleRounds, l.Warmup, l.Duration)
	fmt.Println("producers put only while fewer than the backlog target are pending. ideal: consumers / work;")
	fmt.Println("min backlog: fewest items pending at any 2ms sample (0: consumers may have waited for producers);")
	fmt.Println("refused: the consumers' writes the server refused per item acked; reads, writes: the consumers' requests per item acked (a multi is one write;")
	fmt.Println("fairqueue's dispatcher, one of its consumers, included);")
	fmt.Println("/floor: median (min-max) of the ratio to the floor's round beside it")
	var pts []queue.Point
	type key struct {
		impl queue.Impl
		n    int
	}
	ratios := map[key][]float64{}
	for _, n := range c.counts {
		sl := queue.ScaleLoop{Consumers: n, Producers: c.scaleProducers, Backlog: c.scaleBacklog, Work: c.work,
			Warmup: l.Warmup, Duration: l.Duration, Payload: l.Payload, Prefetch: l.Prefetch}
		if sl.Producers == 0 {
			sl.Producers = max(4, n/8)
		}
		if sl.Backlog == 0 {
			sl.Backlog = max(200, 10*n)
		}
		rs := map[queue.Impl][]queue.ScaleResult{}
		for r := range c.scaleRounds {
			order := slices.Concat(c.scaleImpls[r%len(c.scaleImpls):], c.scaleImpls[:r%len(c.scaleImpls)])
			for _, impl := range order {
				res, err := b.Scale(ctx, impl, sl)
				if err != nil {
					return fmt.Errorf("scaling, %s, %d consumers, round %d: %w", impl, n, r+1, err)
				}
				rs[impl] = append(rs[impl], res)
				fmt.Fprintf(os.Stderr, "scaling: %s, %d consumers, round %d: %.0f acked/s, min backlog %d, refused writes/item %.3f, reads/item %.2f, writes/item %.2f\n",
					impl, n, r+1, res.PerSec(), res.MinBacklog, res.RefusedPerItem(), res.ReadsPerItem(), res.WritesPerItem())
			}
			for impl, f := range rs {
				if fl := rs[queue.Floor]; impl != queue.Floor && len(f) > r && len(fl) > r {
					ratios[key{impl, n}] = append(ratios[key{impl, n}], f[r].PerSec()/fl[r].PerSec())
				}
			}
		}
		for _, impl := range c.scaleImpls {
			pts = append(pts, queue.Summarize(rs[impl]))
		}
	}
	fmt.Printf("%-14s  %9s  %9s  %7s  %8s  %8s  %8s  %10s  %10s  %11s  %7s  %5s  %6s  %s\n", "impl", "consumers", "producers", "backlog",
		"acked/s", "ideal/s", "of ideal", "take p50", "take p99", "min backlog", "refused", "reads", "writes", "/floor")
	for _, p := range pts {
		vs := ""
		if rs := ratios[key{p.Impl, p.Consumers}]; len(rs) > 0 {
			vs = bench.MedianRange(rs, 2)
		}
		fmt.Printf("%-14s  %9d  %9d  %7d  %8.0f  %8.0f  %7.0f%%  %10s  %10s  %11d  %7.3f  %5.2f  %6.2f  %s\n", p.Impl, p.Consumers, p.Producers, p.Backlog,
			p.PerSec, p.Ideal, 100*p.PerSec/p.Ideal, bench.Millis(p.TakeP50), bench.Millis(p.TakeP99), p.MinBacklog, p.RefusedPerItem,
			p.ReadsPerItem, p.WritesPerItem, vs)
	}
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return err
	}
	csvPath := filepath.Join(c.out, "queue-scaling.csv")
	f, err := os.Create(csvPath)
	if err != nil {
		return err
	}
	err = queue.WriteCSV(f, pts)
	if err = errors.Join(err, f.Close()); err != nil {
		return err
	}
	pngPath := filepath.Join(c.out, "queue-scaling.png")
	title := fmt.Sprintf("acked items/s by consumers, %v of work per job", c.work)
	if err := queue.PlotPNG(pngPath, title, pts); err != nil {
		return err
	}
	fmt.Printf("wrote %s and %s\n", csvPath, pngPath)
	return nil
}
