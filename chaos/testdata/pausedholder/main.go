// Command pausedholder is a child process for TestUnlockAfterLossReportsLoss:
// it connects to the servers named by its first argument with a 2s session
// timeout, locks the Mutex at its second argument and prints "locked
// TOKEN"; then, for each line "unlock" on its standard input, it unlocks at
// once and prints "unlock ERR" (ERR: "nil" or the error) and "err ERR" (the
// lease's Err afterwards), and exits.
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
)

func main() {
	ctx := context.Background()
	s, err := zkrecipes.Connect(ctx, strings.Split(os.Args[1], ","), zkrecipes.WithSessionTimeout(2*time.Second))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	m, err := zklock.NewMutex(s, os.Args[2])
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	l, err := m.Lock(ctx)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("locked", l.Token())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() != "unlock" {
			continue
		}
		uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := l.Unlock(uctx)
		cancel()
		fmt.Printf("unlock %v\n", orNil(err))
		fmt.Printf("err %v\n", orNil(l.Err()))
		return
	}
}

func orNil(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
