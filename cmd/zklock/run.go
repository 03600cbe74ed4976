package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
)

// errTimeout ends the wait for the lock or leadership when -timeout passes.
var errTimeout = errors.New("-timeout passed")

// releaseTimeout bounds the release of the lock (or the resignation) after
// CMD exits. If it passes, closing the session removes the node anyway.
const releaseTimeout = 10 * time.Second

// run is `zklock run`: hold the lock at PATH while CMD runs; with -n N, one
// of N permits of the semaphore at PATH.
func (c *cli) run(args []string) (int, error) {
	fs := c.flagSet("run")
	data := fs.String("data", "", "`text` stored in the lock node, shown by holders to anyone who may read PATH (default: host and pid; never CMD, which may carry a secret)")
	permits := fs.Int("n", 0, "hold one of `N` permits of a semaphore at PATH instead of the lock: at most N CMDs run at once (as consul lock -n)")
	h, err := c.parseHeld(fs, args, "run", "run [-n N] [-timeout D] [-data S] [-grace D] PATH [-- CMD [ARGS...]]",
		"the lock", "give up (exit 73) if the lock is not acquired within `D`; 0 waits forever")
	if err != nil {
		return exitUsage, err
	}
	if *permits < 0 {
		return exitUsage, usagef("run: -n must be at least 1 (or 0 for the lock), not %d", *permits)
	}
	if *data == "" {
		*data = defaultData()
	}
	h.what = "the lock on " + h.path
	h.use = lineUse("run", kindLock, true)
	acquire := func(s *zkrecipes.Session) (func(context.Context) (*zklock.Lease, error), error) {
		m, err := zklock.NewMutex(s, h.path, zklock.WithData([]byte(*data)))
		if err != nil {
			return nil, err
		}
		return m.Lock, nil
	}
	if *permits > 0 {
		h.what = fmt.Sprintf("a permit of %d on %s", *permits, h.path)
		h.use = lineUse("run -n", kindSemaphore, true)
		acquire = func(s *zkrecipes.Session) (func(context.Context) (*zklock.Lease, error), error) {
			sm, err := zklock.NewSemaphore(s, h.path, *permits, zklock.WithData([]byte(*data)))
			if err != nil {
				return nil, err
			}
			return sm.Acquire, nil
		}
	}
	h.take = func(ctx context.Context, s *zkrecipes.Session) (*zklock.Lease, func(context.Context) error, error) {
		lock, err := acquire(s)
		if err != nil {
			return nil, nil, err
		}
		lease, err := lock(ctx)
		if err != nil {
			return nil, nil, err
		}
		return lease, lease.Unlock, nil
	}
	return c.hold(h)
}

// held is what run and lead hold while CMD runs: a lock, or leadership.
type held struct {
	path    string
	what    string // "the lock on PATH", "leadership of PATH": for messages
	argv    []string
	timeout time.Duration // 0: wait forever
	grace   time.Duration // between SIGTERM and SIGKILL to CMD's group
	use     use           // what PATH may hold

	// take waits, on the session s, until it holds; ctx ends the wait. It
	// returns the lease and what gives it up.
	take func(ctx context.Context, s *zkrecipes.Session) (*zklock.Lease, func(context.Context) error, error)
}

// parseHeld parses the flags of run or lead (name), with -timeout and -grace
// added to the flags fs already has, and splits "PATH -- CMD [ARGS...]".
// noun is what is held, for -grace's usage.
func (c *cli) parseHeld(fs *flag.FlagSet, args []string, name, synopsis, noun, timeoutUsage string) (held, error) {
	timeout := fs.Duration("timeout", 0, timeoutUsage)
	grace := fs.Duration("grace", 5*time.Second, "wait `D` between SIGTERM and SIGKILL to CMD's process group when "+noun+
		" is lost (but never past the moment ZooKeeper could expire the session), or when CMD exits leaving processes in its group")
	if err := c.parse(fs, args, synopsis); err != nil {
		return held{}, err
	}
	path, argv, err := cmdArgs(name, fs.Args(), true)
	switch {
	case err != nil:
		return held{}, err
	case *timeout < 0:
		return held{}, usagef("%s: -timeout must not be negative", name)
	case *grace < 0:
		return held{}, usagef("%s: -grace must not be negative", name)
	}
	return held{path: path, argv: argv, timeout: *timeout, grace: *grace}, nil
}

// defaultData is what run and lead store in their node unless told: host
// and pid. Never CMD: the node is as readable as the lock's path, by anyone
// without -auth, and a command line may carry a secret.
func defaultData() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s pid %d", host, os.Getpid())
}

// cmdArgs splits "PATH -- CMD [ARGS...]" for the command name; with
// optional, "PATH" alone is accepted too (argv nil).
func cmdArgs(name string, args []string, optional bool) (path string, argv []string, err error) {
	if len(args) == 0 {
		return "", nil, usagef("%s: missing PATH", name)
	}
	path = args[0]
	if err := checkPath(path); err != nil {
		return "", nil, usagef("%s: %v", name, err)
	}
	switch {
	case len(args) == 1 && optional:
		return path, nil, nil
	case len(args) == 1:
		return "", nil, usagef("%s: missing -- and CMD after PATH", name)
	case args[1] != "--" && strings.HasPrefix(args[1], "-"):
		return "", nil, usagef("%s: unexpected %q after PATH: flags go before PATH", name, args[1])
	case args[1] != "--":
		return "", nil, usagef("%s: missing -- between PATH and CMD", name)
	case len(args) == 2:
		return "", nil, usagef("%s: missing CMD after --", name)
	}
	return path, args[2:], nil
}

