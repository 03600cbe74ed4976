package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// The tests run the zklock binary, built once per test binary, against a
// real ZooKeeper from zktest.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary returns the path of the zklock binary, built on first use into a
// directory that TestMain removes (a test's TempDir would vanish with the
// first test, and building once saves a link per test).
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	// A test that runs realMain's run, lead or queue take in this process
	// starts this binary as the guard of CMD: it must act as one, not run
	// the tests again.
	if os.Getenv(guardEnv) != "" {
		os.Exit(guardMain())
	}
	dir, err := os.MkdirTemp("", "zklock-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "zklock")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// lockPath is a lock path of the test's own on the shared server.
func lockPath(t *testing.T) string {
	return fmt.Sprintf("/zklock-cmd-test/%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UnixNano())
}

// zklockCmd returns the binary's command against server addr. It is killed
// when the test ends, if still running.
func zklockCmd(t *testing.T, addr string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"-zk", addr}, args...)...)
	cmd.Stdout, cmd.Stderr = new(bytes.Buffer), new(bytes.Buffer)
	// What zklock leaves running (the bug some tests look for) may hold its
	// stdout and stderr open: Wait must not wait for it.
	cmd.WaitDelay = 5 * time.Second
	t.Cleanup(func() {
		if cmd.Process != nil && cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd
}

// status runs cmd to completion and returns its exit status.
func status(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	return cmd.ProcessState.ExitCode()
}

func stdout(cmd *exec.Cmd) string { return cmd.Stdout.(*bytes.Buffer).String() }
func stderr(cmd *exec.Cmd) string { return cmd.Stderr.(*bytes.Buffer).String() }

// waitFile waits until a file exists: the sign that a CMD holds the lock.
func waitFile(t *testing.T, name string, cmd *exec.Cmd) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(name); err == nil {
			return
		}
	}
	t.Fatalf("%s not created; zklock stderr:\n%s", name, stderr(cmd))
}

func TestRunPropagatesExitStatusAndToken(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	tokenFile := filepath.Join(t.TempDir(), "token")

	cmd := zklockCmd(t, addr, "run", path, "--", "sh", "-c", `printf %s "$ZKLOCK_TOKEN" > "$1"; exit 3`, "sh", tokenFile)
	if got := status(t, cmd); got != 3 {
		t.Fatalf("exit status %d, want 3; stderr:\n%s", got, stderr(cmd))
	}
	b, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if token, err := strconv.ParseInt(string(b), 10, 64); err != nil || token <= 0 {
		t.Fatalf("ZKLOCK_TOKEN = %q, want a positive integer", b)
	}

	for _, tc := range []struct {
		argv []string
		want int
	}{
		{[]string{"sh", "-c", "kill -KILL $$"}, 128 + 9},
		{[]string{"true"}, 0},
		{[]string{"no-such-command-zklock-test"}, exitNotFound},
	} {
		cmd := zklockCmd(t, addr, append([]string{"run", path, "--"}, tc.argv...)...)
		if got := status(t, cmd); got != tc.want {
			t.Errorf("%v: exit status %d, want %d; stderr:\n%s", tc.argv, got, tc.want, stderr(cmd))
		}
	}
}

func TestRunIsMutuallyExclusive(t *testing.T) { testExclusive(t, "run") }

// TestLeadIsMutuallyExclusive: CMDs of contenders in one election never
// overlap, and terms increase.
func TestLeadIsMutuallyExclusive(t *testing.T) { testExclusive(t, "lead") }

// testExclusive starts three `zklock sub` on one path, whose CMDs must run
// one after another with increasing tokens.
func testExclusive(t *testing.T, sub string) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	log := filepath.Join(t.TempDir(), "log")
	const n = 3

	cmds := make([]*exec.Cmd, n)
	for i := range cmds {
		cmds[i] = zklockCmd(t, addr, sub, path, "--", "sh", "-c",
			`echo "start $ZKLOCK_TOKEN" >> "$1"; sleep 0.3; echo "end $ZKLOCK_TOKEN" >> "$1"`, "sh", log)
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%v; stderr:\n%s", err, stderr(cmd))
		}
	}

	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2*n {
		t.Fatalf("log has %d lines, want %d:\n%s", len(lines), 2*n, b)
	}
	var last int64
	for i := 0; i < len(lines); i += 2 {
		var start, end int64
		if _, err := fmt.Sscanf(lines[i], "start %d", &start); err != nil {
			t.Fatalf("line %d: %q, want start: interleaved?\n%s", i+1, lines[i], b)
		}
		if _, err := fmt.Sscanf(lines[i+1], "end %d", &end); err != nil || end != start {
			t.Fatalf("line %d: %q, want end %d: interleaved?\n%s", i+2, lines[i+1], start, b)
		}
		if start <= last {
			t.Fatalf("token %d after %d: tokens must increase\n%s", start, last, b)
		}
		last = start
	}
}

