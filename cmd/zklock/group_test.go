package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/zkrecipes/zkrecipes/zktest"
)

// The tests of this file check that CMD, and every process it starts, never
// outlives what zklock holds: CMD runs in a process group of its own, which
// zklock signals, and which dies with zklock.

// proc is a line of /proc/PID/stat: the fields the tests need.
type proc struct {
	pid, ppid, pgid int
	state           byte // 'Z' for a zombie
}

// parseStat parses a /proc/PID/stat line.
func parseStat(line string) (proc, bool) {
	open, end := strings.IndexByte(line, '('), strings.LastIndex(line, ") ")
	if open < 0 || end < open {
		return proc{}, false
	}
	f := strings.Fields(line[end+2:]) // state ppid pgrp ...
	if len(f) < 3 || len(f[0]) != 1 {
		return proc{}, false
	}
	pid, err1 := strconv.Atoi(strings.TrimSpace(line[:open]))
	ppid, err2 := strconv.Atoi(f[1])
	pgid, err3 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil || err3 != nil {
		return proc{}, false
	}
	return proc{pid: pid, ppid: ppid, pgid: pgid, state: f[0][0]}, true
}

// procOf returns what /proc says of pid; false if there is no such process.
func procOf(pid int) (proc, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return proc{}, false
	}
	return parseStat(string(b))
}

// liveMembers returns the processes of group pgid that are alive (zombies
// are dead) among the /proc/PID/stat lines of stats.
func liveMembers(stats string, pgid int) []proc {
	var live []proc
	for line := range strings.Lines(stats) {
		if p, ok := parseStat(line); ok && p.pgid == pgid && p.state != 'Z' {
			live = append(live, p)
		}
	}
	return live
}

// procStats returns the /proc/PID/stat lines of every process, now.
func procStats(t *testing.T) string {
	t.Helper()
	names, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, name := range names {
		if s, err := os.ReadFile(name); err == nil { // a process may be gone
			b.Write(s)
		}
	}
	return b.String()
}

// snapshotCMD is a CMD that writes the /proc/PID/stat lines of every
// process, as they are when it starts, to the file $1: what runs when a
// zklock gets the lock.
var snapshotCMD = []string{"sh", "-c", `cat /proc/[0-9]*/stat > "$1.tmp" 2>/dev/null; mv "$1.tmp" "$1"`, "sh"}

// script writes a shell script to a file of the test's and returns its path.
func script(t *testing.T, body string) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "cmd.sh")
	if err := os.WriteFile(name, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return name
}

// pidIn waits until CMD has written its pid to the file name, and returns it.
func pidIn(t *testing.T, name string, cmd *exec.Cmd) int {
	t.Helper()
	waitFile(t, name, cmd)
	var pid int
	waitFor(t, func() bool {
		b, _ := os.ReadFile(name)
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		pid = n
		return err == nil && n > 0
	}, func() string { return name + " holds no pid" })
	return pid
}

// groupOf returns the process group of the live process pid, and kills the
// group when the test ends, unless it is the test's own.
func groupOf(t *testing.T, pid int) int {
	t.Helper()
	p, ok := procOf(pid)
	if !ok {
		t.Fatalf("pid %d is gone", pid)
	}
	if p.pgid != syscall.Getpgrp() {
		t.Cleanup(func() { syscall.Kill(-p.pgid, syscall.SIGKILL) })
	}
	return p.pgid
}

// signalGroup sends sig to the process group pgid, which must not be the
// test's own.
func signalGroup(t *testing.T, pgid int, sig syscall.Signal) {
	t.Helper()
	if pgid == syscall.Getpgrp() {
		t.Fatalf("process group %d is the test's own: not sending it %v", pgid, sig)
	}
	if err := syscall.Kill(-pgid, sig); err != nil {
		t.Fatalf("kill(-%d, %v): %v", pgid, sig, err)
	}
}

