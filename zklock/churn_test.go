package zklock_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

var (
	churnFor   = flag.Duration("churn.for", 8*time.Second, "how long each case of TestFaultDropChurnMutex contends")
	churnOut   = flag.String("churn.out", "", "append each case of TestFaultDropChurnMutex as a line of CSV to this file")
	churnTwice = flag.Bool("churn.twice", false, "TestFaultDropChurnMutex lists each address twice (see zktest.Dropper.Addrs), which steps over go-zookeeper's pause before it redials the address it was on")
)

// The shape of connection churn an outside tester tried: six sessions (10 s
// timeout) on one Mutex, each connection cut at random after about every
// 8th request it sends (at most once per 100 ms), each holder holding
// 1-10 ms; then the same with only reads cut. The lock must keep moving.
const (
	churnSessions = 6
	churnTimeout  = 10 * time.Second
	churnEvery    = 8
	churnGap      = 100 * time.Millisecond
)

// churnStill bounds the longest stand-still of the lock (from one grant to
// the next) while every session lives. A hand-off under churn waits for
// the release to land (sent again once its client has reconnected) and for
// the waiter to hear of it (its watch, or the fresh listing it makes after
// its own reconnect), and each reconnect costs a connection, a handshake
// and here the Dropper's hold of up to 250 ms on the replies of a new
// connection (see zktest.Dropper); a few such in a row under cuts every
// 100 ms. Nothing in a hand-off waits on anything of the scale of the
// session timeout, so a stand-still of half of it means a waiter missed
// its cue and was woken by chance, or a reconnect waited for no reason:
// before the Session redialed at once, each cut cost a second of silence
// (go-zookeeper's pause before it dials an address it was just on) and the
// lock stood still for 4 to 6 s in 30 s runs (an outside tester's, 11.3 s).
const churnStill = churnTimeout / 2

// A Mutex contended by six sessions whose connections are cut at random
// keeps being handed on: no session is lost, no lease is lost, no two hold
// at once, and the lock never stands still for long while every session
// lives. The figures (grants per second, longest stand-still, cuts) are
// logged; -churn.for sets how long each case contends (8 s by default; the
// tester's shape is 30 s), -churn.out appends them to a CSV file.
func TestFaultDropChurnMutex(t *testing.T) {
	srv := setup(t)
	for _, c := range []struct {
		name  string
		reads bool
	}{{"any request", false}, {"reads only", true}} {
		t.Run(c.name, func(t *testing.T) {
			r := runChurn(t, srv.Addrs(), c.reads, *churnFor)
			t.Logf("%s cut: %d grants in %v (%.1f/s), longest stand-still %v, %d cuts, %d lost sessions, %d lock errors",
				c.name, r.grants, r.span.Round(time.Millisecond), float64(r.grants)/r.span.Seconds(),
				r.still.Round(time.Millisecond), r.cuts, r.lostSessions, r.lockErrors)
			for _, s := range r.stalls {
				t.Logf("  stand-still %v from %v", s.d.Round(time.Millisecond), s.from.Round(time.Millisecond))
			}
			if *churnOut != "" {
				appendChurnCSV(t, *churnOut, c.name, r)
			}
			require.Zero(t, r.overlaps, "two holders at once")
			require.Zero(t, r.lostSessions, "sessions lost: the server lives, and every cut is followed by a reconnect")
			require.Zero(t, r.lostLeases, "leases lost")
			require.Positive(t, r.grants)
			require.Less(t, r.still, churnStill, "the lock stood still with every session alive")
		})
	}
}

// churnRun is what one case of TestFaultDropChurnMutex saw.
type churnRun struct {
	grants       int
	span         time.Duration // from the first grant to the end
	still        time.Duration // the longest time from one grant to the next
	stalls       []stall       // every stand-still of more than a second
	cuts         int
	overlaps     int
	lostSessions int
	lostLeases   int
	lockErrors   int
}

type stall struct{ from, d time.Duration }

func runChurn(t *testing.T, addrs []string, reads bool, d time.Duration) churnRun {
	var (
		mu     sync.Mutex
		grants []time.Duration // since begin
		r      churnRun
		held   atomic.Int32
	)
	droppers := make([]*zktest.Dropper, churnSessions)
	mutexes := make([]*zklock.Mutex, churnSessions)
	sessions := make([]*zkrecipes.Session, churnSessions)
	path := ""
	for i := range churnSessions {
		droppers[i] = &zktest.Dropper{}
		// One address, as a user gives it: the Dropper's doubled list
		// would hide go-zookeeper's pause before it redials the same one.
		list := addrs
		if *churnTwice {
			list = droppers[i].Addrs(addrs)
		}
		sessions[i] = connect(t, list, zkrecipes.WithSessionTimeout(churnTimeout),
			zkrecipes.WithDialer(func(network, address string, timeout time.Duration) (net.Conn, error) {
				return droppers[i].Dial(network, address, timeout)
			}))
		if path == "" {
			path = lockPath(t, sessions[0])
		}
		var err error
		mutexes[i], err = zklock.NewMutex(sessions[i], path)
		require.NoError(t, err)
	}
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for i := range churnSessions {
		droppers[i].Churn(zktest.Churn{Every: churnEvery, Gap: churnGap, Reads: reads, Seed: uint64(i + 1)})
	}
	var wg sync.WaitGroup
	for i, m := range mutexes {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for ctx.Err() == nil {
				l, err := m.Lock(ctx)
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						r.lockErrors++
						mu.Unlock()
						t.Errorf("session %d: Lock: %v", i, err)
					}
					return
				}
				if held.Add(1) > 1 {
					mu.Lock()
					r.overlaps++
					mu.Unlock()
				}
				mu.Lock()
				grants = append(grants, time.Since(begin))
				mu.Unlock()
				time.Sleep(time.Millisecond + time.Duration(rng.Int64N(int64(9*time.Millisecond))))
				held.Add(-1)
				uctx, ucancel := context.WithTimeout(context.Background(), churnTimeout)
				err = l.Unlock(uctx)
				ucancel()
				if err != nil {
					mu.Lock()
					if errors.Is(err, zklock.ErrLockLost) {
						r.lostLeases++
					}
					mu.Unlock()
					t.Errorf("session %d: Unlock: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	end := time.Since(begin)
	for i, dr := range droppers {
		dr.Churn(zktest.Churn{})
		r.cuts += dr.Churned()
		if sessions[i].Err() != nil {
			r.lostSessions++
			t.Errorf("session %d lost: %v", i, sessions[i].Err())
		}
	}
	r.grants = len(grants)
	if len(grants) > 0 {
		r.span = end - grants[0]
		prev := time.Duration(0)
		for _, g := range append(slices.Clone(grants), end) {
			if gap := g - prev; gap > r.still {
				r.still = gap
			}
			if g-prev > time.Second {
				r.stalls = append(r.stalls, stall{prev, g - prev})
			}
			prev = g
		}
	}
	return r
}

func appendChurnCSV(t *testing.T, file, name string, r churnRun) {
	f, err := os.OpenFile(file, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	defer f.Close()
	version, _ := zktest.ServerVersion(zktest.Start(t).Addr())
	_, err = fmt.Fprintf(f, "%s,%s,%s,%d,%.3f,%.1f,%.3f,%d,%d\n", time.Now().Format(time.RFC3339), version, name,
		r.grants, r.span.Seconds(), float64(r.grants)/r.span.Seconds(), r.still.Seconds(), r.cuts, r.lostSessions)
	require.NoError(t, err)
}