func TestRunTimeoutAndHolders(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	held := filepath.Join(t.TempDir(), "held")

	holder := zklockCmd(t, addr, "run", "-data", "the holder", path, "--", "sh", "-c", `touch "$1"; exec sleep 30`, "sh", held)
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, held, holder)

	timedOut := zklockCmd(t, addr, "run", "-timeout", "200ms", path, "--", "true")
	if got := status(t, timedOut); got != exitTimeout {
		t.Fatalf("run -timeout: exit status %d, want %d; stderr:\n%s", got, exitTimeout, stderr(timedOut))
	}

	waiter := zklockCmd(t, addr, "run", "-data", "a waiter", path, "--", "true")
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`(?s)^ROLE.*\nholder +` + regexp.QuoteMeta(path) + `/\S+ +0x[0-9a-f]+ +\d+ +the holder\n` +
		`waiter 1 +` + regexp.QuoteMeta(path) + `/\S+ +0x[0-9a-f]+ +\d+ +a waiter\n$`)
	var out string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		holders := zklockCmd(t, addr, "holders", path)
		if got := status(t, holders); got != 0 {
			t.Fatalf("holders: exit status %d; stderr:\n%s", got, stderr(holders))
		}
		if out = stdout(holders); want.MatchString(out) {
			break
		}
	}
	if !want.MatchString(out) {
		t.Fatalf("holders printed:\n%s\nwant a match for %s", out, want)
	}

	// SIGTERM to zklock is forwarded to CMD (sleep dies of it); then the
	// lock goes to the waiter.
	holder.Process.Signal(syscall.SIGTERM)
	holder.Wait()
	if got := holder.ProcessState.ExitCode(); got != 128+int(syscall.SIGTERM) {
		t.Errorf("holder: exit status %d after SIGTERM, want %d; stderr:\n%s", got, 128+int(syscall.SIGTERM), stderr(holder))
	}
	if err := waiter.Wait(); err != nil {
		t.Fatalf("waiter: %v; stderr:\n%s", err, stderr(waiter))
	}
	// The lock's directory, a container, is removed by the server once empty
	// (if its periodic check comes in the meantime): either answer is right.
	holders := zklockCmd(t, addr, "holders", path)
	switch code := status(t, holders); {
	case code == 0 && strings.Contains(stdout(holders), "no holder, no waiters"):
	case code == exitNoPath && strings.Contains(stderr(holders), "does not exist"):
	default:
		t.Errorf("holders after both ran: status %d\n%s%s", code, stdout(holders), stderr(holders))
	}
}

// TestRunLeaseLost deletes the holder's node from another session: zklock
// must stop CMD (SIGTERM, then SIGKILL as CMD ignores SIGTERM) and exit 75.
func TestRunLeaseLost(t *testing.T) {
	testLossStopsCMD(t, "run", nil, func(ctx context.Context, s *zkrecipes.Session, path string) (string, error) {
		m, err := zklock.NewMutex(s, path)
		if err != nil {
			return "", err
		}
		cs, err := m.Contenders(ctx)
		if err != nil || len(cs) != 1 {
			return "", fmt.Errorf("contenders %v, %v; want the one holder", cs, err)
		}
		return cs[0].Path, nil
	}, "lost the lock on ", "deleted by another client")
}

