// Command zklock takes ZooKeeper locks and runs leader elections from the
// shell, lists who holds them, and shows the zklock recipe at work.
//
// Usage:
//
//	zklock [-zk SERVERS] [-session-timeout D] [-v] COMMAND [ARGS]
//
// Commands:
//
//	run [-timeout D] [-data S] [-grace D] PATH -- CMD [ARGS...]
//	    Like flock(1): wait for the lock at PATH (at most -timeout; 0, the
//	    default, waits forever), run CMD with stdin, stdout and stderr passed
//	    through and ZKLOCK_TOKEN set to the lock's fencing token (a decimal
//	    integer, higher for every later holder of PATH), then release the
//	    lock. SIGINT and SIGTERM are forwarded to CMD. If the lock is lost
//	    while CMD runs (session expired or lost, node deleted), CMD gets
//	    SIGTERM, and SIGKILL -grace (default 5s) later. Signals go to CMD's
//	    process only, not to processes it started: in `sh -c`, exec the
//	    last command. -data is stored in the lock node for `holders`
//	    (default: host, pid and CMD). -timeout counts from when the session
//	    is established; connecting gives up after 15s.
//
//	holders PATH
//	    Print the lock's holder, then its waiters in the order they will be
//	    served: node path, session id, fencing token and data.
//
//	lead [-timeout D] [-value S] [-grace D] PATH -- CMD [ARGS...]
//	    Campaign in the leader election at PATH (at most -timeout; 0, the
//	    default, waits forever) and, once elected, run CMD as run does, with
//	    ZKLOCK_TOKEN set to the term (a decimal integer, higher for every
//	    later leader of PATH). When CMD exits, resign: the next campaigner
//	    is elected. Signals, -grace and the loss of leadership (CMD gets
//	    SIGTERM, then SIGKILL) are handled as by run. -value is stored in
//	    the contender's node for `leader` (default: host, pid and CMD).
//
//	leader PATH
//	    Print the election's leader: node path, session id, term and value.
//	    With no leader, print "PATH: no leader" and exit 3.
//
//	demo [-workers N] [-rounds R] [-path P] [-hold D]
//	    N workers, each with its own ZooKeeper session, take turns on one
//	    lock R times each. Prints the line as ZooKeeper sees it, each
//	    hand-off, and checks that the lock was first come first served,
//	    that fencing tokens increase, and that no node is left behind.
//
// Flags common to every command (given before or after the command name):
//
//	-zk SERVERS          comma-separated host:port list (default $ZK_CONNECT,
//	                     else 127.0.0.1:2181)
//	-session-timeout D   ZooKeeper session timeout (default 10s)
//	-v                   log to stderr at info level; -v -v for debug
//
// Exit status:
//
//	0    success (run, lead: CMD's own status; 128+N if CMD died of signal N)
//	1    failure: ZooKeeper unreachable or failing, or a demo check failed
//	2    bad usage
//	3    leader: the election has no leader
//	73   run, lead: the lock or leadership was not won within -timeout
//	75   run, lead: the lock or leadership was lost while CMD ran
//	126  run, lead: CMD could not be started
//	127  run, lead: CMD was not found
//	128+N  zklock was interrupted by signal N while waiting for the lock or
//	       leadership
//
// A CMD that itself exits with 73 or 75 is indistinguishable by status
// alone; zklock's own failures are also reported on stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// Exit statuses; see the package doc.
const (
	exitOK       = 0
	exitFailure  = 1
	exitUsage    = 2
	exitNoLeader = 3
	exitTimeout  = 73 // EX_CANTCREAT
	exitLost     = 75 // EX_TEMPFAIL
	exitNoExec   = 126
	exitNotFound = 127
)

// connectTimeout bounds how long a command waits for a ZooKeeper session.
const connectTimeout = 15 * time.Second

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// cli is what every command is given: the common flags and where to write.
type cli struct {
	servers        string
	sessionTimeout time.Duration
	verbosity      verbosity

	stdout, stderr io.Writer
	log            *slog.Logger
	synopsis       string // of the command being run, for usage errors
}

// usageError is bad input: it is printed with the usage, and zklock exits 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

// flagError is a flag parsing error the flag package has already printed,
// with the usage.
type flagError struct{ err error }

func (e flagError) Error() string { return e.err.Error() }

// flagStatus is the exit status for a flag parsing error: -h is not one.
func flagStatus(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}

