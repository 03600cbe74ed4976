//go:build unix

package main

import (
	"bufio"
	byteorder "encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// group is CMD's process group as zklock sees it: through the guard that
// started CMD and watches over the group (see guard_unix.go).
type group struct {
	pgid   int               // CMD's pid, which leads the group
	events <-chan groupEvent // what became of CMD and its group
	guard  *exec.Cmd
	ctl    *os.File // one byte per signal for the guard to send the group
	status *os.File // the guard's reports
}

// groupEvent is a report of the guard. The last one either says the group
// is gone (nothing set) or that the guard died.
type groupEvent struct {
	exited bool               // CMD exited: status says how
	status syscall.WaitStatus //
	left   bool               // when CMD exited, other processes of its group were left

	died bool   // the guard died before the group was gone
	how  string // how it died

	// deadline: the guard sent the group this signal ("TERM", "KILL") on
	// its own, at a deadline of the session that zklock did not move in
	// time (see guard_unix.go).
	deadline string
}

// startGroup starts ch's CMD under a guard, in a process group of its own,
// and returns once CMD is started, or with the error that kept it from
// starting (wrapping exec.ErrNotFound or fs.ErrNotExist if it is missing).
func startGroup(ch child, stdout, stderr io.Writer) (*group, error) {
	path, err := exec.LookPath(ch.argv[0])
	if err != nil {
		return nil, err
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, err
	}
	// The guard is this very binary (/proc/self/exe on Linux: even if the
	// file was replaced since, the guard speaks this version's protocol).
	guard := exec.Command(selfExe())
	guard.Args = append([]string{"zklock-guard", path}, ch.argv...)
	guard.Env = append(append(withoutEnv(os.Environ(), guardEnv), ch.env...), guardEnv+"=1")
	guard.Stdin, guard.Stdout, guard.Stderr = ch.stdin, stdout, stderr
	guard.ExtraFiles = []*os.File{ctlR, statusW} // guardCtlFD, guardStatusFD
	// A group of the guard's own: a signal to zklock's group (a terminal's
	// Ctrl-C, kill -9 of a shell's job) must not reach it.
	guard.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Once the guard has exited, a process that escaped CMD's group (a
	// daemon) and holds a pipe to or from zklock must not hold zklock up.
	guard.WaitDelay = time.Second
	err = guard.Start()
	ctlR.Close() // zklock keeps only its ends: EOF on status means the guard is gone
	statusW.Close()
	if err != nil {
		ctlW.Close()
		statusR.Close()
		return nil, fmt.Errorf("starting the guard of %s: %w", ch.argv[0], err)
	}

	g := &group{guard: guard, ctl: ctlW, status: statusR}
	r := bufio.NewReader(statusR)
	line, _ := r.ReadString('\n')
	var errno syscall.Errno
	switch {
	case scan(line, "start %d", &g.pgid):
	case scan(line, "fail %d", &errno):
		g.close()
		return nil, &os.PathError{Op: "fork/exec", Path: path, Err: errno}
	default:
		g.close()
		return nil, fmt.Errorf("the guard of %s exited before starting it (%v)", ch.argv[0], guard.ProcessState)
	}
	events := make(chan groupEvent, 2)
	g.events = events
	go g.read(r, events)
	return g, nil
}

// read turns the guard's reports into events, up to the last one.
func (g *group) read(r *bufio.Reader, events chan<- groupEvent) {
	for {
		line, err := r.ReadString('\n')
		var ev groupEvent
		switch {
		case line == "gone\n":
			events <- ev
			return
		case scan(line, "exit %d %t", &ev.status, &ev.left):
			ev.exited = true
			events <- ev
		case scan(line, "deadline %s", &ev.deadline):
			events <- ev
		case err != nil: // EOF before "gone": the guard died
			_ = g.guard.Wait()
			events <- groupEvent{died: true, how: g.guard.ProcessState.String()}
			return
		}
	}
}

// scan is fmt.Sscanf that reports whether line matched format in full.
func scan(line, format string, args ...any) bool {
	n, err := fmt.Sscanf(line, format+"\n", args...)
	return err == nil && n == len(args)
}

// signal has the guard send sig to the group, if anything of it is left.
func (g *group) signal(sig os.Signal) {
	if s, ok := sig.(syscall.Signal); ok && s > 0 && s < 256 {
		_, _ = g.ctl.Write([]byte{byte(s)}) // fails only if the guard is gone, which events tell
	}
}

// deadlines tells the guard by when, from now, to end the group unless told
// again: SIGTERM once lost has passed, SIGKILL before expiry (see
// guard_unix.go). A message is a zero byte (no signal has that number) and
// the two in milliseconds.
func (g *group) deadlines(lost, expiry time.Duration) {
	b := []byte{0}
	b = byteorder.BigEndian.AppendUint32(b, uint32(max(0, lost.Milliseconds())))
	b = byteorder.BigEndian.AppendUint32(b, uint32(max(0, expiry.Milliseconds())))
	_, _ = g.ctl.Write(b) // fails only if the guard is gone, which events tell
}

// terminate asks the group to end: SIGTERM, and SIGCONT so that a stopped
// process gets it too.
func (g *group) terminate() {
	g.signal(syscall.SIGTERM)
	g.signal(syscall.SIGCONT)
}

// kill sends SIGKILL to the group.
func (g *group) kill() { g.signal(syscall.SIGKILL) }

// killGroup sends SIGKILL to the group itself, for when the guard died,
// and waits up to releaseTimeout for the group to be gone. (The guard
// being gone, CMD's orphans are reaped by init; until then they count as
// members.)
func (g *group) killGroup() error {
	deadline := time.Now().Add(releaseTimeout)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(-g.pgid, syscall.SIGKILL); errors.Is(err, syscall.ESRCH) {
			return nil
		}
		time.Sleep(groupPoll)
	}
	return fmt.Errorf("process group %d still there %v after SIGKILL", g.pgid, releaseTimeout)
}

// close ends the talk with the guard and waits for it to exit. Called
// after the last event (or instead of the first), it does not wait long:
// the guard exits once it has reported the group gone or CMD not started,
// and, once ctl is closed, once it has killed the group.
func (g *group) close() {
	g.ctl.Close()
	if g.guard.ProcessState == nil {
		_ = g.guard.Wait()
	}
	g.status.Close()
}

// withoutEnv returns env without the variable name.
func withoutEnv(env []string, name string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}