// inOwnGroup makes cmd lead a process group of its own, as a shell's job
// does (and as a terminal's signals find it).
func inOwnGroup(cmd *exec.Cmd) *exec.Cmd {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// checkGroupGone fails the test if a process of group pgid is alive.
func checkGroupGone(t *testing.T, pgid int, when string) {
	t.Helper()
	if live := liveMembers(procStats(t), pgid); len(live) > 0 {
		t.Errorf("%s, processes of CMD's group %d are alive: %+v", when, pgid, live)
	}
}

// backgroundCMD starts `sleep 300` in the background, writes the pids of
// the shell ($1/child) and of the sleep ($1/grandchild), and waits.
const backgroundCMD = `sleep 300 & echo $! > "$1/grandchild"; echo $$ > "$1/child"; wait`

// TestRunKilledTakesCMDGroupAlong: `zklock run` killed with SIGKILL. The
// lock passes to a second zklock once the first's session expires; by then
// nothing of the first CMD's group, grandchild included, may be alive.
func TestRunKilledTakesCMDGroupAlong(t *testing.T) { testKilledTakesCMDGroupAlong(t, "run") }

// TestLeadKilledTakesCMDGroupAlong is the same for `zklock lead`.
func TestLeadKilledTakesCMDGroupAlong(t *testing.T) { testKilledTakesCMDGroupAlong(t, "lead") }

func testKilledTakesCMDGroupAlong(t *testing.T, verb string) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	dir := t.TempDir()

	first := inOwnGroup(zklockCmd(t, addr, "-session-timeout", "2s", verb, path, "--", "sh", "-c", backgroundCMD, "sh", dir))
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := groupOf(t, pidIn(t, filepath.Join(dir, "child"), first))
	pidIn(t, filepath.Join(dir, "grandchild"), first)
	first.Process.Kill()
	first.Wait()

	snapshot := filepath.Join(dir, "snapshot")
	second := zklockCmd(t, addr, append([]string{verb, "-timeout", "60s", path, "--"}, append(snapshotCMD, snapshot)...)...)
	if got := status(t, second); got != 0 {
		t.Fatalf("second %s: exit status %d; stderr:\n%s", verb, got, stderr(second))
	}
	if live := liveMembers(readFile(t, snapshot), pgid); len(live) > 0 {
		t.Errorf("when the second zklock got %s, processes of the killed zklock's CMD group %d were alive: %+v", path, pgid, live)
	}
}

// TestRunForwardsSignalsOnce sends zklock each signal a user would send, one
// at a time: CMD must see each once, and zklock exit with CMD's status.
func TestRunForwardsSignalsOnce(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	dir := t.TempDir()
	sigs := []syscall.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM}
	names := map[syscall.Signal]string{syscall.SIGHUP: "HUP", syscall.SIGINT: "INT", syscall.SIGQUIT: "QUIT",
		syscall.SIGUSR1: "USR1", syscall.SIGUSR2: "USR2", syscall.SIGALRM: "ALRM", syscall.SIGTERM: "TERM"}
	var traps strings.Builder
	for _, sig := range sigs {
		fmt.Fprintf(&traps, "trap 'echo %s >> \"$1/seen\"' %[1]s\n", names[sig])
	}
	cmdSh := script(t, traps.String()+`trap 'echo TERM >> "$1/seen"; exit 3' TERM
echo $$ > "$1/child"
while :; do sleep 0.05; done
`)

	cmd := inOwnGroup(zklockCmd(t, addr, "run", lockPath(t), "--", cmdSh, dir))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := groupOf(t, pidIn(t, filepath.Join(dir, "child"), cmd))
	seen := filepath.Join(dir, "seen")
	var want strings.Builder
	for _, sig := range append(sigs, syscall.SIGTERM) {
		cmd.Process.Signal(sig)
		fmt.Fprintf(&want, "%s\n", names[sig])
		if sig != syscall.SIGTERM {
			waitFor(t, func() bool { b, _ := os.ReadFile(seen); return len(b) >= want.Len() },
				func() string { b, _ := os.ReadFile(seen); return fmt.Sprintf("after %v CMD saw %q", sig, b) })
		}
	}
	cmd.Wait()
	if got := cmd.ProcessState.ExitCode(); got != 3 {
		t.Errorf("exit status %d, want CMD's 3; stderr:\n%s", got, stderr(cmd))
	}
	if got := readFile(t, seen); got != want.String() {
		t.Errorf("CMD saw:\n%s\nwant each signal once:\n%s", got, want.String())
	}
	checkGroupGone(t, pgid, "after zklock exited")
}