// realMain runs the command line args and returns the exit status.
func realMain(args []string, stdout, stderr io.Writer) int {
	c := &cli{servers: os.Getenv("ZK_CONNECT"), sessionTimeout: 10 * time.Second, stdout: stdout, stderr: stderr}
	if c.servers == "" {
		c.servers = "127.0.0.1:2181"
	}
	fs := c.flagSet("zklock")
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	if err := fs.Parse(args); err != nil {
		return flagStatus(err)
	}
	if fs.NArg() == 0 {
		return c.usage(usagef("no command given"))
	}
	commands := map[string]func([]string) (int, error){
		"run":     c.run,
		"holders": c.holders,
		"lead":    c.lead,
		"leader":  c.leader,
		"demo":    c.demo,
	}
	cmd, ok := commands[fs.Arg(0)]
	if !ok {
		return c.usage(usagef("unknown command %q", fs.Arg(0)))
	}
	code, err := cmd(fs.Args()[1:])
	var ue usageError
	var fe flagError
	switch {
	case errors.As(err, &fe):
		return flagStatus(fe.err)
	case errors.As(err, &ue):
		return c.usage(ue)
	case err != nil:
		fmt.Fprintf(stderr, "zklock: %v\n", err)
	}
	return code
}

const usage = `Usage:
  zklock [-zk SERVERS] [-session-timeout D] [-v] COMMAND [ARGS]

Commands:
  run [-timeout D] [-data S] [-grace D] PATH -- CMD [ARGS...]
        hold the lock at PATH while CMD runs (ZKLOCK_TOKEN = fencing token)
  holders PATH
        list the lock's holder and waiters
  lead [-timeout D] [-value S] [-grace D] PATH -- CMD [ARGS...]
        once elected leader at PATH, run CMD (ZKLOCK_TOKEN = term); then resign
  leader PATH
        print the election's leader (exit 3 if none)
  demo [-workers N] [-rounds R] [-path P] [-hold D]
        show N sessions taking turns on one lock

Common flags (before or after COMMAND):
  -zk SERVERS          comma-separated host:port list ($ZK_CONNECT, else 127.0.0.1:2181)
  -session-timeout D   ZooKeeper session timeout (default 10s)
  -v                   log at info level; -v -v for debug

Exit status: 0 ok (run, lead: CMD's status, 128+N if it died of signal N),
1 failure, 2 bad usage, 3 leader: no leader,
73 run, lead: lock or leadership not won within -timeout,
75 run, lead: lock or leadership lost while CMD ran,
126/127 run, lead: CMD cannot be run / not found,
128+N interrupted by signal N while waiting for the lock or leadership.
`

// usage reports bad input with the usage of the command, if one was given.
func (c *cli) usage(err error) int {
	if c.synopsis == "" {
		fmt.Fprintf(c.stderr, "zklock: %v\n\n%s", err, usage)
	} else {
		fmt.Fprintf(c.stderr, "zklock: %v\nUsage: zklock %s\n", err, c.synopsis)
	}
	return exitUsage
}

// flagSet returns a flag set with the common flags registered, so that they
// may be given before or after the command name.
func (c *cli) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.StringVar(&c.servers, "zk", c.servers, "ZooKeeper `servers`, comma-separated host:port")
	fs.DurationVar(&c.sessionTimeout, "session-timeout", c.sessionTimeout, "ZooKeeper session timeout")
	fs.Var(&c.verbosity, "v", "more logging (repeat for more)")
	return fs
}

// parse parses a command's flags and sets up logging. On a flag error the
// flag package prints the problem and the command's usage.
func (c *cli) parse(fs *flag.FlagSet, args []string, synopsis string) error {
	c.synopsis = synopsis
	fs.Usage = func() {
		fmt.Fprintf(c.stderr, "Usage: zklock %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return flagError{err}
	}
	if _, err := c.serverList(); err != nil {
		return err
	}
	if c.sessionTimeout <= 0 {
		return usagef("-session-timeout must be positive")
	}
	level := slog.LevelWarn - slog.Level(4*c.verbosity)
	c.log = slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level}))
	return nil
}

// serverList splits the -zk flag.
func (c *cli) serverList() ([]string, error) {
	var servers []string
	for s := range strings.SplitSeq(c.servers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			servers = append(servers, s)
		}
	}
	if len(servers) == 0 {
		return nil, usagef("-zk: no ZooKeeper server given")
	}
	return servers, nil
}

// connect opens a session, giving up after connectTimeout or when ctx ends.
// log tags the session's own log lines.
func (c *cli) connect(ctx context.Context, log *slog.Logger) (*zkrecipes.Session, error) {
	servers, err := c.serverList()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	s, err := zkrecipes.Connect(ctx, servers,
		zkrecipes.WithSessionTimeout(c.sessionTimeout),
		zkrecipes.WithLogger(log))
	if err != nil {
		return nil, err
	}
	log.Info("connected", "session", fmt.Sprintf("0x%x", s.ID()), "timeout", s.Timeout())
	return s, nil
}

// checkPath validates a lock path given on the command line.
func checkPath(p string) error {
	if err := znode.ValidatePath(p); err != nil {
		return usageError{err.Error()}
	}
	return nil
}

// verbosity counts -v flags.
type verbosity int

func (v *verbosity) String() string   { return strconv.Itoa(int(*v)) }
func (v *verbosity) IsBoolFlag() bool { return true }
func (v *verbosity) Set(s string) error {
	on, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	if on {
		*v++
	}
	return nil
}