// testLossStopsCMD starts `zklock VERB PATH -- CMD` (VERB may be two words,
// as "queue take") with a CMD that ignores SIGTERM and has started a
// grandchild that exits on SIGTERM, deletes the node that node finds from
// another session, and checks that zklock stops CMD's whole process group
// (SIGTERM, which the grandchild gets, then SIGKILL), exits 75 once the
// group is gone, and says why: stderr must contain want[0]+PATH and the
// rest of want. prepare, if not nil, runs first.
func testLossStopsCMD(t *testing.T, verb string, prepare func(addr, path string), node func(context.Context, *zkrecipes.Session, string) (string, error), want ...string) {
	addr := zktest.Start(t).Addr()
	defer goleak.VerifyNone(t)
	path := lockPath(t)
	dir := t.TempDir()
	if prepare != nil {
		prepare(addr, path)
	}

	cmdSh := script(t, `sh -c 'trap "echo TERM > \"$1/term\"; exit 0" TERM; echo $$ > "$1/grandchild"; while :; do sleep 0.1; done' sh "$1" &
trap "" TERM
until [ -s "$1/grandchild" ]; do sleep 0.01; done
echo $$ > "$1/child"
while :; do sleep 0.1; done
`)
	cmd := inOwnGroup(zklockCmd(t, addr, append(strings.Fields(verb), "-grace", "2s", path, "--", cmdSh, dir)...))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := groupOf(t, pidIn(t, filepath.Join(dir, "child"), cmd))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := zkrecipes.Connect(ctx, []string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, err := node(ctx, s, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Conn().Delete(p, -1); err != nil {
		t.Fatal(err)
	}

	begin := time.Now()
	err = cmd.Wait()
	t.Logf("zklock stderr:\n%s", stderr(cmd))
	checkGroupGone(t, pgid, "once zklock exited")
	if got := cmd.ProcessState.ExitCode(); got != exitLost {
		t.Fatalf("exit status %d (%v), want %d; stderr:\n%s", got, err, exitLost, stderr(cmd))
	}
	if took := time.Since(begin); took > 10*time.Second {
		t.Errorf("zklock took %v to stop CMD", took)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "term")); string(b) != "TERM\n" {
		t.Errorf("CMD's grandchild did not get SIGTERM (it wrote %q)", b)
	}
	want[0] += path
	for _, w := range append(want, "SIGTERM", "SIGKILL") {
		if !strings.Contains(stderr(cmd), w) {
			t.Errorf("stderr does not mention %q:\n%s", w, stderr(cmd))
		}
	}
}

func TestLeadPropagatesExitStatusAndToken(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	tokenFile := filepath.Join(t.TempDir(), "token")

	cmd := zklockCmd(t, addr, "lead", path, "--", "sh", "-c", `printf %s "$ZKLOCK_TOKEN" > "$1"; exit 3`, "sh", tokenFile)
	if got := status(t, cmd); got != 3 {
		t.Fatalf("exit status %d, want 3; stderr:\n%s", got, stderr(cmd))
	}
	b, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	first, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || first <= 0 {
		t.Fatalf("ZKLOCK_TOKEN = %q, want a positive integer", b)
	}

	// The first leader resigned: the next is elected at once, with a later term.
	cmd = zklockCmd(t, addr, "lead", "-timeout", "20s", path, "--", "sh", "-c", `printf %s "$ZKLOCK_TOKEN" > "$1"`, "sh", tokenFile)
	if got := status(t, cmd); got != 0 {
		t.Fatalf("second lead: exit status %d, want 0; stderr:\n%s", got, stderr(cmd))
	}
	if b, err = os.ReadFile(tokenFile); err != nil {
		t.Fatal(err)
	}
	if second, err := strconv.ParseInt(string(b), 10, 64); err != nil || second <= first {
		t.Fatalf("second term %q, want an integer above %d", b, first)
	}

	for _, tc := range []struct {
		argv []string
		want int
	}{
		{[]string{"sh", "-c", "kill -KILL $$"}, 128 + 9},
		{[]string{"false"}, 1},
		{[]string{"no-such-command-zklock-test"}, exitNotFound},
	} {
		cmd := zklockCmd(t, addr, append([]string{"lead", path, "--"}, tc.argv...)...)
		if got := status(t, cmd); got != tc.want {
			t.Errorf("%v: exit status %d, want %d; stderr:\n%s", tc.argv, got, tc.want, stderr(cmd))
		}
	}
}

// leaderOf runs `zklock leader path` and returns its status and stdout
// (stderr when the path does not exist).
func leaderOf(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	cmd := zklockCmd(t, addr, "leader", path)
	code := status(t, cmd)
	switch code {
	case 0, exitNoLeader:
		return code, stdout(cmd)
	case exitNoPath:
		return code, stderr(cmd)
	}
	t.Fatalf("leader: exit status %d; stderr:\n%s", code, stderr(cmd))
	return code, ""
}

func TestLeadTimeoutAndLeader(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	tokenFile := filepath.Join(t.TempDir(), "token")

	if code, out := leaderOf(t, addr, path); code != exitNoPath || out != "zklock: leader: "+path+" does not exist\n" {
		t.Fatalf("leader before any campaign: status %d, output %q; want %d, \"does not exist\"", code, out, exitNoPath)
	}

	lead := zklockCmd(t, addr, "lead", "-value", "the leader", path, "--",
		"sh", "-c", `printf %s "$ZKLOCK_TOKEN" > "$1.tmp"; mv "$1.tmp" "$1"; exec sleep 30`, "sh", tokenFile)
	if err := lead.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, tokenFile, lead)
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}

	code, out := leaderOf(t, addr, path)
	want := regexp.MustCompile(`^NODE +SESSION +TOKEN +VALUE\n` + regexp.QuoteMeta(path) + `/\S+-elect-\d+ +0x[0-9a-f]+ +` +
		regexp.QuoteMeta(string(token)) + ` +the leader\n$`)
	if code != 0 || !want.MatchString(out) {
		t.Fatalf("leader: status %d, printed:\n%s\nwant status 0 and a match for %s", code, out, want)
	}

	timedOut := zklockCmd(t, addr, "lead", "-timeout", "200ms", path, "--", "true")
	if got := status(t, timedOut); got != exitTimeout {
		t.Fatalf("lead -timeout: exit status %d, want %d; stderr:\n%s", got, exitTimeout, stderr(timedOut))
	}
	if code, out := leaderOf(t, addr, path); code != 0 || !want.MatchString(out) {
		t.Fatalf("leader after a timed-out campaign: status %d, printed:\n%s", code, out)
	}

	// SIGTERM is forwarded to CMD; then zklock resigns.
	lead.Process.Signal(syscall.SIGTERM)
	lead.Wait()
	if got := lead.ProcessState.ExitCode(); got != 128+int(syscall.SIGTERM) {
		t.Errorf("lead: exit status %d after SIGTERM, want %d; stderr:\n%s", got, 128+int(syscall.SIGTERM), stderr(lead))
	}
	// The election's directory, a container, is removed by the server once
	// empty (if its periodic check comes in the meantime): either answer
	// is right.
	if code, out := leaderOf(t, addr, path); !(code == exitNoLeader && strings.Contains(out, "no leader") || code == exitNoPath) {
		t.Fatalf("leader after resigning: status %d, output %q; want %d, \"no leader\"", code, out, exitNoLeader)
	}
}

