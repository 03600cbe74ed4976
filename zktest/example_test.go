package zktest_test

import (
	"context"
	"testing"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// writeReport is the code under test, in the user's package: it writes a
// report under a lock.
func writeReport(ctx context.Context, s *zkrecipes.Session, lockPath string) error {
	m, err := zklock.NewMutex(s, lockPath)
	if err != nil {
		return err
	}
	lease, err := m.Lock(ctx)
	if err != nil {
		return err
	}
	defer lease.Unlock(context.Background())
	return nil // write the report, with lease.Token() as its fencing token
}

// testWriteReport is the user's test, TestWriteReport in their package: a
// real ZooKeeper (the package's shared one), a Session closed when the test
// ends, a path no other test uses, and a check that nothing was left
// running or held. (zktest's own tests run it, as TestExampleUserTest.)
func testWriteReport(t *testing.T) {
	srv := zktest.Start(t)    // ZK_CONNECT, else a local installation; with neither, the test is skipped and says so
	zktest.CheckGoroutines(t) // once the test and its clean-ups are done
	s := zktest.Connect(t, srv.Addrs())
	path := zktest.Path(t, "/mypkg-test")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if err := writeReport(ctx, s, path); err != nil {
		t.Fatal(err)
	}
	m, err := zklock.NewMutex(s, path)
	if err != nil {
		t.Fatal(err)
	}
	if cs, err := m.Contenders(ctx); err != nil || len(cs) != 0 {
		t.Errorf("the lock is still held or waited for: %+v, %v", cs, err)
	}
}

// A package tests its own code against a real ZooKeeper: this file shows
// such a test. Its TestMain gives the package's examples the same server,
// in ZK_CONNECT:
//
//	func TestMain(m *testing.M) { os.Exit(zktest.Main(m)) }
//
//	func TestWriteReport(t *testing.T) { ... as testWriteReport above ... }
func Example_userTest() {}
