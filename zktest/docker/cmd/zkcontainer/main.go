// Command zkcontainer runs a command with ZK_CONNECT set to a ZooKeeper in
// a Docker container, and removes the container when it is done:
//
//	zkcontainer go test ./zklock/
//
// The container is the one the docker package of zktest starts for a test
// binary (the zookeeper:3.8 image, configured like zktest's local server),
// removed by its watchdog when zkcontainer exits, however it exits. So
// tests whose TestMain calls zktest.Main, and that cannot import that
// package, run against a container all the same: zktest.Start takes
// ZK_CONNECT first. zkcontainer fails when no Docker engine answers, and
// exits with the command's exit status.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"github.com/zkrecipes/zkrecipes/zktest/docker"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(os.Stderr, "usage: zkcontainer command [argument...]")
		return 2
	}
	addrs, from, err := docker.Source()
	if err != nil {
		fmt.Fprintf(os.Stderr, "zkcontainer: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "zkcontainer: ZK_CONNECT=%s (%s)\n", strings.Join(addrs, ","), from)

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "ZK_CONNECT="+strings.Join(addrs, ","))
	// A ^C reaches the command too (one process group): let it decide,
	// and remove the container when it has exited. A SIGTERM or SIGHUP
	// meant for zkcontainer alone is passed on, for the same reason.
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "zkcontainer: %v\n", err)
		return 1
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	signal.Stop(sigs)
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return exit.ExitCode()
	case err != nil:
		fmt.Fprintf(os.Stderr, "zkcontainer: %v\n", err)
		return 1
	}
	return 0
}
