package main

import (
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
	"github.com/zkrecipes/zkrecipes/zklock"
)

// child is a CMD that zklock runs while it holds something: a lock, a
// leadership, the delivery of a queue's item.
type child struct {
	argv  []string
	env   []string  // added to zklock's environment
	stdin io.Reader // os.Stdin, or the item's data
	what  string    // what is held, for messages: "the lock on /a"
	grace time.Duration

	// lost is closed when what is held ends; err then says why. Until
	// nothing of CMD's process group is left, nothing is given up, so an
	// end is a loss.
	lost <-chan struct{}
	err  func() error // nil while held
	// session holds it: its deadlines bound how long CMD may run on if
	// zklock stops (see deadlines).
	session *zkrecipes.Session
}

// outcome is how a child ended.
type outcome struct {
	code    int       // CMD's exit status, or exitLost, exitNoExec, exitNotFound, exitFailure
	started bool      // CMD was started
	lost    bool      // what was held was lost before CMD's process group was gone
	signal  os.Signal // the last signal forwarded to CMD, if any
}

// supervise runs CMD in a process group of its own while ch's hold lasts,
// and returns once nothing of that group is left, so that the caller may
// then let go of what it holds:
//
//   - the signals of forwardedSignals that zklock receives are sent, once
//     each, to the group;
//   - if the hold is lost, the group gets SIGTERM, and SIGKILL ch.grace
//     later, or sooner, before the ensemble could expire the session and
//     hand what was held to another;
//   - when CMD exits, what is left of its group (processes it started in
//     the background) gets SIGTERM, and SIGKILL ch.grace later;
//   - if zklock dies, its guard kills the group (see guard_unix.go);
//   - if zklock stops (SIGSTOP, a frozen VM), the guard ends the group on
//     its own by the session's deadlines, which zklock keeps telling it.
func (c *cli) supervise(ch child, sigs <-chan os.Signal) outcome {
	// CMD is not in zklock's process group, so a terminal's Ctrl-Z would
	// stop zklock alone: its session would then expire, and its lock pass
	// to another, while CMD runs on. zklock does not stop.
	tstp := make(chan os.Signal, 1)
	notifyUnlessIgnored(tstp, stopSignals()...)
	defer signal.Stop(tstp)

	g, err := startGroup(ch, c.stdout, c.stderr)
	if err != nil {
		fmt.Fprintf(c.stderr, "zklock: %s\n", errText(err))
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, iofs.ErrNotExist) {
			return outcome{code: exitNotFound}
		}
		return outcome{code: exitNoExec}
	}
	defer g.close()
	name := ch.argv[0]

	out := outcome{started: true}
	lost := ch.lost
	var kill <-chan time.Time
	var killAfter time.Duration
	terminate := func() {
		g.terminate()
		if kill == nil {
			killAfter = ch.killDelay()
			kill = time.After(killAfter)
		}
	}
	// The loss is said once, in one line, whoever noticed it first: zklock
	// (the hold ended), or the guard (a deadline of the session passed
	// before zklock told it a later one: the session is being given up, or
	// zklock was stopped).
	reported := false
	report := func(err error, acted string) {
		if !reported {
			reported = true
			fmt.Fprintf(c.stderr, "zklock: lost %s while %s ran: %s; %s\n", ch.what, name, lossCause(err), acted)
		}
	}
	guardActed := false
	// ended settles the outcome once nothing of the group is left (or the
	// guard died): the hold is lost if it ended, or if the guard had to end
	// the group on the session's deadline.
	ended := func() outcome {
		err := ch.err()
		if err == nil && guardActed {
			err = ch.waitLoss()
		}
		if err != nil || guardActed {
			report(err, fmt.Sprintf("process group %d is gone", g.pgid))
			out.code, out.lost = exitLost, true
		}
		return out
	}
	ch.tellDeadlines(g)
	tell := time.NewTicker(deadlineEvery)
	defer tell.Stop()
	for {
		select {
		case <-tell.C:
			if lost != nil {
				ch.tellDeadlines(g)
			}
		case ev := <-g.events:
			switch {
			case ev.died:
				fmt.Fprintf(c.stderr, "zklock: the process that watched %s died (%v); sending SIGKILL to its process group %d\n",
					name, ev.how, g.pgid)
				if err := g.killGroup(); err != nil {
					fmt.Fprintf(c.stderr, "zklock: %s\n", errText(err))
				}
				out.code = exitFailure
				return ended()
			case ev.deadline != "":
				c.log.Info("the guard ended CMD's group at the session's deadline", "signal", "SIG"+ev.deadline, "pgid", g.pgid)
				guardActed = true
			case ev.exited:
				out.code = exitStatus(ev.status)
				if ev.left {
					c.log.Info("CMD exited, leaving processes of its group; sending SIGTERM", "pgid", g.pgid)
					terminate()
				}
			default: // the group is gone
				return ended()
			}
		case sig := <-sigs:
			c.log.Info("forwarding signal", "signal", signame(sig), "pgid", g.pgid)
			g.signal(sig)
			out.signal = sig
		case sig := <-tstp:
			c.log.Warn("not stopping: the lock would expire while CMD runs", "signal", signame(sig))
		case <-lost:
			lost = nil
			report(ch.err(), fmt.Sprintf("sending SIGTERM to its process group %d", g.pgid))
			terminate()
		case <-kill:
			kill = nil
			fmt.Fprintf(c.stderr, "zklock: process group %d of %s still running %v after SIGTERM; sending SIGKILL\n",
				g.pgid, name, killAfter.Round(time.Millisecond))
			g.kill()
		}
	}
}

