// Command consumer is a service that imports only zklock and fairqueue
// (and the Session they run on), as issue 19 pictures one. `make lean`
// builds it with the oldest Go the module supports and fails when its
// go.sum names Docker's, moby's or testcontainers' modules: the recipes
// must not bring them into a user's build. It is built, never run.
package main

import (
	"context"
	"log"
	"os"
	"os/signal"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
	"github.com/zkrecipes/zkrecipes/zklock"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	s, err := zkrecipes.Connect(ctx, []string{"localhost:2181"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	m, err := zklock.NewMutex(s, "/consumer/lock")
	if err != nil {
		log.Fatal(err)
	}
	q, err := fairqueue.New(s, "/consumer/jobs")
	if err != nil {
		log.Fatal(err)
	}
	lease, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(context.Background())
	if _, err := q.Put(ctx, []byte("hello")); err != nil {
		log.Fatal(err)
	}
}