// TestRunSIGHUPEndsCMDGroupFirst: SIGHUP to zklock (its terminal closed)
// goes to CMD's whole group, and zklock exits with CMD's status once the
// group is gone, having released the lock.
func TestRunSIGHUPEndsCMDGroupFirst(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	dir := t.TempDir()

	cmd := inOwnGroup(zklockCmd(t, addr, "run", path, "--", "sh", "-c", backgroundCMD, "sh", dir))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := groupOf(t, pidIn(t, filepath.Join(dir, "child"), cmd))
	pidIn(t, filepath.Join(dir, "grandchild"), cmd)
	cmd.Process.Signal(syscall.SIGHUP)
	cmd.Wait()
	checkGroupGone(t, pgid, "once zklock exited after SIGHUP")
	if got, want := cmd.ProcessState.ExitCode(), 128+int(syscall.SIGHUP); got != want {
		t.Errorf("exit status %d, want %d (CMD died of SIGHUP); stderr:\n%s", got, want, stderr(cmd))
	}
	if out := run(t, addr, 0, "holders", path); !strings.Contains(out, "no holder, no waiters") {
		t.Errorf("holders after zklock exited:\n%s", out)
	}
}

// TestRunSIGINTToGroupReachesCMDOnce: a terminal's Ctrl-C sends SIGINT to
// zklock's process group. CMD is not in it, so it gets SIGINT once, the one
// zklock forwards.
func TestRunSIGINTToGroupReachesCMDOnce(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	dir := t.TempDir()
	cmdSh := script(t, `trap 'echo INT >> "$1/seen"' INT
trap 'echo TERM >> "$1/seen"; exit 3' TERM
echo $$ > "$1/child"
while :; do sleep 0.05; done
`)
	cmd := inOwnGroup(zklockCmd(t, addr, "run", lockPath(t), "--", cmdSh, dir))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := groupOf(t, pidIn(t, filepath.Join(dir, "child"), cmd))
	// Two SIGINTs in a row may reach CMD as one, so counting alone could
	// miss the terminal's copy: that it cannot reach CMD is checked too.
	if pgid == cmd.Process.Pid {
		t.Errorf("CMD is in zklock's process group %d: a terminal's SIGINT reaches it besides the one zklock forwards", pgid)
	}
	signalGroup(t, cmd.Process.Pid, syscall.SIGINT)
	seen := filepath.Join(dir, "seen")
	waitFile(t, seen, cmd)
	// Then SIGTERM, which CMD exits on: any second SIGINT came before it.
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if got := cmd.ProcessState.ExitCode(); got != 3 {
		t.Errorf("exit status %d, want CMD's 3; stderr:\n%s", got, stderr(cmd))
	}
	if got := readFile(t, seen); got != "INT\nTERM\n" {
		t.Errorf("CMD saw %q, want one SIGINT, then SIGTERM", got)
	}
}

// TestRunCMDExitEndsItsGroupFirst: CMD exits (status 4), leaving two
// processes of its group in the background, one that exits on SIGTERM and
// one that ignores it. zklock must send SIGTERM, then SIGKILL after -grace,
// and release the lock only once both are gone: a second zklock waiting
// for the lock finds nothing of them.
func TestRunCMDExitEndsItsGroupFirst(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	dir := t.TempDir()
	cmdSh := script(t, `sh -c 'trap "echo TERM > \"$1/term\"; exit 0" TERM; echo $$ > "$1/polite"; while :; do sleep 0.05; done' sh "$1" &
sh -c 'trap "" TERM; echo $$ > "$1/stubborn"; while :; do sleep 0.05; done' sh "$1" &
until [ -s "$1/polite" ] && [ -s "$1/stubborn" ]; do sleep 0.01; done
echo $$ > "$1/child"
exit 4
`)
	first := inOwnGroup(zklockCmd(t, addr, "run", "-grace", "500ms", path, "--", cmdSh, dir))
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := groupOf(t, pidIn(t, filepath.Join(dir, "polite"), first))
	snapshot := filepath.Join(dir, "snapshot")
	second := zklockCmd(t, addr, append([]string{"run", "-timeout", "60s", path, "--"}, append(snapshotCMD, snapshot)...)...)
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}

	first.Wait()
	if got := first.ProcessState.ExitCode(); got != 4 {
		t.Errorf("exit status %d, want CMD's 4; stderr:\n%s", got, stderr(first))
	}
	if err := second.Wait(); err != nil {
		t.Fatalf("second run: %v; stderr:\n%s", err, stderr(second))
	}
	if live := liveMembers(readFile(t, snapshot), pgid); len(live) > 0 {
		t.Errorf("when the second zklock got the lock, processes of the first CMD's group %d were alive: %+v", pgid, live)
	}
	if got := readFile(t, filepath.Join(dir, "term")); got != "TERM\n" {
		t.Errorf("the background process that exits on SIGTERM wrote %q", got)
	}
	if !strings.Contains(stderr(first), "SIGKILL") {
		t.Errorf("stderr does not say the group got SIGKILL:\n%s", stderr(first))
	}
}