// waitLoss waits, once the guard ended CMD's group at the session's
// deadline, for the session to give itself up, as it does at once after
// that deadline; it returns why the hold ended, or nil if it had not by
// the time the ensemble could have expired the session. (Either way CMD
// was stopped because the hold could not be vouched for.)
func (ch child) waitLoss() error {
	wait := time.Second
	if ch.session != nil {
		_, expiry := ch.session.Remaining()
		wait = max(wait, expiry)
	}
	select {
	case <-ch.lost:
		return ch.err()
	case <-time.After(wait):
		return nil
	}
}

// lossCause says why a hold ended, without what the line saying so says
// already: the session's end, or the detail after the sentinel ("our node
// was deleted by another client").
func lossCause(err error) string {
	if err == nil {
		return "no contact with ZooKeeper was proven before the session's deadline"
	}
	text := err.Error()
	for _, sentinel := range []error{zkrecipes.ErrSessionExpired, zkrecipes.ErrSessionLost, zkrecipes.ErrClosed} {
		if i := strings.LastIndex(text, sentinel.Error()); i >= 0 && errors.Is(err, sentinel) {
			return text[i:]
		}
	}
	for _, sentinel := range []error{zklock.ErrLockLost, fairqueue.ErrClaimLost} {
		if i := strings.LastIndex(text, sentinel.Error()+": "); i >= 0 && errors.Is(err, sentinel) {
			return text[i+len(sentinel.Error())+2:]
		}
	}
	return errText(err)
}

// deadlineEvery is how often zklock tells the guard the session's
// deadlines while it holds.
const deadlineEvery = 100 * time.Millisecond

// tellDeadlines tells the guard by when to end the group should zklock stop
// telling it (see guard_unix.go).
func (ch child) tellDeadlines(g *group) {
	if ch.session == nil {
		return
	}
	lost, expiry := ch.session.Remaining()
	g.deadlines(lost, expiry)
}

// killDelay is the wait between SIGTERM and SIGKILL on a loss: the grace,
// but no later than the ensemble could expire the session, when the lock
// may pass to another.
func (ch child) killDelay() time.Duration {
	if ch.session == nil {
		return ch.grace
	}
	_, expiry := ch.session.Remaining()
	return max(0, min(ch.grace, expiry-expiryMargin))
}

// expiryMargin is kept between the end of CMD's group and the earliest
// moment the ensemble could expire the session.
const expiryMargin = 100 * time.Millisecond

// notifyUnlessIgnored relays the signals to ch, but leaves alone those that
// zklock was started with ignored (as by nohup, or for a background job of
// a shell script): CMD inherits them ignored, as it would without zklock.
func notifyUnlessIgnored(ch chan<- os.Signal, sigs ...os.Signal) {
	for _, sig := range sigs {
		if !signal.Ignored(sig) {
			signal.Notify(ch, sig)
		}
	}
}

// exitStatus is the shell's view of how a process ended: its exit code, or
// 128+N if it died of signal N.
func exitStatus(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

func signum(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return int(s)
	}
	return 1
}
