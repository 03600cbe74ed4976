// Command electholder is a child process for the election tests: it connects
// to the ZooKeeper servers named by its first argument (comma-separated)
// with a 2s session timeout, campaigns in the election at its second
// argument, prints "leader <term>" and leads until killed.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: electholder HOST:PORT[,HOST:PORT...] PATH")
		os.Exit(2)
	}
	ctx := context.Background()
	s, err := zkrecipes.Connect(ctx, strings.Split(os.Args[1], ","), zkrecipes.WithSessionTimeout(2*time.Second))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	el, err := zklock.NewElection(s, os.Args[2])
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	l, err := el.Campaign(ctx, []byte(fmt.Sprint("pid ", os.Getpid())))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("leader", l.Token())
	select {}
}
