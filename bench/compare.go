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
// count, rounds rounds in which both implementations, in alternating
// order, loop for d on a fresh lock path, after one brief warm-up of each.
// It writes the table to out and each round's figures to progress. A failed
// check stops it with an error.
func Compare(ctx context.Context, servers []string, counts []int, d time.Duration, rounds int, out, progress io.Writer) (err error) {
	b, err := New(ctx, servers)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.Close()) }()

	// Warm up both (JIT, connections, allocator) once, briefly, unreported.
	for _, impl := range []Impl{Theirs, Ours} {
		if _, err := b.round(ctx, impl, slices.Max(counts), min(d, time.Second)); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}

	fmt.Fprintf(out, "ZooKeeper %s; %d rounds of %v per implementation; order alternates; GOMAXPROCS=%d, %s\n",
		strings.Join(servers, ","), rounds, d, runtime.GOMAXPROCS(0), runtime.Version())
	fmt.Fprintln(out, "cycles/s: median over rounds; acquire latency: over all cycles of all rounds; ratio: median (min-max) of per-round ours/theirs")
	fmt.Fprintf(out, "%8s  %-12s  %10s  %11s  %11s  %s\n", "sessions", "impl", "cycles/s", "acquire p50", "acquire p99", "ours/theirs")
	for _, n := range counts {
		perSec := map[Impl][]float64{}
		acquire := map[Impl][]time.Duration{}
		var ratios []float64
		for r := range rounds {
			order := []Impl{Theirs, Ours}
			if r%2 == 1 {
				slices.Reverse(order)
			}
			for _, impl := range order {
				res, err := b.round(ctx, impl, n, d)
				if err != nil {
					return err
				}
				perSec[impl] = append(perSec[impl], res.PerSec())
				acquire[impl] = append(acquire[impl], res.Acquire...)
			}
			ratios = append(ratios, perSec[Ours][r]/perSec[Theirs][r])
			fmt.Fprintf(progress, "sessions=%d round %d (%s first): %s %.0f/s, %s %.0f/s, ratio %.3f\n",
				n, r+1, order[0], Theirs, perSec[Theirs][r], Ours, perSec[Ours][r], ratios[r])
		}
		for _, impl := range []Impl{Theirs, Ours} {
			ratio := ""
			if impl == Ours {
				ratio = MedianRange(ratios, 3)
			}
			fmt.Fprintf(out, "%8d  %-12s  %10.0f  %11s  %11s  %s\n", n, impl, Median(perSec[impl]),
				Millis(Percentile(acquire[impl], 50)), Millis(Percentile(acquire[impl], 99)), ratio)
		}
	}
	return nil
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
