package fairqueue_test

import (
	"context"
	"errors"
	"log"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
)

// A worker takes jobs in order, acks what it finished and nacks what failed.
// Work that outlives the claim (Done closed) must not be acked: the job is
// already on its way to another consumer.
func Example() {
	ctx := context.Background()
	s, err := zkrecipes.Connect(ctx, []string{"127.0.0.1:2181"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	q, err := fairqueue.New(s, "/jobs/mail", fairqueue.WithMaxAttempts(5))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := q.Put(ctx, []byte(`{"to":"ann@example.com"}`)); errors.Is(err, fairqueue.ErrOutcomeUnknown) {
		log.Print("the job may or may not be queued: decide whether to put it again")
	}
	for {
		j, err := q.Take(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if err := send(j.Data()); err != nil {
			log.Printf("job %s, attempt %d: %v", j.ID(), j.Attempt(), err)
			_ = j.Nack(ctx)
			continue
		}
		_ = j.Ack(ctx)
	}
}

func send([]byte) error { return nil }
