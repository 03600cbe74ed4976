// Command consumer takes one job from a queue, prints its id and blocks
// until killed: the child of the SIGKILL tests. Environment: FQ_ADDRS,
// FQ_PATH, FQ_TIMEOUT, the session timeout (default 2s), and FQ_WAIT: when
// set, it prints "waiting" as it starts to take.
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
	timeout, err := time.ParseDuration(os.Getenv("FQ_TIMEOUT"))
	if err != nil {
		timeout = 2 * time.Second
	}
	s, err := zkrecipes.Connect(ctx, strings.Split(os.Getenv("FQ_ADDRS"), ","), zkrecipes.WithSessionTimeout(timeout))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	q, err := fairqueue.New(s, os.Getenv("FQ_PATH"))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	if os.Getenv("FQ_WAIT") != "" {
		fmt.Println("waiting") // and stands in line, for an item that does not come
	}
	j, err := q.Take(ctx)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("took", j.ID(), j.Attempt())
	select {}
}
