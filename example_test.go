package zkrecipes_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
)

// Hold a fair lock, do the work under the lease's context so it stops when
// the lease is lost, and release it.
func Example() {
	ctx := context.Background()
	s, err := zkrecipes.Connect(ctx, []string{"127.0.0.1:2181"}, zkrecipes.WithSessionTimeout(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	host, _ := os.Hostname()
	m, err := zklock.NewMutex(s, "/myapp/locks/report", zklock.WithData([]byte(host)))
	if err != nil {
		log.Fatal(err)
	}
	lease, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(context.Background())

	// Work under lease.Context(): it is cancelled, with the cause, the moment
	// the lease is lost, before anyone else can be granted the lock.
	if err := generateReport(lease.Context(), lease.Token()); err != nil {
		log.Print(err, context.Cause(lease.Context()))
	}
}

func generateReport(ctx context.Context, token int64) error { return nil }

// A fenced write to ZooKeeper itself: it commits only while the lease is
// held, whatever pause the holder went through.
func ExampleSession_Conn() {
	ctx := context.Background()
	s, err := zkrecipes.Connect(ctx, []string{"127.0.0.1:2181"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	m, _ := zklock.NewMutex(s, "/myapp/locks/config")
	lease, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)

	_, err = s.Conn().Multi(lease.Guard(),
		&zk.SetDataRequest{Path: "/myapp/config", Data: []byte("v2"), Version: -1})
	if err != nil {
		fmt.Println("not written: the lease is gone", err)
	}
}

// Wait at most a second; a lock held elsewhere is not an error to retry
// blindly.
func Example_tryLock() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s, err := zkrecipes.Connect(ctx, []string{"127.0.0.1:2181"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	m, _ := zklock.NewMutex(s, "/myapp/locks/cron")
	lease, err := m.TryLock(ctx)
	switch {
	case errors.Is(err, zklock.ErrLocked):
		fmt.Println("another instance runs the job")
		return
	case err != nil:
		log.Fatal(err)
	}
	defer lease.Unlock(context.Background())
	// run the job
}
