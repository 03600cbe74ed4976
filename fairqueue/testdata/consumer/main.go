// Command consumer takes one job from a queue, prints its id and blocks
// until killed: the child of the SIGKILL test. Environment: FQ_ADDRS,
// FQ_PATH.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
)

func main() {
	ctx := context.Background()
	s, err := zkrecipes.Connect(ctx, strings.Split(os.Getenv("FQ_ADDRS"), ","), zkrecipes.WithSessionTimeout(2*time.Second))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	q, err := fairqueue.New(s, os.Getenv("FQ_PATH"))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	j, err := q.Take(ctx)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("took", j.ID(), j.Attempt())
	select {}
}