// TestRunGuardKilled: the process that watches CMD's group is killed with
// SIGKILL. zklock must kill the group itself, release the lock and fail.
func TestRunGuardKilled(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	dir := t.TempDir()
	cmd := inOwnGroup(zklockCmd(t, addr, "run", path, "--", "sh", "-c", backgroundCMD, "sh", dir))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child := pidIn(t, filepath.Join(dir, "child"), cmd)
	pgid := groupOf(t, child)
	pidIn(t, filepath.Join(dir, "grandchild"), cmd)
	p, _ := procOf(child)
	if p.ppid == cmd.Process.Pid {
		t.Fatalf("CMD %d is zklock's own child: no guard", child)
	}
	syscall.Kill(p.ppid, syscall.SIGKILL)
	cmd.Wait()
	checkGroupGone(t, pgid, "once zklock exited after its guard died")
	if got := cmd.ProcessState.ExitCode(); got != exitFailure {
		t.Errorf("exit status %d, want %d; stderr:\n%s", got, exitFailure, stderr(cmd))
	}
	if !strings.Contains(stderr(cmd), "died") {
		t.Errorf("stderr does not say the guard died:\n%s", stderr(cmd))
	}
	if out := run(t, addr, 0, "holders", path); !strings.Contains(out, "no holder, no waiters") {
		t.Errorf("holders after zklock exited:\n%s", out)
	}
}

// TestRunDoesNotStopOnSIGTSTP: zklock must keep its session alive while CMD
// runs, so a terminal's Ctrl-Z, which reaches zklock's group and not CMD's,
// does not stop it: a SIGTERM after the SIGTSTP is forwarded at once.
func TestRunDoesNotStopOnSIGTSTP(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	held := filepath.Join(t.TempDir(), "held")
	cmd := zklockCmd(t, addr, "run", lockPath(t), "--", "sh", "-c", `touch "$1"; exec sleep 300`, "sh", held)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, held, cmd)
	cmd.Process.Signal(syscall.SIGTSTP)
	cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		p, _ := procOf(cmd.Process.Pid)
		cmd.Process.Kill()
		<-exited
		t.Fatalf("zklock did not exit 30s after SIGTSTP and SIGTERM (state %c)", p.state)
	}
	if got, want := cmd.ProcessState.ExitCode(), 128+int(syscall.SIGTERM); got != want {
		t.Errorf("exit status %d, want %d; stderr:\n%s", got, want, stderr(cmd))
	}
}

// TestRunKeepsIgnoredSignalsIgnored: started with SIGHUP ignored (nohup),
// zklock neither dies of it nor forwards it, and CMD inherits it ignored.
func TestRunKeepsIgnoredSignalsIgnored(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	dir := t.TempDir()
	// The shell's trap '' leaves SIGHUP ignored in what it execs.
	cmd := inOwnGroup(zklockCmd(t, addr))
	cmd.Args = []string{"sh", "-c", `trap '' HUP; exec "$@"`, "sh", binary(t), "-zk", addr, "run", lockPath(t), "--",
		"sh", "-c", `echo $$ > "$1/child"; exec sleep 300`, "sh", dir}
	cmd.Path = "/bin/sh"
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child := pidIn(t, filepath.Join(dir, "child"), cmd)
	pgid := groupOf(t, child)
	signalGroup(t, pgid, syscall.SIGHUP)
	cmd.Process.Signal(syscall.SIGHUP)
	// Then SIGTERM, which CMD dies of; had SIGHUP not been ignored, it
	// would have killed CMD or zklock first.
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if got, want := cmd.ProcessState.ExitCode(), 128+int(syscall.SIGTERM); got != want {
		t.Errorf("exit status %d, want %d: zklock or CMD died of SIGHUP; stderr:\n%s", got, want, stderr(cmd))
	}
}

