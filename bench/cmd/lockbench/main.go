// Command lockbench compares zklock.Mutex with go-zookeeper's zk.Lock on one
// ZooKeeper server. For each session count it runs rounds; in each round
// both implementations, in alternating order, loop acquire, check, release
// for the same duration on a fresh lock path, one goroutine and connection
// per session. It prints the median cycles/s of each, the acquire latency
// over all rounds, and the median of the per-round ratios ours/theirs.
//
//	go run ./cmd/lockbench -zk 127.0.0.1:2181 -sessions 1,8,32 -d 3s -rounds 5
//
// A failed check (two holders at once, a fencing token that does not
// increase, a lease lost while held) stops the run with exit status 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/zkrecipes/zkrecipes/bench"
)

func main() {
	servers := bench.ServersFlag()
	sessions := flag.String("sessions", "1,8,32", "session counts, comma-separated")
	d := flag.Duration("d", 3*time.Second, "how long each implementation runs in each round")
	rounds := flag.Int("rounds", 5, "rounds per session count")
	flag.Parse()

	counts, err := bench.ParseCounts(*sessions, "sessions", "count")
	if err == nil && (*rounds < 1 || *d <= 0) {
		err = errors.New("-rounds and -d must be positive")
	}
	bench.Main("lockbench", err, func(ctx context.Context) error {
		return run(ctx, servers(), counts, *d, *rounds)
	})
}

func run(ctx context.Context, servers []string, counts []int, d time.Duration, rounds int) (err error) {
	b, err := bench.New(ctx, servers)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.Close()) }()

	// Warm up both (JIT, connections, allocator) once, briefly, unreported.
	for _, impl := range []bench.Impl{bench.Theirs, bench.Ours} {
		if _, err := round(ctx, b, impl, slices.Max(counts), min(d, time.Second)); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}

	fmt.Printf("ZooKeeper %s; %d rounds of %v per implementation; order alternates; GOMAXPROCS=%d, %s\n",
		strings.Join(servers, ","), rounds, d, runtime.GOMAXPROCS(0), runtime.Version())
	fmt.Println("cycles/s: median over rounds; acquire latency: over all cycles of all rounds; ratio: median (min-max) of per-round ours/theirs")
	fmt.Printf("%8s  %-12s  %10s  %11s  %11s  %s\n", "sessions", "impl", "cycles/s", "acquire p50", "acquire p99", "ours/theirs")
	for _, n := range counts {
		perSec := map[bench.Impl][]float64{}
		acquire := map[bench.Impl][]time.Duration{}
		var ratios []float64
		for r := range rounds {
			order := []bench.Impl{bench.Theirs, bench.Ours}
			if r%2 == 1 {
				slices.Reverse(order)
			}
			for _, impl := range order {
				res, err := round(ctx, b, impl, n, d)
				if err != nil {
					return err
				}
				perSec[impl] = append(perSec[impl], res.PerSec())
				acquire[impl] = append(acquire[impl], res.Acquire...)
			}
			ratios = append(ratios, perSec[bench.Ours][r]/perSec[bench.Theirs][r])
			fmt.Fprintf(os.Stderr, "sessions=%d round %d (%s first): %s %.0f/s, %s %.0f/s, ratio %.3f\n",
				n, r+1, order[0], bench.Theirs, perSec[bench.Theirs][r], bench.Ours, perSec[bench.Ours][r], ratios[r])
		}
		for _, impl := range []bench.Impl{bench.Theirs, bench.Ours} {
			ratio := ""
			if impl == bench.Ours {
				ratio = bench.MedianRange(ratios, 3)
			}
			fmt.Printf("%8d  %-12s  %10.0f  %11s  %11s  %s\n", n, impl, bench.Median(perSec[impl]),
				bench.Millis(bench.Percentile(acquire[impl], 50)), bench.Millis(bench.Percentile(acquire[impl], 99)), ratio)
		}
	}
	return nil
}

// round connects n sessions of impl, runs them for d and closes them.
func round(ctx context.Context, b *bench.Bench, impl bench.Impl, n int, d time.Duration) (bench.Result, error) {
	r, err := b.Open(ctx, impl, n)
	if err != nil {
		return bench.Result{}, err
	}
	res, err := r.Run(ctx, bench.Until{Duration: d})
	return res, errors.Join(err, r.Close())
}
