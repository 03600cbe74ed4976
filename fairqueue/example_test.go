package fairqueue_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"testing"

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
