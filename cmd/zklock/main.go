// Command zklock takes ZooKeeper locks and runs leader elections from the
// shell, lists who holds them and watches their lines live, feeds and drains
// fairqueue job queues, and shows the zklock recipe at work.
//
// Usage:
//
//	zklock [COMMON FLAGS] COMMAND [ARGS]
//	zklock help [COMMAND [SUBCOMMAND]]
//	zklock version
//
// help prints the usage, or a command's synopsis and flags (help queue:
// its subcommands), on stdout. version (or -version, --version) prints the
// versions of zklock's module, of the library it was built with and of Go,
// one "NAME version:" line each: a release's tag when installed with go
// install, a pseudo-version when built in a git checkout (Go 1.24 on),
// "(devel)" without version control information.
//
// Commands:
//
//	run [-n N] [-timeout D] [-data S] [-grace D] PATH [-- CMD [ARGS...]]
//	    Like flock(1): wait for the lock at PATH (at most -timeout; 0, the
//	    default, waits forever), run CMD with stdin, stdout and stderr passed
//	    through, then release the lock. CMD's environment tells it what it
//	    holds (as etcdctl's ETCD_LOCK_KEY, consul's CONSUL_LOCK_HELD):
//	    ZKLOCK_PATH (PATH), ZKLOCK_NODE (the node that holds the lock),
//	    ZKLOCK_TOKEN (its fencing token: a decimal integer, higher for every
//	    later holder of PATH) and ZKLOCK_SESSION (the session's id, 0x...).
//	    With -n N, hold one of N permits of a semaphore at PATH instead (as
//	    consul lock -n): at most N CMDs run at once, first come first
//	    served. Without CMD, as etcdctl lock: print the node and the token,
//	    separated by a space, on one line, and hold until SIGINT, SIGTERM or
//	    another signal run forwards (then release, status 0) or the loss of
//	    the lock (75). -data is stored in the lock node for holders (default:
//	    the host and zklock's pid, never CMD, which may carry a secret:
//	    anyone who may read PATH may read the node). -timeout counts from
//	    when the session is established; connecting gives up after
//	    -connect-timeout.
//
//	    CMD never outlives the lock. It runs in a process group of its own,
//	    with every process it starts (unless one leaves the group, as a
//	    daemon does with setsid):
//	      - SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM and SIGTERM
//	        sent to zklock are forwarded, once each, to the group (a
//	        terminal's Ctrl-C, sent to zklock's group, reaches CMD through
//	        zklock only). A signal zklock was started with ignored (nohup)
//	        stays ignored, for CMD too. zklock does not stop on SIGTSTP
//	        (Ctrl-Z): stopped, it would let the lock expire under CMD.
//	      - When CMD exits, processes it left in its group get SIGTERM, and
//	        SIGKILL -grace (default 5s) later; the lock is released once
//	        none is left.
//	      - If the lock is lost while the group runs (session expired or
//	        lost, node deleted), the group gets SIGTERM, and SIGKILL -grace
//	        later, or sooner: before ZooKeeper could expire the session and
//	        give the lock to another (a fifth of the session timeout after
//	        the session is given up); zklock exits 75 once it is gone, and
//	        says on stderr, in one line, what it lost and why. It does so
//	        however the group ended: also when the guard below ended it at
//	        the session's deadline a moment before the session gave itself
//	        up.
//	      - If zklock dies, kill -9 included, the group is killed at once
//	        (SIGKILL), before ZooKeeper can expire the session and give the
//	        lock to another: a small process of zklock's, which shows as
//	        zklock-guard, watches over the group. If zklock stops (SIGSTOP,
//	        a frozen machine), the guard ends the group on its own by the
//	        session's deadlines, which zklock keeps telling it: SIGTERM when
//	        the session would give itself up, SIGKILL before it could expire.
//	    As for a command started with & from an interactive shell, CMD is
//	    in the background of the terminal: if it reads from the terminal it
//	    is stopped (SIGTTIN). Where there are no Unix process groups
//	    (Windows), run, lead and queue take refuse to start CMD.
//
//	holders PATH
//	    Print the contenders of the lock, semaphore or election at PATH:
//	    the holders first (a lock's one holder, or readers sharing it, a
//	    semaphore's permit holders, an election's leader), then the
//	    waiters in the order they will be served: node path, session id,
//	    fencing token and data. Who holds is the recipe's own rule, as its
//	    Contenders reports it (zklock.Contender.Holds). The recipe is told
//	    by its nodes' names (zklock.KindOf). A PATH that does not exist
//	    exits 4 (a lock's or an election's directory is a container node,
//	    which the server removes once it has been empty a while, so an
//	    unused one does not exist either); one that holds a queue, or nodes
//	    of no recipe, exits 5.
//	    A zklock.CachedMutex's holder shows as "holder (cached)" ("cached":
//	    true in JSON): it may be idle between critical sections, kept for
//	    its process's next Lock, and lets go as soon as anyone joins the
//	    line.
//
//	watch [-once] PATH
//	    Show the line of the lock, semaphore or election at PATH, and show
//	    it again each time it changes: the holders (an election's leader),
//	    as holders tells them, then the waiters in order, each with how
//	    long ago it joined the line (its node's ctime, by the server's
//	    clock). It sets ZooKeeper watches on the directory and on the first
//	    holder's node and never polls, so the times shown are those of the
//	    last change. Frames are separated by a
//	    blank line, or clear the screen when stdout is a terminal; with
//	    -json each frame is one JSON object on a line of its own. -once
//	    prints one frame and exits. SIGINT and SIGTERM end it (status 0).
//	    A PATH that does not exist is watched until something is there; one
//	    that holds a queue, or nodes of no recipe, exits 5.
//
//	lead [-timeout D] [-value S] [-grace D] PATH [-- CMD [ARGS...]]
//	    Campaign in the leader election at PATH (at most -timeout; 0, the
//	    default, waits forever) and, once elected, run CMD as run does, with
//	    the same environment: ZKLOCK_NODE is the leader's node, ZKLOCK_TOKEN
//	    the term (a decimal integer, higher for every later leader of PATH).
//	    Once CMD's process group is gone, resign: the next campaigner is
//	    elected. CMD never outlives the leadership: signals, -grace, CMD's
//	    exit, the loss of leadership and zklock's death are handled as by
//	    run; without CMD, lead holds the leadership as run holds the lock.
//	    -value is stored in the contender's node for leader and holders
//	    (default: the host and zklock's pid, never CMD).
//
//	leader PATH
//	    Print the election's leader: node path, session id, token (the
//	    term) and value. With no leader, print "PATH: no leader" and exit 3;
//	    a PATH that does not exist exits 4, one that holds another recipe 5.
//
//	queue put [-key K] [-delay D] PATH [DATA...]
//	    Put each DATA argument, or else each line of stdin, as an item in
//	    the fairqueue at PATH, in order, and print the new items' ids. Lines
//	    are put as they come (tail -f FILE | zklock queue put PATH works):
//	    each as soon as it is read, together with the lines already waiting
//	    (up to 1000 items and 1 MiB in one all-or-nothing batch). A line
//	    (or DATA) over zkrecipes.MaxDataSize (1044480 bytes) fails alone:
//	    it is reported on stderr with the limit, the others are put, and
//	    zklock exits 1. A line's "\n" or "\r\n" is not part of the item.
//	    -key K makes the put safe to retry: while the item put with key K is
//	    in the queue, putting with K again adds nothing and prints its id
//	    (one item only: stdin is read to its end first). -delay D keeps the
//	    item from consumers until D has passed; its id is then the delayed
//	    entry's ("d-..."). With -json the ids (and the items not put) are
//	    printed once the input has ended. SIGINT or SIGTERM stop it, once
//	    the batch under way is in (status 0; 1 if lines read were left).
//
//	queue take [-once] [-timeout D] [-max-attempts N] [-backoff D] [-max-backoff D] [-grace D] [-prefetch N] PATH -- CMD [ARGS...]
//	    Take the queue's items, oldest first, and run CMD for each, as run
//	    does: the item's data on CMD's stdin, ZKLOCK_JOB_ID,
//	    ZKLOCK_JOB_ATTEMPT (1 on the first delivery), ZKLOCK_PATH and
//	    ZKLOCK_SESSION in its environment,
//	    stdout and stderr passed through. When CMD exits 0 the item is
//	    acked (gone for good); otherwise it is given back at its place in
//	    line, held back from every consumer first: -backoff (default 1s)
//	    after the first delivery, doubled after each further one, at most
//	    -max-backoff (default 1m); -backoff 0 gives it back at once. An
//	    item delivered -max-attempts times (default 5; 0: no limit) goes to
//	    the dead letters instead. Each failure is said on stderr: the item,
//	    CMD's status, the delivery, and what became of the item. So a CMD
//	    that fails on everything does not spin: with the defaults an item
//	    is delivered 5 times over some 15 seconds, then set aside.
//	    Without -once it goes on with the next item until a signal (one of
//	    those run forwards: forwarded to a running CMD, whose item is then
//	    settled as usual) or, with -timeout, until no item has come for D;
//	    with -once it takes one item (waiting at most -timeout) and exits
//	    with CMD's status. CMD runs in a process group of its own, as under
//	    run. If the item's delivery is lost while it runs (session over,
//	    or its ticket in the queue's ready/ deleted), the group gets
//	    SIGTERM, then SIGKILL -grace later, and zklock exits 75: the item
//	    will be delivered again. A CMD that cannot be started ends the loop
//	    too (126, 127), its item given back. The loop takes the next item
//	    once CMD has exited (an idle consumer elsewhere gets the items
//	    meanwhile); -prefetch N holds N items ahead instead, taken while
//	    CMD runs, and given back (a delivery counted) when the loop stops.
//	    While it waits or runs CMD, zklock's session may be the queue's
//	    dispatcher, which hands items to every consumer: it stands down
//	    when zklock exits, and another consumer takes over at once; a
//	    zklock killed or stopped holds hand-out up until its session
//	    expires (-session-timeout).
//
//	queue ls PATH
//	    Print how many items are pending (put, and neither handed out,
//	    acked nor dead), in progress (handed out to a consumer, not yet
//	    acked or given back), delayed (put with -delay, not yet due) and
//	    dead letters; how many consumers take from the queue and how many
//	    of them wait for an item; and the session of the dispatcher, the
//	    consumer that hands the items out ("-" with none). Each is read in
//	    turn: with puts and takes under way the counts may be off by those.
//
//	    Every queue subcommand refuses a PATH that holds a lock, a
//	    semaphore or an election (status 5); ls, dead and requeue a PATH
//	    that does not exist (4): put makes the queue, take waits for it.
//
//	queue dead PATH
//	    List the dead letters, oldest first: id, deliveries, data.
//
//	queue requeue PATH ID...
//	    Put the dead letters with these ids back at the end of the queue,
//	    as new items, and print each new item's id. An id that is no dead
//	    letter makes zklock exit 3, an argument that is no item id 2; the
//	    other ids are requeued all the same.
//
//	demo [-path P] [-workers N] [-rounds R] [-replicas N] [-producers N] [-consumers N] [-items N] [-hold D]
//	    The library's three uses, one after the other, each client with a
//	    ZooKeeper session of its own (about 2 s with the defaults):
//	      1. -workers workers (5) take turns on the lock P/lock -rounds
//	         times each (3), first come first served, each hand-off with
//	         a higher fencing token.
//	      2. -replicas replicas (3) campaign in the election P/election;
//	         each leader resigns, or its session is closed, and the next
//	         in line takes over with a higher term, as another session
//	         sees with Observe.
//	      3. -producers producers (2) put -items jobs each (3) in the
//	         queue P/queue; -consumers consumers (3) take them, oldest
//	         first, and ack them.
//	    A worker holds the lock, a leader leads and a consumer works on a
//	    job for -hold (50ms). Each part prints what happens, then checks
//	    it: first come first served, tokens and terms increasing, every job
//	    taken and acked once, oldest first, and nothing left behind; zklock
//	    exits 1 if a check fails. P (default /zkrecipes/demo) must hold no
//	    contender and no job. Interrupted, the demo takes back the jobs it
//	    left in the queue.
//
// Flags common to every command (given before or after the command name):
//
//	-zk SERVERS          comma-separated host:port list, as the Java client
//	                     takes it: the port defaults to 2181, and the last
//	                     address may be followed by a chroot
//	                     ("zk1:2181,zk2:2181/app": every PATH is then under
//	                     /app, which must exist) (default $ZK_CONNECT, else
//	                     127.0.0.1:2181)
//	-connect-timeout D   give up connecting after D (default 5s): zklock
//	                     then says, in one line, each server it tried and
//	                     why that failed; at once when no retry could help
//	                     (a server that is not ZooKeeper, -tls to a
//	                     plaintext port)
//	-session-timeout D   ZooKeeper session timeout (default 10s)
//	-v                   log to stderr at info level; -v -v for debug
//	-json                print listings as JSON: holders, leader, watch,
//	                     queue put, queue ls, queue dead, queue requeue
//	-metrics ADDR        serve the library's OpenTelemetry metrics in the
//	                     Prometheus text format at http://ADDR/metrics while
//	                     zklock runs (port 0 picks a free port; the address
//	                     is printed on stderr)
//
// Flags to reach a secured ensemble, common to every command too. TLS is
// to the servers' secureClientPort (see zkrecipes.WithTLS); the names are
// Consul's:
//
//	-tls                 talk TLS with the system's roots; implied by the
//	                     flags below
//	-ca-file FILE        trust the CA certificates in FILE (PEM) for the
//	                     servers' certificates
//	-client-cert FILE    present this client certificate (PEM), which a
//	                     server with ssl.clientAuth=need (the default) or
//	                     want asks for; the session is then also x509-
//	                     authenticated with its subject
//	-client-key FILE     the client certificate's private key (PEM)
//	-tls-server-name N   check the servers' certificates for N (default:
//	                     each server's host as given in -zk)
//	-auth USER:PASSWORD  authenticate with the digest scheme (default
//	                     $ZK_AUTH, which ps does not show); the nodes zklock
//	                     creates (locks, elections, queues) are then for that
//	                     identity only (zkrecipes.WithAuth)
//
// A file that cannot be read or holds no certificate is bad usage.
//
// In JSON, node data is "data" when it is UTF-8 text, else "data_base64";
// session ids are hexadecimal strings, as in the text output. holders and
// watch give the kind of line ("lock", "semaphore", "election"), a
// semaphore's permits, and the contenders in order, each with its role
// ("holder" or "waiter"; "leader" or "candidate") and position (0 for a
// holder, 1... for the waiters in the order they will be served).
//
// Exit status:
//
//	0    success (run, lead, queue take -once: CMD's own status; 128+N if
//	     CMD died of signal N; run and lead without CMD, watch, queue take,
//	     queue put: stopped by a signal, or queue take's -timeout passed
//	     with no item)
//	1    failure: ZooKeeper unreachable or failing, a line or DATA too
//	     large for queue put, a demo check failed, or (run, lead, queue
//	     take) the process watching over CMD's group was killed; zklock
//	     then kills the group itself
//	2    bad usage (queue requeue: an argument that is no item id)
//	3    leader: the election has no leader; queue requeue: no such dead
//	     letter
//	4    PATH does not exist: holders, leader, queue ls, dead, requeue
//	5    PATH holds another recipe than the command's: a queue, or nodes
//	     of no recipe, for holders, watch or leader; a queue for run or
//	     lead; a lock, semaphore or election for a queue subcommand; an
//	     election for run, a lock for lead, ...
//	73   run, lead: the lock or leadership was not won within -timeout;
//	     queue take -once: no item came within -timeout
//	75   run, lead: the lock or leadership was lost (session given up or
//	     expired, node deleted) while held, CMD (or its process group)
//	     running or not; queue take: the item's delivery was lost while
//	     CMD ran. Said on stderr in one line, "zklock: lost ... : why".
//	126  run, lead, queue take: CMD could not be started
//	127  run, lead, queue take: CMD was not found
//	128+N  zklock was interrupted by signal N while waiting for the lock,
//	       leadership, or (queue take -once) an item
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
	"sync"
	"time"

	"github.com/zkrecipes/zkrecipes"
)