// TestRunInProcess runs `zklock run` in this process, with a CMD that
// leaves a process behind: the tool must end it, exit with CMD's status,
// and leave no goroutine behind.
func TestRunInProcess(t *testing.T) {
	addr := zktest.Start(t).Addr()
	defer goleak.VerifyNone(t)
	// Files, as a real zklock has: CMD writes to them, and so does zklock.
	dir := t.TempDir()
	outFile, err1 := os.Create(filepath.Join(dir, "stdout"))
	errFile, err2 := os.Create(filepath.Join(dir, "stderr"))
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	defer outFile.Close()
	defer errFile.Close()
	code := realMain([]string{"-zk", addr, "run", "-grace", "100ms", lockPath(t), "--",
		"sh", "-c", `trap "" TERM; sh -c 'trap "" TERM; sleep 300' & echo started; exit 5`}, outFile, errFile)
	out, errs := readFile(t, outFile.Name()), readFile(t, errFile.Name())
	if code != 5 || out != "started\n" {
		t.Fatalf("exit status %d, stdout %q; want 5, %q; stderr:\n%s", code, out, "started\n", errs)
	}
	if !strings.Contains(errs, "SIGKILL") {
		t.Errorf("stderr does not say the process left behind got SIGKILL:\n%s", errs)
	}
}

// TestRunStoppedTakesCMDGroupAlong: `zklock run` stopped with SIGSTOP (a
// frozen VM, a debugger). Nothing closes its files, yet its session runs
// out and the lock passes to a second zklock: by then nothing of the first
// CMD's group may be alive. The guard ends the group by the deadlines
// zklock stopped telling it.
func TestRunStoppedTakesCMDGroupAlong(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	dir := t.TempDir()

	first := inOwnGroup(zklockCmd(t, addr, "-session-timeout", "2s", "run", path, "--", "sh", "-c", backgroundCMD, "sh", dir))
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := groupOf(t, pidIn(t, filepath.Join(dir, "child"), first))
	pidIn(t, filepath.Join(dir, "grandchild"), first)
	if err := first.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.Process.Signal(syscall.SIGCONT) })

	snapshot := filepath.Join(dir, "snapshot")
	second := zklockCmd(t, addr, append([]string{"run", "-timeout", "60s", path, "--"}, append(snapshotCMD, snapshot)...)...)
	if got := status(t, second); got != 0 {
		t.Fatalf("second run: exit status %d; stderr:\n%s", got, stderr(second))
	}
	if live := liveMembers(readFile(t, snapshot), pgid); len(live) > 0 {
		t.Errorf("when the second zklock got %s, processes of the stopped zklock's CMD group %d were alive: %+v", path, pgid, live)
	}
	first.Process.Signal(syscall.SIGCONT)
	if err := first.Wait(); err == nil {
		t.Errorf("the stopped zklock, resumed after its lock passed on, exited 0; stderr:\n%s", stderr(first))
	}
}

// TestRunGraceEndsBeforeExpiry: zklock's session is lost (its server is
// gone), and CMD ignores SIGTERM. A -grace longer than what is left before
// the ensemble could expire the session must not keep CMD running past it:
// SIGKILL comes first.
func TestRunGraceEndsBeforeExpiry(t *testing.T) {
	t.Parallel()
	srv := zktest.StartPrivate(t)
	dir := t.TempDir()
	cmdSh := script(t, `trap '' TERM
echo $$ > "$1/child"
while :; do sleep 0.05; done
`)
	cmd := inOwnGroup(zklockCmd(t, srv.Addr(), "-session-timeout", "2s", "run", "-grace", "30s", lockPath(t), "--", cmdSh, dir))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := groupOf(t, pidIn(t, filepath.Join(dir, "child"), cmd))
	cut := time.Now()
	srv.Stop()
	cmd.Wait()
	took := time.Since(cut)
	checkGroupGone(t, pgid, "once zklock exited")
	if got := cmd.ProcessState.ExitCode(); got != exitLost {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", got, exitLost, stderr(cmd))
	}
	// The session is given up within 1.6 s of its last proof, and could be
	// expired 0.4 s later: CMD must be gone by then, not 30 s after.
	if took > 10*time.Second {
		t.Errorf("CMD ran %v after zklock's server went away (-grace 30s); stderr:\n%s", took, stderr(cmd))
	}
	// SIGKILL comes from zklock's own timer or from its guard's, whichever
	// fires first: both are set before the session could expire.
}
