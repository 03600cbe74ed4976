package fairqueue_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// TestMain gives the examples the tests' ZooKeeper, in ZK_CONNECT.
func TestMain(m *testing.M) { os.Exit(zktest.Main(m)) }

// servers is where the examples find ZooKeeper: ZK_CONNECT (a
// comma-separated list), else 127.0.0.1:2181.
func servers() []string {
	return strings.Split(cmp.Or(os.Getenv("ZK_CONNECT"), "127.0.0.1:2181"), ",")
}

// A worker takes jobs in order, acks what it finished and nacks what failed:
// a nacked job comes back at once, at its place in line (ahead of later
// jobs), until WithMaxAttempts sends it to the dead letters. Work that outlives the claim (Done closed) must
// not be acked: the job is already on its way to another consumer.
func Example() {
	ctx := context.Background()
	s, err := zkrecipes.Connect(ctx, servers())
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	q, err := fairqueue.New(s, "/examples/jobs/mail", fairqueue.WithMaxAttempts(2))
	if err != nil {
		log.Fatal(err)
	}
	for _, to := range []string{"ann@example.com", "bob@example", "cy@example.com"} {
		if _, err := q.Put(ctx, []byte(to)); errors.Is(err, fairqueue.ErrOutcomeUnknown) {
			log.Print("the job may or may not be queued: decide whether to put it again")
		}
	}

	for {
		j, err := q.TryTake(ctx) // Take waits for work; TryTake says when there is none
		if errors.Is(err, fairqueue.ErrEmpty) {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		select {
		case <-j.Done():
			continue // claim lost: someone else gets the job
		default:
		}
		if err := send(string(j.Data())); err != nil {
			fmt.Printf("attempt %d: %v\n", j.Attempt(), err)
			_ = j.Nack(ctx)
			continue
		}
		fmt.Println("sent to", string(j.Data()))
		_ = j.Ack(ctx)
	}
	dead, _ := q.DeadLetters(ctx)
	for _, d := range dead {
		fmt.Printf("dead letter: %s after %d attempts\n", d.Data, d.Attempts)
		_, _ = q.Requeue(ctx, d.ID) // after fixing the address, say; here it fails again
	}
	for j, err := q.TryTake(ctx); err == nil; j, err = q.TryTake(ctx) {
		_ = j.Ack(ctx) // drop them, for the example's sake
	}
	// Output:
	// sent to ann@example.com
	// attempt 1: no such domain: example
	// attempt 2: no such domain: example
	// sent to cy@example.com
	// dead letter: bob@example after 2 attempts
}

func send(to string) error {
	if !strings.Contains(to[strings.Index(to, "@"):], ".") {
		return fmt.Errorf("no such domain: %s", to[strings.Index(to, "@")+1:])
	}
	return nil
}

// Work runs a handler on each job, several at once: nil acks the job, an
// error gives it back, to be delivered again after a back-off. Here a
// resize fails once for one picture, and succeeds on its second delivery.
func ExampleQueue_Work() {
	ctx := context.Background()
	s, err := zkrecipes.Connect(ctx, servers())
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	q, err := fairqueue.New(s, "/examples/jobs/resize")
	if err != nil {
		log.Fatal(err)
	}
	pictures := [][]byte{[]byte("cat.png"), []byte("dog.png"), []byte("owl.png")}
	if _, err := q.PutMany(ctx, pictures); err != nil {
		log.Fatal(err)
	}

	wctx, stop := context.WithCancel(ctx)
	var mu sync.Mutex
	var done []string
	err = q.Work(wctx, func(ctx context.Context, j *fairqueue.Job) error {
		if string(j.Data()) == "dog.png" && j.Attempt() == 1 {
			return errors.New("out of memory") // given back, for another try
		}
		mu.Lock()
		defer mu.Unlock()
		done = append(done, fmt.Sprintf("%s (attempt %d)", j.Data(), j.Attempt()))
		if len(done) == len(pictures) {
			stop() // Work returns once the handlers have
		}
		return nil
	}, fairqueue.WithHandlers(2), fairqueue.WithBackoff(10*time.Millisecond, time.Second))
	fmt.Println("work:", err)
	slices.Sort(done)
	for _, d := range done {
		fmt.Println("resized", d)
	}
	// Output:
	// work: context canceled
	// resized cat.png (attempt 1)
	// resized dog.png (attempt 2)
	// resized owl.png (attempt 1)
}
