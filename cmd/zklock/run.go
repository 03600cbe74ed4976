package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
)

// errLockTimeout ends the wait for the lock when -timeout passes.
var errLockTimeout = errors.New("timed out waiting for the lock")

// releaseTimeout bounds the release of the lock after CMD exits. If it
// passes, closing the session removes the node anyway.
const releaseTimeout = 10 * time.Second

// run is `zklock run`: hold the lock at PATH while CMD runs.
func (c *cli) run(args []string) (int, error) {
	fs := c.flagSet("run")
	timeout := fs.Duration("timeout", 0, "give up (exit 73) if the lock is not acquired within `D`; 0 waits forever")
	data := fs.String("data", "", "`text` stored in the lock node, shown by holders (default: host, pid and CMD)")
	grace := fs.Duration("grace", 5*time.Second, "if the lock is lost, wait `D` between SIGTERM and SIGKILL to CMD")
	if err := c.parse(fs, args, "run [-timeout D] [-data S] [-grace D] PATH -- CMD [ARGS...]"); err != nil {
		return exitUsage, err
	}
	path, argv, err := runArgs(fs.Args())
	switch {
	case err != nil:
		return exitUsage, err
	case *timeout < 0:
		return exitUsage, usagef("run: -timeout must not be negative")
	case *grace < 0:
		return exitUsage, usagef("run: -grace must not be negative")
	}
	if *data == "" {
		host, _ := os.Hostname()
		*data = fmt.Sprintf("%s pid %d: %s", host, os.Getpid(), strings.Join(argv, " "))
	}

	// From here on, SIGINT and SIGTERM are ours to handle: they cancel the
	// wait for the lock, or are forwarded to CMD.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	s, lease, code, err := c.acquire(path, *data, *timeout, sigs)
	if err != nil {
		return code, err
	}
	defer s.Close() // if the release fails, this removes the node
	code, lost := c.runLocked(path, lease, argv, *grace, sigs)

	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	switch err := lease.Unlock(ctx); {
	case lost:
		return exitLost, nil // reported when it happened
	case err != nil:
		c.log.Warn("could not confirm the release; closing the session removes the node", "path", path, "err", err)
	default:
		c.log.Info("lock released", "path", path)
	}
	return code, nil
}

// runArgs splits "PATH -- CMD [ARGS...]".
func runArgs(args []string) (path string, argv []string, err error) {
	if len(args) == 0 {
		return "", nil, usagef("run: missing PATH")
	}
	path = args[0]
	if err := checkPath(path); err != nil {
		return "", nil, usagef("run: %v", err)
	}
	switch {
	case len(args) == 1:
		return "", nil, usagef("run: missing -- and CMD after PATH")
	case args[1] != "--" && strings.HasPrefix(args[1], "-"):
		return "", nil, usagef("run: unexpected %q after PATH: flags go before PATH", args[1])
	case args[1] != "--":
		return "", nil, usagef("run: missing -- between PATH and CMD")
	case len(args) == 2:
		return "", nil, usagef("run: missing CMD after --")
	}
	return path, args[2:], nil
}

// acquire connects and waits for the lock, until timeout (if not 0) or a
// signal. It returns the session and lease, or the exit status and error.
func (c *cli) acquire(path, data string, timeout time.Duration, sigs <-chan os.Signal) (*zkrecipes.Session, *zklock.Lease, int, error) {
	type result struct {
		s     *zkrecipes.Session
		lease *zklock.Lease
		err   error
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	begin := time.Now()
	go func() {
		var r result
		r.s, r.lease, r.err = c.lock(ctx, path, data, timeout)
		done <- r
	}()

	var r result
	select {
	case r = <-done:
	case sig := <-sigs:
		cancel()
		if r = <-done; r.s != nil {
			r.s.Close() // releases the lease too, if Lock won the race
		}
		return nil, nil, 128 + signum(sig), fmt.Errorf("gave up waiting for %s: got %s", path, signame(sig))
	}
	switch {
	case errors.Is(r.err, errLockTimeout):
		return nil, nil, exitTimeout, fmt.Errorf("lock %s not acquired within %v", path, timeout)
	case r.err != nil:
		return nil, nil, exitFailure, r.err
	}
	c.log.Info("lock acquired", "path", path, "token", r.lease.Token(), "waited", time.Since(begin).Round(time.Millisecond))
	return r.s, r.lease, exitOK, nil
}

// lock connects and takes the lock. On error it closes the session.
func (c *cli) lock(ctx context.Context, path, data string, timeout time.Duration) (*zkrecipes.Session, *zklock.Lease, error) {
	s, err := c.connect(ctx, c.log)
	if err != nil {
		return nil, nil, err
	}
	m, err := zklock.NewMutex(s, path, zklock.WithData([]byte(data)))
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, timeout, errLockTimeout)
		defer cancel()
	}
	lease, err := m.Lock(ctx)
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	return s, lease, nil
}

// runLocked runs CMD while the lease is held. It returns CMD's exit status,
// and whether the lease was lost before CMD exited.
func (c *cli) runLocked(path string, lease *zklock.Lease, argv []string, grace time.Duration, sigs <-chan os.Signal) (int, bool) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, c.stdout, c.stderr
	cmd.Env = append(os.Environ(), "ZKLOCK_TOKEN="+strconv.FormatInt(lease.Token(), 10))
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(c.stderr, "zklock: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitNotFound, false
		}
		return exitNoExec, false
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // the status is in cmd.ProcessState
		close(exited)
	}()

	leaseDone := lease.Done()
	var kill <-chan time.Time
	for {
		select {
		case <-exited:
			if err := lease.Err(); err != nil {
				if leaseDone != nil { // lost just as CMD exited
					fmt.Fprintf(c.stderr, "zklock: lost the lock on %s: %v\n", path, err)
				}
				return exitLost, true
			}
			return exitStatus(cmd.ProcessState), false
		case sig := <-sigs:
			c.log.Info("forwarding signal", "signal", sig, "pid", cmd.Process.Pid)
			_ = cmd.Process.Signal(sig)
		case <-leaseDone:
			leaseDone = nil
			fmt.Fprintf(c.stderr, "zklock: lost the lock on %s while %s ran: %v; sending SIGTERM to pid %d\n",
				path, argv[0], lease.Err(), cmd.Process.Pid)
			_ = cmd.Process.Signal(syscall.SIGTERM)
			kill = time.After(grace)
		case <-kill:
			kill = nil
			fmt.Fprintf(c.stderr, "zklock: %s still running %v after SIGTERM; sending SIGKILL to pid %d\n",
				argv[0], grace, cmd.Process.Pid)
			_ = cmd.Process.Kill()
		}
	}
}

// exitStatus is the shell's view of how a process ended: its exit code, or
// 128+N if it died of signal N.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func signame(sig os.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}

func signum(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return int(s)
	}
	return 1
}
