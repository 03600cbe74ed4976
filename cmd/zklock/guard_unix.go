//go:build unix

package main

// The guard: zklock itself, started by zklock in a hidden mode, that runs
// CMD and watches over its process group.
//
// CMD must never outlive what zklock holds. If zklock dies, kill -9
// included, nothing of it runs any more, yet its lock passes to another
// only when ZooKeeper expires its session, a session timeout later. What
// the kernel does at once is close zklock's files: the guard holds the read
// end of a pipe whose only write end is zklock's, and on EOF kills CMD's
// whole group with SIGKILL, grandchildren included. (Linux's parent-death
// signal alone would not do: it reaches the direct child only, not the
// processes it started, and fires when the thread that forked dies, not
// the process.)
//
// The guard leads a process group of its own, so that a signal to zklock's
// group does not reach it; it is not in CMD's group either, so that
// kill(-pgid, 0) failing with ESRCH tells it that CMD's group is gone,
// which it reports to zklock: zklock lets go of what it holds only then.
//
// On Linux the guard is also a child subreaper: processes of the group
// orphaned by CMD's exit become its children, and it reaps them. A zombie
// still counts as a member of its group, and an init that does not reap
// (in a container) would keep the group "alive" forever.
//
// If zklock stops (SIGSTOP, a frozen VM) nothing closes its files, yet its
// session runs out all the same: zklock keeps telling the guard the
// session's deadlines, and a guard no longer told ends the group on its
// own, SIGTERM once the session would have given itself up and SIGKILL
// before the ensemble could expire it.
//
// The protocol, on file descriptors 3 and 4:
//
//	zklock -> guard (guardCtlFD): one byte per signal number to send to
//	    the group; or a zero byte and two big-endian uint32s, the
//	    deadlines in milliseconds from now: SIGTERM after the first,
//	    SIGKILL after the second, unless told again; EOF: zklock is gone,
//	    kill the group.
//	guard -> zklock (guardStatusFD), one line each:
//	    "start PID"         CMD started: PID leads its group
//	    "fail ERRNO"        CMD could not be started; the guard exits
//	    "exit STATUS LEFT"  CMD exited with wait status STATUS; LEFT (true
//	                        or false): other processes of its group remain
//	    "deadline SIG"      a deadline passed without word from zklock, and
//	                        the guard sent SIG (TERM, KILL) to the group
//	    "gone"              nothing of the group is left; the guard exits

import (
	"bufio"
	byteorder "encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"syscall"
	"time"
)

// guardEnv, set in the environment, makes zklock run as a guard. The guard
// takes it out of CMD's environment.
const guardEnv = "ZKLOCK_INTERNAL_GUARD"

// The guard's pipes to and from zklock.
const (
	guardCtlFD    = 3
	guardStatusFD = 4
)

// groupPoll is how often the end of a group is checked for, once CMD has
// exited and something of its group is left.
const groupPoll = 10 * time.Millisecond

// guardMain is main in guard mode; os.Args is
// ["zklock-guard", PATH, ARGV0, ARGS...]. It returns the exit status.
func guardMain() int {
	if len(os.Args) < 3 || !isPipe(guardCtlFD) || !isPipe(guardStatusFD) {
		fmt.Fprintf(os.Stderr, "zklock: %s is set in the environment: it is for zklock's own use; unset it\n", guardEnv)
		return exitUsage
	}
	// CMD's parent-death signal (Linux) must fire when the guard dies, not
	// when the thread that forked CMD does: keep this goroutine, which
	// forks, on its thread for good.
	runtime.LockOSThread()
	syscall.CloseOnExec(guardCtlFD) // CMD must not hold the pipes
	syscall.CloseOnExec(guardStatusFD)
	ctl := os.NewFile(guardCtlFD, "zklock-ctl")
	status := os.NewFile(guardStatusFD, "zklock-status")
	// Only SIGKILL may end the guard before the group. Signals are caught,
	// not ignored: CMD would inherit an ignored signal.
	notifyUnlessIgnored(make(chan os.Signal, 1), forwardedSignals()...)
	setupGuard()

	pid, err := syscall.ForkExec(os.Args[1], os.Args[2:], &syscall.ProcAttr{
		Env:   withoutEnv(os.Environ(), guardEnv),
		Files: []uintptr{0, 1, 2},
		Sys:   cmdSysProcAttr(),
	})
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EINVAL
		}
		fmt.Fprintf(status, "fail %d\n", uintptr(errno))
		return 0
	}
	fmt.Fprintf(status, "start %d\n", pid)
	guard(pid, ctl, status)
	return 0
}

