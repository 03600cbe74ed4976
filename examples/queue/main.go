// Command queue puts three jobs in an ordered, at-least-once queue and works
// on them, four at a time, until interrupted.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	s, err := zkrecipes.Connect(ctx, []string{"localhost:2181"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	q, err := fairqueue.New(s, "/myapp/jobs", fairqueue.WithMaxAttempts(5))
	if err != nil {
		log.Fatal(err)
	}
	// A Queue that takes may be the queue's dispatcher: closed, it hands
	// over at once, not when its session expires.
	defer q.Close(context.Background())
	jobs := [][]byte{[]byte("resize cat.png"), []byte("resize dog.png"), []byte("resize owl.png")}
	if _, err := q.PutMany(ctx, jobs); err != nil { // all or nothing
		log.Fatal(err)
	}
	err = q.Work(ctx, func(ctx context.Context, j *fairqueue.Job) error {
		fmt.Printf("%s (delivery %d)\n", j.Data(), j.Attempt())
		return nil // acked; an error gives the job back, with a back-off
	}, fairqueue.WithHandlers(4))
	fmt.Println("stopped:", err)
}