// hold waits until it holds h, runs CMD while it does, then lets go. It
// returns zklock's exit status.
func (c *cli) hold(h held) (int, error) {
	// From here on, the signals a user sends (SIGINT, SIGTERM, SIGHUP, ...)
	// are ours to handle: they cancel the wait, or are forwarded to CMD.
	sigs := make(chan os.Signal, 4)
	notifyUnlessIgnored(sigs, forwardedSignals()...)
	defer signal.Stop(sigs)

	s, lease, release, code, err := c.acquire(h, sigs)
	if err != nil {
		return code, err
	}
	defer s.Close() // if the release fails, this removes the node
	if len(h.argv) == 0 {
		return c.holdAlone(h, s, lease, release, sigs)
	}
	out := c.supervise(child{
		argv:  h.argv,
		env:   holdEnv(h.path, s, lease),
		stdin: os.Stdin,
		what:  h.what,
		grace: h.grace,
		lost:  lease.Done(),
		err:   lease.Err,

		session: s,
	}, sigs)
	code, lost := out.code, out.lost

	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	switch err := release(ctx); {
	case lost:
		return exitLost, nil // reported when it happened
	case err != nil:
		c.log.Warn("could not confirm the release; closing the session removes the node", "path", h.path, "err", err)
	default:
		c.log.Info("released", "what", h.what)
	}
	return code, nil
}

// holdEnv is what CMD learns of the hold from its environment (as
// etcdctl's ETCD_LOCK_KEY, consul's CONSUL_LOCK_HELD): the lock's (or the
// election's) path, the node that holds it, its fencing token (the term)
// and the session's id.
func holdEnv(path string, s *zkrecipes.Session, lease *zklock.Lease) []string {
	return []string{
		"ZKLOCK_PATH=" + path,
		"ZKLOCK_NODE=" + lease.Path(),
		"ZKLOCK_TOKEN=" + strconv.FormatInt(lease.Token(), 10),
		"ZKLOCK_SESSION=" + sessionID(s.ID()),
	}
}

// holdAlone is run or lead with no CMD: it prints the node that holds and
// its token, then holds until a signal (status 0, once released) or the
// loss of the hold (75), as etcdctl lock does.
func (c *cli) holdAlone(h held, s *zkrecipes.Session, lease *zklock.Lease, release func(context.Context) error, sigs <-chan os.Signal) (int, error) {
	if _, err := fmt.Fprintf(c.stdout, "%s %d\n", lease.Path(), lease.Token()); err != nil {
		return exitFailure, err
	}
	select {
	case sig := <-sigs:
		c.log.Info("releasing", "what", h.what, "signal", signame(sig))
	case <-lease.Done():
		fmt.Fprintf(c.stderr, "zklock: lost %s: %s\n", h.what, lossCause(lease.Err()))
		return exitLost, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := release(ctx); err != nil {
		return exitFailure, fmt.Errorf("releasing %s: %s (closing the session removes the node)", h.what, lossCause(err))
	}
	return exitOK, nil
}

// acquire connects and waits to hold h, until its timeout (if not 0) or a
// signal. It returns the session, lease and release, or the exit status and
// error.
func (c *cli) acquire(h held, sigs <-chan os.Signal) (*zkrecipes.Session, *zklock.Lease, func(context.Context) error, int, error) {
	type result struct {
		s       *zkrecipes.Session
		lease   *zklock.Lease
		release func(context.Context) error
		err     error
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	begin := time.Now()
	go func() {
		var r result
		r.s, r.lease, r.release, r.err = c.take(ctx, h)
		done <- r
	}()

	var r result
	select {
	case r = <-done:
	case sig := <-sigs:
		cancel()
		if r = <-done; r.s != nil {
			r.s.Close() // releases the lease too, if take won the race
		}
		return nil, nil, nil, 128 + signum(sig), fmt.Errorf("gave up waiting for %s: got %s", h.what, signame(sig))
	}
	switch {
	case errors.Is(r.err, errTimeout):
		return nil, nil, nil, exitTimeout, fmt.Errorf("did not get %s within %v", h.what, h.timeout)
	case r.err != nil:
		code, err := failed(r.err)
		return nil, nil, nil, code, err
	}
	c.log.Info("acquired", "what", h.what, "token", r.lease.Token(), "waited", time.Since(begin).Round(time.Millisecond))
	return r.s, r.lease, r.release, exitOK, nil
}

// take connects and waits to hold h. On error it closes the session; an
// error caused by the timeout wraps errTimeout.
func (c *cli) take(ctx context.Context, h held) (*zkrecipes.Session, *zklock.Lease, func(context.Context) error, error) {
	s, err := c.connect(ctx, c.log)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := h.use.check(s, h.path); err != nil {
		s.Close()
		return nil, nil, nil, err
	}
	if h.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, h.timeout, errTimeout)
		defer cancel()
	}
	lease, release, err := h.take(ctx, s)
	if err != nil {
		s.Close()
		if cause := context.Cause(ctx); errors.Is(cause, errTimeout) && !errors.Is(err, errTimeout) {
			err = fmt.Errorf("%w: %w", errTimeout, err)
		}
		return nil, nil, nil, err
	}
	return s, lease, release, nil
}