// TestLeadLost deletes the leader's node from another session: zklock must
// stop CMD (SIGTERM, then SIGKILL as CMD ignores SIGTERM) and exit 75.
func TestLeadLost(t *testing.T) {
	testLossStopsCMD(t, "lead", nil, func(ctx context.Context, s *zkrecipes.Session, path string) (string, error) {
		el, err := zklock.NewElection(s, path)
		if err != nil {
			return "", err
		}
		l, err := el.Leader(ctx)
		return l.Path, err
	}, "lost leadership of ")
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string // in stderr
	}{
		{nil, "no command given"},
		{[]string{"frob"}, `unknown command "frob"`},
		{[]string{"-nosuchflag", "run"}, "flag provided but not defined"},
		{[]string{"run"}, "missing PATH"},
		{[]string{"run", "relative", "--", "true"}, "must be absolute"},
		{[]string{"run", "/a/"}, "must not end with '/'"},
		{[]string{"run", "/a", "true"}, "missing -- between PATH and CMD"},
		{[]string{"run", "/a", "--"}, "missing CMD"},
		{[]string{"run", "/a", "-timeout", "1s", "--", "true"}, "flags go before PATH"},
		{[]string{"run", "-timeout", "-1s", "/a", "--", "true"}, "-timeout must not be negative"},
		{[]string{"run", "-timeout", "soon", "/a", "--", "true"}, "invalid value"},
		{[]string{"-zk", " ", "run", "/a", "--", "true"}, "no ZooKeeper server"},
		{[]string{"-zk", "127.0.0.1:abc", "holders", "/a"}, `"127.0.0.1:abc"`},
		{[]string{"-zk", "127.0.0.1:2181/app,127.0.0.1:2182", "holders", "/a"}, "may only follow the last address"},
		{[]string{"-zk", "127.0.0.1:2181/app/", "holders", "/a"}, "chroot"},
		{[]string{"holders"}, "want one PATH"},
		{[]string{"holders", "/zookeeper/x"}, "reserved"},
		{[]string{"lead"}, "lead: missing PATH"},
		{[]string{"lead", "relative", "--", "true"}, "must be absolute"},
		{[]string{"lead", "/a", "true"}, "missing -- between PATH and CMD"},
		{[]string{"lead", "/a", "--"}, "missing CMD"},
		{[]string{"lead", "/a", "-value", "x", "--", "true"}, "flags go before PATH"},
		{[]string{"lead", "-timeout", "-1s", "/a", "--", "true"}, "lead: -timeout must not be negative"},
		{[]string{"lead", "-grace", "-1s", "/a", "--", "true"}, "lead: -grace must not be negative"},
		{[]string{"lead", "-data", "x", "/a", "--", "true"}, "flag provided but not defined"},
		{[]string{"leader"}, "leader: want one PATH"},
		{[]string{"leader", "/a", "/b"}, "leader: want one PATH"},
		{[]string{"leader", "/zookeeper/x"}, "reserved"},
		{[]string{"leader", "-timeout", "1s", "/a"}, "flag provided but not defined"},
		{[]string{"demo", "-workers", "0"}, "-workers must be at least 1"},
		{[]string{"demo", "-consumers", "0"}, "-consumers must be at least 1"},
		{[]string{"demo", "-hold", "-1s"}, "-hold must not be negative"},
		{[]string{"demo", "-path", "/a/"}, "must not end with '/'"},
		{[]string{"demo", "extra"}, `unexpected argument "extra"`},
		{[]string{"-json", "run", "/a", "--", "true"}, "-json: run prints no listing"},
		{[]string{"lead", "-json", "/a", "--", "true"}, "-json: lead prints no listing"},
		{[]string{"-json", "demo"}, "-json: demo prints no listing"},
		{[]string{"queue"}, "queue: missing subcommand"},
		{[]string{"queue", "frob", "/q"}, `queue: unknown subcommand "frob"`},
		{[]string{"queue", "-nosuchflag", "ls", "/q"}, "flag provided but not defined"},
		{[]string{"queue", "put"}, "queue put: missing PATH"},
		{[]string{"queue", "put", "relative", "x"}, "must be absolute"},
		{[]string{"queue", "put", "-key", "k", "/q", "a", "b"}, "-key is for one item, got 2"},
		{[]string{"queue", "put", "-delay", "-1s", "/q", "a"}, "-delay must not be negative"},
		{[]string{"queue", "take"}, "queue take: missing PATH"},
		{[]string{"queue", "take", "/q"}, "missing -- and CMD"},
		{[]string{"queue", "take", "/q", "--"}, "missing CMD"},
		{[]string{"queue", "take", "/q", "-once", "--", "true"}, "flags go before PATH"},
		{[]string{"queue", "take", "-max-attempts", "-1", "/q", "--", "true"}, "-max-attempts must not be negative"},
		{[]string{"queue", "take", "-timeout", "-1s", "/q", "--", "true"}, "-timeout must not be negative"},
		{[]string{"queue", "take", "-json", "/q", "--", "true"}, "-json: queue take prints no listing"},
		{[]string{"queue", "ls"}, "queue ls: missing PATH"},
		{[]string{"queue", "ls", "/q", "/r"}, "queue ls: want one PATH"},
		{[]string{"queue", "dead", "/zookeeper/q"}, "reserved"},
		{[]string{"queue", "requeue", "/q"}, "missing ID"},
		{[]string{"watch"}, "watch: want one PATH"},
		{[]string{"watch", "/a", "/b"}, "watch: want one PATH"},
		{[]string{"watch", "a"}, "must be absolute"},
		{[]string{"watch", "-timeout", "1s", "/a"}, "flag provided but not defined"},
		{[]string{"queue", "take", "-backoff", "2s", "-max-backoff", "1s", "/q", "--", "true"}, "-max-backoff 1s is less than -backoff 2s"},
		{[]string{"-client-cert", "c.pem", "holders", "/a"}, "-client-cert and -client-key go together"},
		{[]string{"holders", "-client-key", "k.pem", "/a"}, "-client-cert and -client-key go together"},
		{[]string{"-ca-file", "/nonexistent/ca.pem", "holders", "/a"}, "-ca-file: open /nonexistent/ca.pem"},
		{[]string{"-ca-file", os.DevNull, "holders", "/a"}, "-ca-file: no PEM certificate in " + os.DevNull},
		{[]string{"-client-cert", os.DevNull, "-client-key", os.DevNull, "holders", "/a"}, "-client-cert, -client-key:"},
		{[]string{"-auth", "alice", "holders", "/a"}, "-auth: want USER:PASSWORD"},
		{[]string{"queue", "ls", "-auth", ":secret", "/q"}, "-auth: want USER:PASSWORD"},
		{[]string{"help", "frob"}, `unknown command "frob"`},
		{[]string{"help", "run", "extra"}, "help: want a COMMAND"},
		{[]string{"-version", "extra"}, "-version takes no arguments"},
	} {
		// No server is needed: bad input is refused before connecting.
		cmd := exec.Command(binary(t), tc.args...)
		cmd.Env = append(os.Environ(), "ZK_CONNECT=127.0.0.1:1")
		var errs bytes.Buffer
		cmd.Stderr = &errs
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitUsage {
			t.Errorf("zklock %q: %v, want exit status %d", tc.args, err, exitUsage)
		}
		if !strings.Contains(errs.String(), tc.want) {
			t.Errorf("zklock %q: stderr does not mention %q:\n%s", tc.args, tc.want, &errs)
		}
	}
}

