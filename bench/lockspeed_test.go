package bench

import (
	"flag"
	"os"
	"testing"
	"time"

	"github.com/zkrecipes/zkrecipes/zktest"
)

// TestLockSpeedEnsemble is cmd/lockbench (make bench) on a private 3-server
// ensemble, where the Session proves its contact with the leader through
// syncs and writes when its server is a follower; each session connects to
// one of the three at random. On by -lockbench.ensemble:
//
//	cd bench && go test -run '^TestLockSpeedEnsemble$' -v -timeout 30m . -lockbench.ensemble
//
// or make bench-ensemble.
var (
	lockEnsemble = flag.Bool("lockbench.ensemble", false, "run TestLockSpeedEnsemble (make bench-ensemble)")
	lockSessions = flag.String("lockbench.sessions", "1,8,32", "session counts, comma-separated")
	lockFor      = flag.Duration("lockbench.d", 4*time.Second, "how long each implementation runs in each round")
	lockRounds   = flag.Int("lockbench.rounds", 9, "rounds per session count")
	lockTick     = flag.Duration("lockbench.tick", 2*time.Second, "the servers' tickTime")
)

func TestLockSpeedEnsemble(t *testing.T) {
	if !*lockEnsemble {
		t.Skip("go test ./bench -run TestLockSpeedEnsemble -lockbench.ensemble (make bench-ensemble)")
	}
	counts, err := ParseCounts(*lockSessions, "lockbench.sessions", "count")
	if err != nil {
		t.Fatal(err)
	}
	zktest.CheckGoroutines(t)
	c := zktest.StartCluster(t, 3, zktest.WithTickTime(*lockTick))
	t.Logf("tickTime %v", *lockTick)
	if err := Compare(t.Context(), c.Addrs(), counts, Impls, *lockFor, *lockRounds, os.Stdout, os.Stderr); err != nil {
		t.Fatal(err)
	}
}
