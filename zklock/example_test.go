package zklock_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// TestMain gives the examples the tests' ZooKeeper, in ZK_CONNECT.
func TestMain(m *testing.M) { os.Exit(zktest.Main(m)) }

// servers is where the examples find ZooKeeper: ZK_CONNECT (a
// comma-separated list), else 127.0.0.1:2181.
func servers() []string {
	return strings.Split(cmp.Or(os.Getenv("ZK_CONNECT"), "127.0.0.1:2181"), ",")
}

// The fencing token travels with every write to the protected resource,
// which refuses a token lower than the highest it has seen: a holder that
// paused past its lease cannot write after the next one.
func ExampleMutex() {
	ctx := context.Background()
	s, err := zkrecipes.Connect(ctx, servers())
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	m, err := zklock.NewMutex(s, "/examples/mutex")
	if err != nil {
		log.Fatal(err)
	}
	store := &fencedStore{}
	for range 2 {
		lease, err := m.Lock(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(store.write(lease.Token(), "hello"))
		if err := lease.Unlock(ctx); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(store.write(1, "from a paused holder"))
	// Output:
	// <nil>
	// <nil>
	// stale token 1
}

// fencedStore is a resource that refuses writes with stale tokens.
type fencedStore struct {
	mu      sync.Mutex
	highest int64
}

func (f *fencedStore) write(token int64, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if token < f.highest {
		return fmt.Errorf("stale token %d", token)
	}
	f.highest = token
	return nil
}

// A CachedMutex keeps its holding between critical sections while no one
// else wants the lock: the second Lock is granted in process, as the next
// section of the same holding. Its lease's Fence tells the two sections
// apart where the Token does not: a resource that keeps the highest Fence
// it has seen refuses a late request of the first section.
func ExampleCachedMutex() {
	ctx := context.Background()
	s, err := zkrecipes.Connect(ctx, servers())
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	m, err := zklock.NewCachedMutex(s, "/examples/cached")
	if err != nil {
		log.Fatal(err)
	}
	defer m.Release(ctx) // let the kept holding go before the Session ends
	var fences []zklock.Fence
	for range 2 {
		lease, err := m.Lock(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fences = append(fences, lease.Fence())
		if err := lease.Unlock(ctx); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("same holding:", fences[0].Holding == fences[1].Holding)
	fmt.Println("sections:", fences[0].Section, fences[1].Section)
	fmt.Println("ordered:", fences[0].Compare(fences[1]) < 0)
	// Output:
	// same holding: true
	// sections: 1 2
	// ordered: true
}

// Lease.Context is cancelled the moment the lease is lost: do the work
// under it.
func ExampleLease_Context() {
	ctx := context.Background()
	s, err := zkrecipes.Connect(ctx, servers())
	if err != nil {
		log.Fatal(err)
	}
	m, _ := zklock.NewMutex(s, "/examples/lease")
	lease, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	s.Close() // the session ends: every lease made on it is lost
	<-lease.Context().Done()
	fmt.Println(errors.Is(context.Cause(lease.Context()), zklock.ErrLockLost))
	fmt.Println(errors.Is(lease.Err(), zkrecipes.ErrClosed))
	// Output:
	// true
	// true
}

// Readers share the lock; a writer holds it alone.
func ExampleRWMutex() {
	ctx := context.Background()
	s, err := zkrecipes.Connect(ctx, servers())
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	rw, err := zklock.NewRWMutex(s, "/examples/rwmutex")
	if err != nil {
		log.Fatal(err)
	}
	r1, _ := rw.RLock(ctx)
	r2, _ := rw.RLock(ctx)
	_, err = rw.TryLock(ctx)
	fmt.Println("writer while two read:", errors.Is(err, zklock.ErrLocked))
	r1.Unlock(ctx)
	r2.Unlock(ctx)
	w, err := rw.TryLock(ctx)
	fmt.Println("writer alone:", err)
	w.Unlock(ctx)
	// Output:
	// writer while two read: true
	// writer alone: <nil>
}

// At most three jobs at once, across every process that shares the path.
func ExampleSemaphore() {
	ctx := context.Background()
	s, err := zkrecipes.Connect(ctx, servers())
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	sem, err := zklock.NewSemaphore(s, "/examples/semaphore", 3)
	if err != nil {
		log.Fatal(err)
	}
	var running, most atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			lease, err := sem.Acquire(ctx)
			if err != nil {
				log.Print(err)
				return
			}
			defer lease.Unlock(ctx)
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			running.Add(-1)
		})
	}
	wg.Wait()
	fmt.Println("never more than 3:", most.Load() <= 3)
	// Output: never more than 3: true
}

// Run campaigns, leads, and campaigns again when lead returns or the
// leadership is lost, until its context ends.
func ExampleElection_Run() {
	ctx, stop := context.WithCancel(context.Background())
	s, err := zkrecipes.Connect(ctx, servers())
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	el, err := zklock.NewElection(s, "/examples/election-run")
	if err != nil {
		log.Fatal(err)
	}
	terms := 0
	err = el.Run(ctx, []byte("worker-1"), func(lctx context.Context) error {
		terms++
		fmt.Println("leading, term", terms)
		if terms == 2 {
			stop() // shutting down: lctx ends with ctx
			<-lctx.Done()
		}
		return nil // step down for a while: Run campaigns again
	})
	fmt.Println(errors.Is(err, context.Canceled))
	// Output:
	// leading, term 1
	// leading, term 2
	// true
}

// Observe tells who leads, each change, and when no one does.
func ExampleElection_Observe() {
	ctx := context.Background()
	s, err := zkrecipes.Connect(ctx, servers())
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	el, err := zklock.NewElection(s, "/examples/election-observe")
	if err != nil {
		log.Fatal(err)
	}
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	leaders := el.Observe(octx)
	fmt.Printf("leader: %q\n", (<-leaders).Value)

	l, err := el.Campaign(ctx, []byte("a"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("leader: %q\n", (<-leaders).Value)
	l.Proclaim(ctx, []byte("a, v2"))
	fmt.Printf("leader: %q\n", (<-leaders).Value)
	l.Resign(ctx)
	fmt.Printf("leader: %q\n", (<-leaders).Path)
	// Output:
	// leader: ""
	// leader: "a"
	// leader: "a, v2"
	// leader: ""
}

// Campaign waits to lead; the Leadership's term (Token) grows with every
// leader, Proclaim changes what the others read of the leader without an
// election, and Resign hands over to the next candidate.
func ExampleElection_Campaign() {
	ctx := context.Background()
	s, err := zkrecipes.Connect(ctx, servers())
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	el, err := zklock.NewElection(s, "/examples/election-campaign")
	if err != nil {
		log.Fatal(err)
	}
	l, err := el.Campaign(ctx, []byte("10.0.0.1:8080")) // blocks until elected
	if err != nil {
		log.Fatal(err)
	}
	leader, _ := el.Leader(ctx)
	fmt.Printf("leader at %s, term %t\n", leader.Value, leader.Token == l.Token())

	if err := l.Proclaim(ctx, []byte("10.0.0.1:9090")); err != nil { // moved to another port
		log.Fatal(err)
	}
	leader, _ = el.Leader(ctx)
	fmt.Printf("leader at %s\n", leader.Value)

	if err := l.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	_, err = el.Leader(ctx)
	fmt.Println("after resigning, no leader:", errors.Is(err, zklock.ErrNoLeader))
	// Output:
	// leader at 10.0.0.1:8080, term true
	// leader at 10.0.0.1:9090
	// after resigning, no leader: true
}