// TestRunSemaphore: `run -n 2`: two CMDs run at once, the third waits for
// one of them to end, and `holders` shows two holders and a waiter.
func TestRunSemaphore(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	dir := t.TempDir()
	// Each CMD says it runs, then waits until told to stop.
	cmdSh := script(t, `touch "$1/run-$2"; until [ -e "$1/stop-$2" ]; do sleep 0.02; done`)
	var cmds []*exec.Cmd
	for i := range 3 {
		cmd := zklockCmd(t, addr, "run", "-n", "2", path, "--", cmdSh, dir, strconv.Itoa(i))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
		if i < 2 {
			waitFile(t, filepath.Join(dir, fmt.Sprintf("run-%d", i)), cmd)
		}
	}
	hold := func() string {
		out, err := exec.Command(binary(t), "-zk", addr, "holders", path).CombinedOutput()
		if err != nil {
			t.Fatalf("holders: %v\n%s", err, out)
		}
		return string(out)
	}
	waitFor(t, func() bool { h := hold(); return strings.Count(h, "holder ") == 2 && strings.Count(h, "waiter ") == 1 },
		func() string { return "holders:\n" + hold() })
	if _, err := os.Stat(filepath.Join(dir, "run-2")); err == nil {
		t.Fatalf("a third CMD runs while two hold the semaphore's 2 permits")
	}
	if err := os.WriteFile(filepath.Join(dir, "stop-0"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(dir, "run-2"), cmds[2])
	for i := range 3 {
		if i > 0 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("stop-%d", i)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := cmds[i].Wait(); err != nil {
			t.Errorf("run %d: %v; stderr:\n%s", i, err, stderr(cmds[i]))
		}
	}
	if code := status(t, zklockCmd(t, addr, "run", "-n", "0", path, "--", "true")); code != 0 {
		t.Errorf("run -n 0 (the lock): exit status %d", code)
	}
	if code := status(t, zklockCmd(t, addr, "run", "-n", "-1", path, "--", "true")); code != exitUsage {
		t.Errorf("run -n -1: exit status %d, want %d", code, exitUsage)
	}
}
