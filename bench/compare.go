package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Compare runs cmd/lockbench's comparison on servers: for each session
// count, rounds rounds in which each of impls, in an order that rotates
// from round to round, loops for d on a fresh lock path, after one brief
// warm-up of each. It writes the table to out and each round's figures to
// progress. A failed check stops it with an error.
//
// Each row's ratio is per round, against its base measured in the same
// round: the Mutex against zk.Lock, a CachedMutex against the Mutex.
func Compare(ctx context.Context, servers []string, counts []int, impls []Impl, d time.Duration, rounds int, out, progress io.Writer) (err error) {
	b, err := New(ctx, servers)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.Close()) }()

	// Warm up each (JIT, connections, allocator) once, briefly, unreported.
	for _, impl := range impls {
		if _, err := b.round(ctx, impl, slices.Max(counts), min(d, time.Second)); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}

	fmt.Fprintf(out, "ZooKeeper %s; %d rounds of %v per implementation; order rotates; GOMAXPROCS=%d, %s\n",
		strings.Join(servers, ","), rounds, d, runtime.GOMAXPROCS(0), runtime.Version())
	fmt.Fprintln(out, "cycles/s: median over rounds; acquire latency: over all cycles of all rounds; requests/cycle: the sessions' requests on the wire (pings left out), all rounds;")
	fmt.Fprintln(out, "ratio: median (min-max) of the per-round ratio of cycles/s to the base's in the same round")
	fmt.Fprintf(out, "%8s  %-16s  %10s  %11s  %11s  %14s  %-24s  %s\n", "sessions", "impl", "cycles/s", "acquire p50", "acquire p99", "requests/cycle", "ratio", "base")
	for _, n := range counts {
		perSec := map[Impl][]float64{}
		acquire := map[Impl][]time.Duration{}
		requests, cycles := map[Impl]int64{}, map[Impl]int64{}
		for r := range rounds {
			order := append(slices.Clone(impls[r%len(impls):]), impls[:r%len(impls)]...)
			var line []string
			for _, impl := range order {
				res, err := b.round(ctx, impl, n, d)
				if err != nil {
					return err
				}
				perSec[impl] = append(perSec[impl], res.PerSec())
				acquire[impl] = append(acquire[impl], res.Acquire...)
				requests[impl] += res.Requests
				cycles[impl] += res.Cycles
				line = append(line, fmt.Sprintf("%s %.0f/s", impl, res.PerSec()))
			}
			fmt.Fprintf(progress, "sessions=%d round %d: %s\n", n, r+1, strings.Join(line, ", "))
		}
		for _, impl := range impls {
			ratio, base := "", baseOf(impl)
			if _, ok := perSec[base]; ok {
				var rs []float64
				for r := range rounds {
					rs = append(rs, perSec[impl][r]/perSec[base][r])
				}
				ratio = MedianRange(rs, 3)
			} else {
				base = ""
			}
			fmt.Fprintf(out, "%8d  %-16s  %10.0f  %11s  %11s  %14.4f  %-24s  %s\n", n, impl, Median(perSec[impl]),
				Millis(Percentile(acquire[impl], 50)), Millis(Percentile(acquire[impl], 99)),
				float64(requests[impl])/float64(cycles[impl]), ratio, base)
		}
	}
	return nil
}

// baseOf is what impl's ratio is measured against.
func baseOf(impl Impl) Impl {
	switch impl {
	case Ours:
		return Theirs
	case Cached, Strict:
		return Ours
	}
	return ""
}

// round connects n sessions of impl, runs them for d and closes them.
func (b *Bench) round(ctx context.Context, impl Impl, n int, d time.Duration) (Result, error) {
	r, err := b.Open(ctx, impl, n)
	if err != nil {
		return Result{}, err
	}
	res, err := r.Run(ctx, Until{Duration: d})
	return res, errors.Join(err, r.Close())
}
