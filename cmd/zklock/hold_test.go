package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zkrecipes/zkrecipes/zktest"
)

// By default the node stores the host and zklock's pid, never CMD's
// arguments: holders shows it to anyone who may read the path.
func TestRunStoresHostAndPidOnly(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	for _, verb := range []string{"run", "lead"} {
		path := lockPath(t)
		held := filepath.Join(t.TempDir(), "held")
		cmd := zklockCmd(t, addr, verb, path, "--", "sh", "-c", `touch "$1"; exec sleep 30`, "sh", held, "--password=hunter2")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitFile(t, held, cmd)
		var hs jsonHolders
		runJSON(t, addr, &hs, "holders", "-json", path)
		host, _ := os.Hostname()
		want := host + " pid " + strconv.Itoa(cmd.Process.Pid)
		if len(hs.Contenders) != 1 || deref(hs.Contenders[0].Data) != want {
			t.Errorf("%s: holders -json: %+v; want one contender with data %q", verb, hs.Contenders, want)
		}
		if out := run(t, addr, 0, "holders", path); strings.Contains(out, "hunter2") || strings.Contains(out, "sleep") {
			t.Errorf("%s: holders shows CMD's arguments:\n%s", verb, out)
		}
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}
}

// CMD finds in its environment the path it runs under, the node that
// holds it, the token and the session's id: the same that holders shows.
func TestCMDEnvironment(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	for _, verb := range []string{"run", "run -n 2", "lead"} {
		path := lockPath(t)
		env := filepath.Join(t.TempDir(), "env")
		args := append(strings.Fields(verb), path, "--", "sh", "-c", `env > "$1.tmp"; mv "$1.tmp" "$1"; exec sleep 30`, "sh", env)
		cmd := zklockCmd(t, addr, args...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitFile(t, env, cmd)
		vars := environ(t, env)
		var hs jsonHolders
		runJSON(t, addr, &hs, "holders", "-json", path)
		if len(hs.Contenders) != 1 {
			t.Fatalf("%s: holders -json: %+v, want one contender", verb, hs)
		}
		h := hs.Contenders[0]
		for name, want := range map[string]string{
			"ZKLOCK_PATH":    path,
			"ZKLOCK_NODE":    h.Path,
			"ZKLOCK_TOKEN":   strconv.FormatInt(h.Token, 10),
			"ZKLOCK_SESSION": h.Session,
		} {
			if vars[name] != want {
				t.Errorf("%s: %s=%q, want %q", verb, name, vars[name], want)
			}
		}
		if _, ok := vars[guardEnv]; ok {
			t.Errorf("%s: CMD's environment has %s", verb, guardEnv)
		}
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}

	// queue take: the queue's path, the item, the session.
	path := lockPath(t)
	env := filepath.Join(t.TempDir(), "env")
	run(t, addr, 0, "queue", "put", path, "job")
	run(t, addr, 0, "queue", "take", "-once", path, "--", "sh", "-c", `env > "$1"`, "sh", env)
	vars := environ(t, env)
	if vars["ZKLOCK_PATH"] != path || vars["ZKLOCK_JOB_ATTEMPT"] != "1" || vars["ZKLOCK_JOB_ID"] == "" ||
		!regexp.MustCompile(`^0x[0-9a-f]+$`).MatchString(vars["ZKLOCK_SESSION"]) {
		t.Errorf("queue take: CMD's environment: %v", vars)
	}
}

// environ reads a file written by env(1).
func environ(t *testing.T, name string) map[string]string {
	t.Helper()
	vars := make(map[string]string)
	for line := range strings.Lines(readFile(t, name)) {
		if k, v, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "="); ok {
			vars[k] = v
		}
	}
	return vars
}

// `run PATH` with no CMD holds the lock until interrupted, as etcdctl lock
// does, and prints the node and the token; so does `lead PATH`.
func TestHoldWithoutCMD(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	for _, verb := range []string{"run", "lead"} {
		path := lockPath(t)
		out := filepath.Join(t.TempDir(), "out")
		f, err := os.Create(out)
		if err != nil {
			t.Fatal(err)
		}
		cmd := zklockCmd(t, addr, verb, path)
		cmd.Stdout = f
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		var line string
		waitFor(t, func() bool { line = readFile(t, out); return strings.HasSuffix(line, "\n") },
			func() string { return verb + " printed nothing; stderr:\n" + stderr(cmd) })
		var hs jsonHolders
		runJSON(t, addr, &hs, "holders", "-json", path)
		if len(hs.Contenders) != 1 || line != hs.Contenders[0].Path+" "+strconv.FormatInt(hs.Contenders[0].Token, 10)+"\n" {
			t.Fatalf("%s printed %q; holders: %+v", verb, line, hs.Contenders)
		}
		other := zklockCmd(t, addr, verb, "-timeout", "300ms", path, "--", "true")
		if got := status(t, other); got != exitTimeout {
			t.Errorf("%s -timeout while %s PATH holds: status %d, want %d", verb, verb, got, exitTimeout)
		}
		begin := time.Now()
		cmd.Process.Signal(syscall.SIGINT)
		if err := cmd.Wait(); err != nil {
			t.Errorf("%s after SIGINT: %v; stderr:\n%s", verb, err, stderr(cmd))
		}
		if took := time.Since(begin); took > 5*time.Second {
			t.Errorf("%s took %v to release after SIGINT", verb, took)
		}
		if got := status(t, zklockCmd(t, addr, verb, "-timeout", "10s", path, "--", "true")); got != 0 {
			t.Errorf("%s after the release: status %d, want 0", verb, got)
		}
	}
}

// `run PATH` without CMD that loses the lock exits 75 and says why, in one
// line, as with CMD.
func TestHoldWithoutCMDLost(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	out := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	cmd := zklockCmd(t, addr, "run", path)
	cmd.Stdout = f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var line string
	waitFor(t, func() bool { line = readFile(t, out); return strings.HasSuffix(line, "\n") },
		func() string { return "run printed nothing; stderr:\n" + stderr(cmd) })
	node, _, _ := strings.Cut(line, " ")
	s := zktest.Connect(t, []string{addr})
	if err := s.Conn().Delete(node, -1); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	code := cmd.ProcessState.ExitCode()
	if code != exitLost || strings.Count(stderr(cmd), "\n") != 1 ||
		!strings.HasPrefix(stderr(cmd), "zklock: lost the lock on "+path+": ") || !strings.Contains(stderr(cmd), "deleted by another client") {
		t.Errorf("status %d, want %d and one line saying the lock was lost, and why; stderr:\n%s", code, exitLost, stderr(cmd))
	}
}
