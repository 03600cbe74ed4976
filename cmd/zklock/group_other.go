//go:build !unix

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
)

// Without Unix process groups, zklock cannot make sure that CMD, and what
// CMD starts, never outlives what zklock holds: run, lead and queue take
// refuse to start CMD.

const guardEnv = "ZKLOCK_INTERNAL_GUARD"

func guardMain() int {
	fmt.Fprintf(os.Stderr, "zklock: %s is set in the environment: it is for zklock's own use; unset it\n", guardEnv)
	return exitUsage
}

type group struct {
	pgid   int
	events <-chan groupEvent
}

type groupEvent struct {
	exited   bool
	status   syscall.WaitStatus
	left     bool
	died     bool
	how      string
	deadline string
}

func startGroup(ch child, stdout, stderr io.Writer) (*group, error) {
	return nil, errors.New("running CMD needs Unix process groups, which this system lacks")
}

func (g *group) signal(os.Signal)                     {}
func (g *group) deadlines(lost, expiry time.Duration) {}
func (g *group) terminate()                           {}
func (g *group) kill()                                {}
func (g *group) killGroup() error                     { return nil }
func (g *group) close()                               {}

func forwardedSignals() []os.Signal { return []os.Signal{os.Interrupt, syscall.SIGTERM} }

func stopSignals() []os.Signal { return nil }

func signame(sig os.Signal) string { return sig.String() }
