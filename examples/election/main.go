// Command election serves as the primary while it leads, and campaigns again
// when it loses the leadership, until interrupted.
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
	el, err := zklock.NewElection(s, "/myapp/leader")
	if err != nil {
		log.Fatal(err)
	}
	host, _ := os.Hostname()
	err = el.Run(ctx, []byte(host), func(lead context.Context) error {
		fmt.Println("leading") // lead ends the moment leadership is lost
		<-lead.Done()          // serve as the primary until then
		return nil
	})
	fmt.Println("stopped:", err)
}
