// Command semholder is a child process for tests that kill a semaphore
// holder with SIGKILL. It acquires one permit and holds it until killed:
//
//	semholder <host:port[,host:port...]> <path> <permits>
//
// Once it holds the permit it prints "token <n>". Its session timeout is 2s,
// so its permit is freed soon after it dies without a goodbye.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: semholder <servers> <path> <permits>")
		os.Exit(2)
	}
	permits, err := strconv.Atoi(os.Args[3])
	if err != nil {
		fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := zkrecipes.Connect(ctx, strings.Split(os.Args[1], ","), zkrecipes.WithSessionTimeout(2*time.Second))
	if err != nil {
		fail(err)
	}
	sem, err := zklock.NewSemaphore(s, os.Args[2], permits, zklock.WithData([]byte(fmt.Sprint("semholder pid ", os.Getpid()))))
	if err != nil {
		fail(err)
	}
	l, err := sem.Acquire(ctx)
	if err != nil {
		fail(err)
	}
	fmt.Println("token", l.Token())
	<-l.Done() // until killed, unless the lease is lost first
	fail(l.Err())
}

func fail(err error) {
	fmt.Println("error", err)
	os.Exit(1)
}