// Exit statuses; see the package doc.
const (
	exitOK           = 0
	exitFailure      = 1
	exitUsage        = 2
	exitNoLeader     = 3
	exitNoDeadLetter = 3  // queue requeue
	exitNoPath       = 4  // PATH does not exist
	exitWrongRecipe  = 5  // PATH holds another recipe
	exitTimeout      = 73 // EX_CANTCREAT
	exitLost         = 75 // EX_TEMPFAIL
	exitNoExec       = 126
	exitNotFound     = 127
)

// defaultConnectTimeout bounds how long a command waits for a ZooKeeper
// session (-connect-timeout): a server that answers gives one in
// milliseconds, and one that cannot be had is better said soon.
const defaultConnectTimeout = 5 * time.Second

func main() {
	if os.Getenv(guardEnv) != "" { // zklock started itself to guard a CMD
		os.Exit(guardMain())
	}
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// cli is what every command is given: the common flags and where to write.
type cli struct {
	servers        string
	sessionTimeout time.Duration
	connectTimeout time.Duration
	verbosity      verbosity
	json           bool   // -json: print listings as JSON
	metricsAddr    string // -metrics: serve Prometheus metrics there
	sec            security

	stdout, stderr io.Writer
	log            *slog.Logger
	synopsis       string // of the command being run, for usage errors
	listing        bool   // the command prints a listing: -json applies

	metricsMu sync.Mutex
	metrics   *metricsServer // started by the first connect, with -metrics
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
	c := &cli{servers: os.Getenv("ZK_CONNECT"), sessionTimeout: 10 * time.Second, connectTimeout: defaultConnectTimeout,
		stdout: stdout, stderr: stderr}
	if c.servers == "" {
		c.servers = "127.0.0.1:2181"
	}
	c.sec.auth = os.Getenv("ZK_AUTH")
	defer c.stopMetrics()
	fs := c.flagSet("zklock")
	showVersion := fs.Bool("version", false, "print zklock's version and exit")
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	if err := fs.Parse(args); err != nil {
		return flagStatus(err)
	}
	if *showVersion {
		if fs.NArg() > 0 {
			return c.usage(usagef("-version takes no arguments, got %q", fs.Args()))
		}
		if err := printVersion(stdout); err != nil {
			fmt.Fprintf(stderr, "zklock: %v\n", err)
			return exitFailure
		}
		return exitOK
	}
	if fs.NArg() == 0 {
		return c.usage(usagef("no command given"))
	}
	code, err := c.dispatch(fs.Args())
	var ue usageError
	var fe flagError
	switch {
	case errors.As(err, &fe):
		return flagStatus(fe.err)
	case errors.As(err, &ue):
		return c.usage(ue)
	case err != nil:
		fmt.Fprintf(stderr, "zklock: %s\n", errText(err))
	}
	return code
}

// commands are zklock's commands, by name.
func (c *cli) commands() map[string]func([]string) (int, error) {
	return map[string]func([]string) (int, error){
		"run":     c.run,
		"holders": c.holders,
		"watch":   c.watch,
		"lead":    c.lead,
		"leader":  c.leader,
		"queue":   c.queue,
		"demo":    c.demo,
		"help":    c.help,
		"version": c.version,
	}
}

// version is `zklock version`.
func (c *cli) version(args []string) (int, error) {
	c.synopsis = "version"
	if len(args) > 0 {
		return exitUsage, usagef("version takes no arguments, got %q", args)
	}
	if err := printVersion(c.stdout); err != nil {
		return exitFailure, err
	}
	return exitOK, nil
}

// dispatch runs the command args name.
func (c *cli) dispatch(args []string) (int, error) {
	cmd, ok := c.commands()[args[0]]
	if !ok {
		return exitUsage, usagef("unknown command %q", args[0])
	}
	return cmd(args[1:])
}

const usage = `Usage:
  zklock [COMMON FLAGS] COMMAND [ARGS]
  zklock help [COMMAND [SUBCOMMAND]]     this text, or a command's flags
  zklock version                         print zklock's version (also -version)

Commands:
  run [-n N] [-timeout D] [-data S] [-grace D] PATH [-- CMD [ARGS...]]
        hold the lock at PATH (-n: one of N permits) while CMD runs; CMD's
        process group never outlives the lock: signals are forwarded to it,
        and it is killed if the lock is lost or zklock dies; without CMD,
        print the node and token and hold until interrupted
  holders PATH
        list the holders and waiters of the lock, semaphore or election at PATH
  watch [-once] PATH
        show the line of a lock, semaphore or election live: holders, waiters,
        time in line; redrawn on every change
  lead [-timeout D] [-value S] [-grace D] PATH [-- CMD [ARGS...]]
        once elected leader at PATH, run CMD as run does; then resign
  leader PATH
        print the election's leader (exit 3 if none)
  queue put [-key K] [-delay D] PATH [DATA...]
        put each DATA, else each line of stdin as it comes, in the queue at
        PATH; print the ids; a line over 1044480 bytes fails alone
  queue take [-once] [-timeout D] [-max-attempts N] [-backoff D]
             [-max-backoff D] [-grace D] [-prefetch N] PATH -- CMD [ARGS...]
        run CMD for each item, its data on stdin; ack the item if CMD exits
        0, else give it back, held back 1s, then 2s, 4s... (-backoff,
        -max-backoff 1m); dead letter after 5 deliveries (-max-attempts);
        each failure said on stderr; until SIGINT/SIGTERM
  queue ls PATH
        count the items pending, in progress, delayed and dead, the
        consumers and those waiting; show the dispatcher's session
  queue dead PATH
        list the dead letters
  queue requeue PATH ID...
        put dead letters back at the end of the queue; print their new ids
  demo [-path P] [-workers N] [-rounds R] [-replicas N] [-producers N]
       [-consumers N] [-items N] [-hold D]
        show a fair mutex, an election's hand-overs and a job queue at work,
        each client with a session of its own, and check what they did

CMD's environment (run, lead, queue take):
  ZKLOCK_PATH          PATH
  ZKLOCK_NODE          run, lead: the node that holds the lock or leadership
  ZKLOCK_TOKEN         run, lead: its fencing token (the election's term)
  ZKLOCK_SESSION       the ZooKeeper session's id (0x...)
  ZKLOCK_JOB_ID        queue take: the item's id
  ZKLOCK_JOB_ATTEMPT   queue take: its delivery, 1 the first time

Common flags (before or after COMMAND):
  -zk SERVERS          comma-separated host:port list, optionally ending in /chroot
                       ($ZK_CONNECT, else 127.0.0.1:2181)
  -connect-timeout D   give up connecting after D (default 5s), naming each
                       server tried and why it failed
  -session-timeout D   ZooKeeper session timeout (default 10s)
  -v                   log at info level; -v -v for debug
  -json                print listings as JSON: holders, leader, watch, queue put,
                       queue ls, queue dead, queue requeue
  -metrics ADDR        serve Prometheus metrics at http://ADDR/metrics while zklock runs

Secured ensembles (common flags too):
  -tls                 talk TLS (the servers' secureClientPort); implied by the
                       four flags below
  -ca-file FILE        CA certificates (PEM) to check the servers' certificates
                       with (default: the system's roots)
  -client-cert FILE    client certificate (PEM), for ssl.clientAuth=need or want
  -client-key FILE     its private key (PEM)
  -tls-server-name N   name the servers' certificates must be valid for
                       (default: each server's host, as given in -zk)
  -auth USER:PASSWORD  authenticate with the digest scheme ($ZK_AUTH; better than
                       the command line, which ps shows); the nodes zklock then
                       creates are for that user only

The node run and lead make stores the host and zklock's pid (-data, -value
to store other text): anyone who may read PATH may read it.

Exit status:
  0      ok; run, lead, queue take -once: CMD's status (128+N if it died of
         signal N); run, lead without CMD, watch, queue put, queue take:
         stopped by SIGINT or SIGTERM; queue take: -timeout passed with no
         item
  1      failure (ZooKeeper unreachable or failing, a line too large for
         queue put, a demo check failed, the process watching over CMD's
         group was killed)
  2      bad usage
  3      leader: no leader; queue requeue: no such dead letter
  4      PATH does not exist (holders, leader, queue ls, dead, requeue)
  5      PATH holds another recipe than the command's (a queue for run, a
         lock for queue put, ...)
  73     run, lead: lock or leadership not won within -timeout;
         queue take -once: no item within -timeout
  75     run, lead: lock or leadership lost (session given up or expired,
         node deleted) while held, said on stderr in one line;
         queue take: the item's delivery lost while CMD ran
  126    run, lead, queue take: CMD cannot be run
  127    run, lead, queue take: CMD not found
  128+N  interrupted by signal N while waiting for the lock, leadership,
         or an item (queue take -once)
`

// usage reports bad input with the usage of the command, if one was given.
func (c *cli) usage(err error) int {
	if c.synopsis == "" {
		fmt.Fprintf(c.stderr, "zklock: %s\n\n%s", errText(err), usage)
	} else {
		fmt.Fprintf(c.stderr, "zklock: %s\nUsage: zklock %s\n", errText(err), strings.TrimSuffix(c.synopsis, "\n"))
	}
	return exitUsage
}

// flagSet returns a flag set with the common flags registered, so that they
// may be given before or after the command name.
func (c *cli) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.StringVar(&c.servers, "zk", c.servers, "the ZooKeeper `SERVERS`, a comma-separated host:port list, optionally ending in /chroot ($ZK_CONNECT)")
	fs.DurationVar(&c.sessionTimeout, "session-timeout", c.sessionTimeout, "ZooKeeper session timeout `D`")
	fs.DurationVar(&c.connectTimeout, "connect-timeout", c.connectTimeout, "give up connecting after `D`, and say what was tried")
	fs.Var(&c.verbosity, "v", "more logging (repeat for more)")
	fs.BoolVar(&c.json, "json", c.json, "print listings as JSON")
	fs.StringVar(&c.metricsAddr, "metrics", c.metricsAddr, "serve Prometheus metrics at http://`ADDR`/metrics")
	c.sec.register(fs)
	return fs
}

