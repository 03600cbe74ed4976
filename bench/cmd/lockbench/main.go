// Command lockbench compares zklock.Mutex with go-zookeeper's zk.Lock, and
// zklock.CachedMutex (its default freshness window, and a sync for every
// Lock) with the Mutex, on one ZooKeeper server. For each session count it
// runs rounds; in each round every implementation, in an order that
// rotates, loops acquire, check, release for the same duration on a fresh
// lock path, one goroutine and connection per session. It prints the
// median cycles/s of each, the acquire latency over all rounds, the
// sessions' requests per cycle counted on the wire (pings left out), and
// the median of the per-round ratios to the base: the Mutex's to zk.Lock's,
// a CachedMutex's to the Mutex's.
//
//	go run ./cmd/lockbench -zk 127.0.0.1:2181 -sessions 1,2,8,32 -d 3s -rounds 5
//
// A failed check (two holders at once, a fence that does not increase, a
// lease lost while held) stops the run with exit status 1.
// With several servers (-zk a,b,c) each session connects to one of them at
// random, as go-zookeeper does; TestLockSpeedEnsemble runs the same on a
// private 3-server ensemble (make bench-ensemble).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/zkrecipes/zkrecipes/bench"
)

func main() {
	servers := bench.ServersFlag()
	sessions := flag.String("sessions", "1,2,8,32", "session counts, comma-separated")
	implList := flag.String("impls", implNames(bench.Impls), "implementations, comma-separated, of "+implNames(bench.Impls))
	d := flag.Duration("d", 3*time.Second, "how long each implementation runs in each round")
	rounds := flag.Int("rounds", 5, "rounds per session count")
	flag.Parse()

	counts, err := bench.ParseCounts(*sessions, "sessions", "count")
	if err == nil && (*rounds < 1 || *d <= 0) {
		err = errors.New("-rounds and -d must be positive")
	}
	var impls []bench.Impl
	if err == nil {
		impls, err = parseImpls(*implList)
	}
	bench.Main("lockbench", err, func(ctx context.Context) error {
		return bench.Compare(ctx, servers(), counts, impls, *d, *rounds, os.Stdout, os.Stderr)
	})
}

func implNames(impls []bench.Impl) string {
	names := make([]string, len(impls))
	for i, impl := range impls {
		names[i] = string(impl)
	}
	return strings.Join(names, ",")
}

// parseImpls reads -impls: known names, none twice.
func parseImpls(s string) ([]bench.Impl, error) {
	var out []bench.Impl
	for _, name := range strings.Split(s, ",") {
		impl := bench.Impl(strings.TrimSpace(name))
		if !slices.Contains(bench.Impls, impl) {
			return nil, fmt.Errorf("-impls: unknown implementation %q; known: %s", name, implNames(bench.Impls))
		}
		if slices.Contains(out, impl) {
			return nil, fmt.Errorf("-impls: %q twice", name)
		}
		out = append(out, impl)
	}
	return out, nil
}
