// Command mutex runs a nightly report on one machine at a time: a fair
// distributed mutex, with the lease's fencing token handed to the resource.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"

	"github.com/zkrecipes/zkrecipes"
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
	m, err := zklock.NewMutex(s, "/myapp/locks/nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	lease, err := m.Lock(ctx) // waits its turn: first come, first served
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(context.Background()) // sent whatever becomes of ctx
	// lease.Context() ends the moment the lock is lost, before anyone else can
	// be granted it; the token grows with every holder, so the resource can
	// refuse a holder that paused past its lease.
	fmt.Println("holding the lock, token", lease.Token())
	writeReport(lease.Context(), lease.Token())
}

func writeReport(ctx context.Context, token int64) {}