// parse parses a command's flags and sets up logging. On a flag error the
// flag package prints the problem and the command's usage.
func (c *cli) parse(fs *flag.FlagSet, args []string, synopsis string) error {
	c.synopsis = synopsis
	fs.Usage = func() {
		fmt.Fprintf(c.stderr, "Usage: zklock %s\n\nFlags:\n", synopsis)
		// -json only where it works. (It is defined everywhere, so that
		// elsewhere it is refused with a word on why.)
		shown := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
		shown.SetOutput(fs.Output())
		fs.VisitAll(func(f *flag.Flag) {
			if f.Name != "json" || c.listing {
				shown.Var(f.Value, f.Name, f.Usage)
				shown.Lookup(f.Name).DefValue = f.DefValue
			}
		})
		shown.PrintDefaults()
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
	if c.connectTimeout <= 0 {
		return usagef("-connect-timeout must be positive")
	}
	if err := c.sec.check(); err != nil {
		return err
	}
	if c.json && !c.listing {
		name := strings.Fields(synopsis)[:1]
		if name[0] == "queue" {
			name = strings.Fields(synopsis)[:2]
		}
		return usagef("-json: %s prints no listing (holders, leader, watch, queue put, ls, dead and requeue do)", strings.Join(name, " "))
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

// connect opens a session, giving up after -connect-timeout or when ctx
// ends.
// log tags the session's own log lines.
func (c *cli) connect(ctx context.Context, log *slog.Logger) (*zkrecipes.Session, error) {
	servers, err := c.serverList()
	if err != nil {
		return nil, err
	}
	opts := []zkrecipes.Option{zkrecipes.WithSessionTimeout(c.sessionTimeout), zkrecipes.WithLogger(slog.New(sessionOver{log.Handler()}))}
	opts = append(opts, c.sec.options()...)
	if c.metricsAddr != "" {
		m, err := c.startMetrics()
		if err != nil {
			return nil, err
		}
		opts = append(opts, zkrecipes.WithMeterProvider(m.provider))
	}
	ctx, cancel := context.WithTimeoutCause(ctx, c.connectTimeout, fmt.Errorf("-connect-timeout %v passed", c.connectTimeout))
	defer cancel()
	s, err := zkrecipes.Connect(ctx, servers, opts...)
	if errors.Is(err, zkrecipes.ErrInvalidArgument) {
		return nil, usageError{err.Error()} // such as a server address it cannot read
	}
	if err != nil {
		return nil, err
	}
	log.Info("connected", "session", fmt.Sprintf("0x%x", s.ID()), "timeout", s.Timeout())
	return s, nil
}

// startMetrics starts serving -metrics, once: every session of the command
// records to the same MeterProvider.
func (c *cli) startMetrics() (*metricsServer, error) {
	c.metricsMu.Lock()
	defer c.metricsMu.Unlock()
	if c.metrics == nil {
		m, err := startMetrics(c.metricsAddr)
		if err != nil {
			return nil, err
		}
		c.metrics = m
		fmt.Fprintf(c.stderr, "zklock: serving metrics at http://%s/metrics\n", m.addr)
	}
	return c.metrics, nil
}

// stopMetrics stops serving -metrics, if it was started.
func (c *cli) stopMetrics() {
	c.metricsMu.Lock()
	defer c.metricsMu.Unlock()
	if c.metrics != nil {
		if err := c.metrics.close(); err != nil {
			c.log.Warn("stopping the metrics server", "err", err)
		}
		c.metrics = nil
	}
}

// errText is err's text for a line that zklock prefixes with its name:
// without the name of the library's package that returned it ("zklock: "
// of package zklock, "zkrecipes: ", "fairqueue: "), which would only say
// it again or say where in the library it was made.
func errText(err error) string {
	text := err.Error()
	for _, pkg := range []string{"zklock: ", "zkrecipes: ", "fairqueue: "} {
		text = strings.TrimPrefix(text, pkg)
	}
	return text
}

// checkPath validates a lock path given on the command line.
func checkPath(p string) error {
	if err := zkrecipes.ValidatePath(p); err != nil {
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

// sessionOver lowers the session's own warning that it is over to info:
// zklock says so itself, once, in its own words (a lost lock, a failed
// command).
type sessionOver struct{ slog.Handler }

func (h sessionOver) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "session over" && r.Level == slog.LevelWarn {
		if r.Level = slog.LevelInfo; !h.Handler.Enabled(ctx, r.Level) {
			return nil
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h sessionOver) WithAttrs(attrs []slog.Attr) slog.Handler {
	return sessionOver{h.Handler.WithAttrs(attrs)}
}

func (h sessionOver) WithGroup(name string) slog.Handler {
	return sessionOver{h.Handler.WithGroup(name)}
}
