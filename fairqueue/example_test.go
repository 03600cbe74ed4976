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

	"github.com/go-zookeeper/zk"

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
// jobs), until WithMaxAttempts sends it to the dead letters. A job whose
// delivery was lost (Done closed) must not be acked: it is already on its
// way to another consumer.
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
			continue // delivery lost: someone else gets the job
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

// Take waits for the oldest item, handed to it by the queue's dispatcher:
// the Job is this consumer's until Ack (done for good) or Nack (back at its
// place in line). If the consumer dies, the delivery ends with its session
// and the item is delivered again, Attempt one higher.
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
		log.Print(err) // the delivery was lost: another consumer has the item
	}
	// Output:
	// weekly report, delivery 1
	// weekly report, delivery 2
}

// Guard fences a job's writes to ZooKeeper: first in a multi, it lets the
// multi commit only until the item is acked or delivered again. Here
// consumer A takes a job and its session ends (as when A pauses past its
// session timeout: a GC pause, a frozen VM); the job is delivered again, to
// B. When A wakes up, with a new session, its late write is refused. For a
// resource outside ZooKeeper, keep the highest Job.Token seen for the item
// and refuse lower ones.
func ExampleJob_Guard() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const path, report = "/examples/jobs/monthly", "/examples/report-march"
	connect := func() (*zkrecipes.Session, *fairqueue.Queue) {
		s, err := zkrecipes.Connect(ctx, servers())
		if err != nil {
			log.Fatal(err)
		}
		q, err := fairqueue.New(s, path)
		if err != nil {
			log.Fatal(err)
		}
		return s, q
	}
	// write writes the report while j's delivery holds.
	write := func(s *zkrecipes.Session, j *fairqueue.Job, text string) error {
		_, err := s.Conn().Multi(j.Guard(),
			&zk.CreateRequest{Path: report, Data: []byte(text), Acl: zk.WorldACL(zk.PermAll)})
		return err
	}

	sa, a := connect()
	if _, err := a.Put(ctx, []byte("march")); err != nil {
		log.Fatal(err)
	}
	ja, err := a.Take(ctx)
	if err != nil {
		log.Fatal(err)
	}
	sa.Close() // A's session ends: its delivery is lost

	sb, b := connect()
	defer sb.Close()
	defer b.Close(ctx)
	jb, err := b.Take(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("B took %s, delivery %d\n", jb.Data(), jb.Attempt())

	late, _ := connect() // A wakes up, with a new session
	defer late.Close()
	if err := write(late, ja, "total: 41"); errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode) {
		fmt.Println("A's late write refused: the job was delivered again")
	}
	if err := write(sb, jb, "total: 42"); err != nil {
		log.Fatal(err)
	}
	if err := jb.Ack(ctx); err != nil {
		log.Print(err)
	}
	data, _, err := sb.Conn().Get(report)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("the report: %s\n", data)
	_ = sb.Conn().Delete(report, -1) // for the example's sake
	// Output:
	// B took march, delivery 2
	// A's late write refused: the job was delivered again
	// the report: total: 42
}

// Close ends a consumer's part in the queue, before a planned stop. A Queue
// that takes stands as the queue's dispatcher and has an inbox and tickets
// in the queue: Close resigns, so that another taking Queue dispatches at
// once (a process that just exits holds hand-out up until its session
// expires), and removes them. Jobs taken before stay valid until settled
// (the last one settled removes the inbox), and the Queue can still put.
func ExampleQueue_Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := zkrecipes.Connect(ctx, servers())
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	const path = "/examples/jobs/backups"
	q, err := fairqueue.New(s, path)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := q.Put(ctx, []byte("backup db1")); err != nil {
		log.Fatal(err)
	}
	j, err := q.Take(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("took", string(j.Data()))
	if err := j.Ack(ctx); err != nil {
		log.Print(err)
	}

	if err := q.Close(ctx); err != nil {
		log.Print(err)
	}
	_, err = q.Take(ctx)
	fmt.Println("take after close:", errors.Is(err, fairqueue.ErrClosed))
	// Nothing of this consumer is left: no inbox, no ticket, no election node.
	for _, dir := range []string{"consumers", "ready", "dispatch"} {
		names, _, err := s.Conn().Children(path + "/" + dir)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			log.Fatal(err)
		}
		fmt.Printf("%s/: %d nodes\n", dir, len(names))
	}
	// Output:
	// took backup db1
	// take after close: true
	// consumers/: 0 nodes
	// ready/: 0 nodes
	// dispatch/: 0 nodes
}
