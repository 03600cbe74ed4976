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
// With several servers (-zk a,b,c) each session connects to one of them at
// random, as go-zookeeper does; TestLockSpeedEnsemble runs the same on a
// private 3-server ensemble (make bench-ensemble).
package main

import (
	"context"
	"errors"
	"flag"
	"os"
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
		return bench.Compare(ctx, servers(), counts, *d, *rounds, os.Stdout, os.Stderr)
	})
}
