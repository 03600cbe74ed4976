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

// Put adds one item and returns its id. With WithKey a Put is safe to
// retry: a producer whose Put ended with ErrOutcomeUnknown puts again with
// the same key, and the queue holds the item once.
func ExampleQueue_Put() {
	ctx := context.Background()
	s, err := zkrecipes.Connect(ctx, servers())
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	q, err := fairqueue.New(s, "/examples/jobs/invoices")
	if err != nil {
		log.Fatal(err)
	}
	order := "order-1042"
	id, err := q.Put(ctx, []byte("invoice for "+order), fairqueue.WithKey(order))
	for errors.Is(err, fairqueue.ErrOutcomeUnknown) { // the item may or may not be in
		id, err = q.Put(ctx, []byte("invoice for "+order), fairqueue.WithKey(order))
	}
	if err != nil {
		log.Fatal(err)
	}
	again, _ := q.Put(ctx, []byte("invoice for "+order), fairqueue.WithKey(order)) // a retry of a Put that did land
	n, _ := q.Len(ctx)
	fmt.Println("same item:", again == id, "pending:", n)

	j, _ := q.Take(ctx)
	_ = j.Ack(ctx)
	// Output: same item: true pending: 1
}

// PutMany adds a batch in one round trip, all or nothing, in order.
func ExampleQueue_PutMany() {
	ctx := context.Background()
	s, err := zkrecipes.Connect(ctx, servers())
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	q, err := fairqueue.New(s, "/examples/jobs/thumbnails")
	if err != nil {
		log.Fatal(err)
	}
	ids, err := q.PutMany(ctx, [][]byte{[]byte("a.png"), []byte("b.png"), []byte("c.png")})
	if err != nil {
		log.Fatal(err) // none of them was put (or, ErrOutcomeUnknown: all or none)
	}
	fmt.Println(len(ids), "ids, in queue order:", slices.IsSorted(ids))
	for range ids {
		j, _ := q.Take(ctx)
		fmt.Println("took", string(j.Data()))
		_ = j.Ack(ctx)
	}
	// Output:
	// 3 ids, in queue order: true
	// took a.png
	// took b.png
	// took c.png
}

// Take waits for the oldest item and claims it: the Job is this
// consumer's until Ack (done for good) or Nack (back at its place in line).
// If the consumer dies, its claim ends with its session and the item is
// delivered again, Attempt one higher.
func ExampleQueue_Take() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := zkrecipes.Connect(ctx, servers())
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	q, err := fairqueue.New(s, "/examples/jobs/reports")
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond) // a producer elsewhere, a little later
		_, _ = q.Put(ctx, []byte("weekly report"))
	}()

	j, err := q.Take(ctx) // waits until an item comes, or ctx ends
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s, delivery %d\n", j.Data(), j.Attempt())
	_ = j.Nack(ctx) // not now: back at its place, first in line

	j, _ = q.Take(ctx)
	fmt.Printf("%s, delivery %d\n", j.Data(), j.Attempt())
	if err := j.Ack(ctx); err != nil {
		log.Print(err) // the claim was lost: another consumer has the item
	}
	// Output:
	// weekly report, delivery 1
	// weekly report, delivery 2
}
