//go:build unix

package main

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// forwardedSignals are the signals that zklock passes on to CMD's process
// group: those a user sends to stop or poke a command. While zklock waits
// for the lock, they stop the wait.
func forwardedSignals() []os.Signal {
	return []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGTERM}
}

// stopSignals are the signals that would stop zklock while CMD runs on.
func stopSignals() []os.Signal { return []os.Signal{syscall.SIGTSTP} }

// signame is the signal's name, as "SIGINT".
func signame(sig os.Signal) string {
	if s, ok := sig.(syscall.Signal); ok {
		if name := unix.SignalName(s); name != "" {
			return name
		}
	}
	return sig.String()
}