// guard watches over the group led by CMD (pid) until it is gone.
func guard(pid int, ctl, status *os.File) {
	exited := make(chan syscall.WaitStatus, 1)
	go func() {
		// Reap CMD, and meanwhile any orphan of its group that dies.
		for {
			var ws syscall.WaitStatus
			p, err := syscall.Wait4(-1, &ws, 0, nil)
			switch {
			case err == syscall.EINTR:
			case err != nil:
				return // ECHILD: CMD reaped by killGroup, as zklock is gone
			case p == pid:
				exited <- ws
				return
			}
		}
	}()
	sigs := make(chan syscall.Signal)
	told := make(chan deadlines)
	go readCtl(ctl, sigs, told)

	var poll <-chan time.Time // set once CMD has exited, leaving some of its group
	term, kill := newStopped(), newStopped()
	defer term.Stop()
	defer kill.Stop()
	for {
		select {
		case d := <-told:
			term.Reset(d.term - ctlSlack)
			kill.Reset(d.kill - killSlack)
		case <-term.C:
			// zklock has stopped telling: its session is given up by now.
			_ = syscall.Kill(-pid, syscall.SIGTERM)
			_ = syscall.Kill(-pid, syscall.SIGCONT)
			fmt.Fprintln(status, "deadline TERM")
		case <-kill.C:
			// The ensemble may expire the session any moment now.
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			fmt.Fprintln(status, "deadline KILL")
		case sig, ok := <-sigs:
			if !ok { // zklock is gone: its lock is about to pass
				killGroup(pid)
				return
			}
			// Once CMD is reaped, the group's id could in principle be
			// reused as soon as its last member is gone; the window
			// between the poll that saw it and this kill is that of any
			// kill(pid) of a process one did not just reap.
			_ = syscall.Kill(-pid, sig)
		case ws := <-exited:
			reap()
			left := !groupGone(pid)
			fmt.Fprintf(status, "exit %d %t\n", uint32(ws), left)
			if !left {
				fmt.Fprintln(status, "gone")
				return
			}
			poll = time.Tick(groupPoll) // the guard exits when the poll ends
		case <-poll:
			reap()
			if groupGone(pid) {
				fmt.Fprintln(status, "gone")
				return
			}
		}
	}
}

// deadlines is what zklock last told the guard: from its receipt, SIGTERM
// after term and SIGKILL after kill, unless told again.
type deadlines struct{ term, kill time.Duration }

// The guard acts a little before the deadlines it is told, for the time
// the message took, and keeps a margin before the session's expiry: for
// its own wake-up and the group's death on a loaded machine (100 ms was
// not always enough with two test suites under the race detector on two
// cores).
const (
	ctlSlack  = 20 * time.Millisecond
	killSlack = 250 * time.Millisecond
)

// readCtl reads zklock's messages: signals to sigs, deadlines to told;
// sigs is closed at EOF.
func readCtl(ctl *os.File, sigs chan<- syscall.Signal, told chan<- deadlines) {
	r := bufio.NewReader(ctl)
	for {
		b, err := r.ReadByte()
		if err != nil {
			close(sigs)
			return
		}
		if b != 0 {
			sigs <- syscall.Signal(b)
			continue
		}
		var msg [8]byte
		if _, err := io.ReadFull(r, msg[:]); err != nil {
			close(sigs)
			return
		}
		told <- deadlines{
			term: time.Duration(byteorder.BigEndian.Uint32(msg[:4])) * time.Millisecond,
			kill: time.Duration(byteorder.BigEndian.Uint32(msg[4:])) * time.Millisecond,
		}
	}
}

// newStopped is a timer that has not been set.
func newStopped() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// killGroup sends SIGKILL to the group until it is gone. (One signal kills
// every member; they are gone once reaped.)
func killGroup(pgid int) {
	for wait := time.Millisecond; ; wait = min(2*wait, time.Second) {
		if err := syscall.Kill(-pgid, syscall.SIGKILL); errors.Is(err, syscall.ESRCH) {
			return
		}
		reap()
		if groupGone(pgid) {
			return
		}
		time.Sleep(wait)
	}
}

// groupGone reports whether no process is left in the group. EPERM means
// some are, that the guard may not signal (a setuid program).
func groupGone(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

// reap reaps the guard's children that have exited.
func reap() {
	for {
		p, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if p <= 0 || err != nil {
			return
		}
	}
}

// isPipe reports whether fd is an open pipe.
func isPipe(fd int) bool {
	var st syscall.Stat_t
	return syscall.Fstat(fd, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFIFO
}
