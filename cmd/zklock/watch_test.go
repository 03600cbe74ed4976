package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// checkContender checks one contender of a watch frame.
func checkContender(t *testing.T, f jsonWatch, i int, role, data string) {
	t.Helper()
	if len(f.Contenders) <= i {
		t.Fatalf("frame %+v: no contender %d", f, i)
	}
	c := f.Contenders[i]
	_, err := time.Parse(time.RFC3339Nano, deref(c.Created))
	switch {
	case c.Role != role:
		t.Errorf("contender %d: role %q, want %q", i, c.Role, role)
	case c.Data == nil || *c.Data != data:
		t.Errorf("contender %d: data %v, want %q", i, c.Data, data)
	case !strings.HasPrefix(c.Path, f.Path+"/"):
		t.Errorf("contender %d: path %q, not under %s", i, c.Path, f.Path)
	case !regexp.MustCompile(`^0x[0-9a-f]+$`).MatchString(c.Session) || c.Token <= 0:
		t.Errorf("contender %d: session %q, token %d", i, c.Session, c.Token)
	case err != nil:
		t.Errorf("contender %d: created %v: %v", i, c.Created, err)
	case c.InLine == nil || *c.InLine < 0:
		t.Errorf("contender %d: in_line_seconds %v", i, c.InLine)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// watchOnce runs `zklock watch -once -json path`.
func watchOnce(t *testing.T, addr, path string) jsonWatch {
	t.Helper()
	var f jsonWatch
	runJSON(t, addr, &f, "watch", "-once", "-json", path)
	return f
}

// TestWatchOnce prints one frame of a lock's line and of an election's, as
// text and as JSON.
func TestWatchOnce(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	dir := t.TempDir()

	if out := run(t, addr, 0, "watch", "-once", path); !strings.HasPrefix(out, path+": no contenders, at ") {
		t.Errorf("watch -once of nothing printed %q", out)
	}
	if f := watchOnce(t, addr, path); f.Path != path || f.Kind != "" || f.Contenders == nil || len(f.Contenders) != 0 {
		t.Errorf("watch -once -json of nothing: %+v", f)
	}

	held := filepath.Join(dir, "held")
	holder := zklockCmd(t, addr, "run", "-data", "the holder", path, "--", "sh", "-c", `touch "$1"; exec sleep 30`, "sh", held)
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, held, holder)
	waiter := zklockCmd(t, addr, "run", "-data", "a waiter", path, "--", "true")
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	var f jsonWatch
	waitFor(t, func() bool { f = watchOnce(t, addr, path); return len(f.Contenders) == 2 },
		func() string { return fmt.Sprintf("the waiter did not show: %+v", f) })
	if f.Kind != "lock" {
		t.Errorf("kind %q, want lock", f.Kind)
	}
	checkContender(t, f, 0, "holder", "the holder")
	checkContender(t, f, 1, "waiter", "a waiter")
	if f.Contenders[1].Position != 1 || f.Contenders[1].Token <= f.Contenders[0].Token {
		t.Errorf("waiter %+v after holder %+v: want position 1 and a higher token", f.Contenders[1], f.Contenders[0])
	}
	want := regexp.MustCompile(`^` + regexp.QuoteMeta(path) + `: lock, 1 holder, 1 waiter, at .*\n` +
		`ROLE +NODE +SESSION +TOKEN +IN LINE +DATA\n` +
		`holder +` + regexp.QuoteMeta(path) + `/\S+-lock-\d+ +0x[0-9a-f]+ +\d+ +[0-9.hms]+ +the holder\n` +
		`waiter 1 +` + regexp.QuoteMeta(path) + `/\S+-lock-\d+ +0x[0-9a-f]+ +\d+ +[0-9.hms]+ +a waiter\n$`)
	if out := run(t, addr, 0, "watch", "-once", path); !want.MatchString(out) {
		t.Errorf("watch -once printed:\n%s\nwant a match for %s", out, want)
	}
	// holders -json lists the same line.
	var hs jsonHolders
	runJSON(t, addr, &hs, "holders", "-json", path)
	if len(hs.Contenders) != 2 || hs.Path != path {
		t.Fatalf("holders -json: %+v, want the holder and the waiter", hs)
	}
	for i, c := range hs.Contenders {
		w := f.Contenders[i]
		if c.Role != w.Role || c.Position != i || c.Path != w.Path || c.Session != w.Session || c.Token != w.Token ||
			deref(c.Data) != deref(w.Data) || c.Created != nil || c.InLine != nil {
			t.Errorf("holders -json: contender %d is %+v; watch showed %+v", i, c, w)
		}
	}
	holder.Process.Signal(syscall.SIGTERM)
	holder.Wait()
	if err := waiter.Wait(); err != nil {
		t.Fatalf("waiter: %v; stderr:\n%s", err, stderr(waiter))
	}

	// An election: its candidates are "-elect-" nodes, the leader first.
	election := lockPath(t)
	leading := filepath.Join(dir, "leading")
	lead := zklockCmd(t, addr, "lead", "-value", "the leader", election, "--", "sh", "-c", `touch "$1"; exec sleep 30`, "sh", leading)
	if err := lead.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, leading, lead)
	candidate := zklockCmd(t, addr, "lead", "-value", "a candidate", election, "--", "true")
	if err := candidate.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { f = watchOnce(t, addr, election); return len(f.Contenders) == 2 },
		func() string { return fmt.Sprintf("the candidate did not show: %+v", f) })
	if f.Kind != "election" || !strings.Contains(f.Contenders[0].Path, "-elect-") {
		t.Errorf("election frame %+v: want kind election and -elect- nodes", f)
	}
	checkContender(t, f, 0, "leader", "the leader")
	checkContender(t, f, 1, "candidate", "a candidate")
	want = regexp.MustCompile(`^` + regexp.QuoteMeta(election) + `: election, 1 leader, 1 candidate, at .*\n` +
		`ROLE +NODE +SESSION +TOKEN +IN LINE +DATA\n` +
		`leader +\S+-elect-\d+ .* the leader\n` +
		`candidate 1 +\S+-elect-\d+ .* a candidate\n$`)
	if out := run(t, addr, 0, "watch", "-once", election); !want.MatchString(out) {
		t.Errorf("watch -once of an election printed:\n%s\nwant a match for %s", out, want)
	}
	// leader -json names the same leader.
	var l jsonLeader
	runJSON(t, addr, &l, "leader", "-json", election)
	if c := f.Contenders[0]; l.Path != election || l.Leader == nil || l.Leader.Path != c.Path || l.Leader.Session != c.Session ||
		l.Leader.Token != c.Token || deref(l.Leader.Value) != "the leader" {
		t.Errorf("leader -json: %+v (leader %+v); watch showed %+v", l, l.Leader, c)
	}
	lead.Process.Signal(syscall.SIGTERM)
	lead.Wait()
	if err := candidate.Wait(); err != nil {
		t.Fatalf("candidate: %v; stderr:\n%s", err, stderr(candidate))
	}
	if out := run(t, addr, exitNoLeader, "leader", "-json", election); out != fmt.Sprintf(`{"path":%q,"leader":null}`+"\n", election) {
		t.Errorf("leader -json with no leader printed %q", out)
	}
	if out := run(t, addr, 0, "watch", "-once", election); !strings.HasPrefix(out, election+": no contenders, at ") {
		t.Errorf("watch -once of an election left by all printed %q", out)
	}
}

// startWatch starts `zklock watch -json path` and returns it, and a
// function that waits for a frame that ok accepts, failing on a bad one.
func startWatch(t *testing.T, addr, path string) (*exec.Cmd, func(what string, ok func(jsonWatch) bool) jsonWatch) {
	t.Helper()
	watch := zklockCmd(t, addr, "watch", "-json", path)
	watch.Stdout = nil
	pipe, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	frames := make(chan jsonWatch, 100)
	go func() {
		defer close(frames)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			var f jsonWatch
			if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
				f.Path = "bad frame: " + sc.Text()
			}
			frames <- f
		}
	}()
	next := func(what string, ok func(jsonWatch) bool) jsonWatch {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case f, open := <-frames:
				switch {
				case !open:
					watch.Wait()
					t.Fatalf("watch ended before %s; stderr:\n%s", what, stderr(watch))
				case f.Path != path:
					t.Fatalf("watch printed %q", f.Path)
				case ok(f):
					return f
				}
			case <-timeout:
				t.Fatalf("no frame with %s", what)
			}
		}
	}
	return watch, next
}

// TestWatchLeaderValue follows an election's leader as it proclaims a new
// value: watch follows the leader's node, not only the line.
func TestWatchLeaderValue(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	s := zktest.Connect(t, []string{addr})
	el, err := zklock.NewElection(s, path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lead, err := el.Campaign(ctx, []byte("first"))
	if err != nil {
		t.Fatal(err)
	}
	watch, next := startWatch(t, addr, path)
	f := next("the leader", func(f jsonWatch) bool { return len(f.Contenders) == 1 })
	checkContender(t, f, 0, "leader", "first")
	if err := lead.Proclaim(ctx, []byte("second")); err != nil {
		t.Fatal(err)
	}
	f = next("the new value", func(f jsonWatch) bool {
		return len(f.Contenders) == 1 && f.Contenders[0].Data != nil && *f.Contenders[0].Data == "second"
	})
	checkContender(t, f, 0, "leader", "second")
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	next("no leader", func(f jsonWatch) bool { return len(f.Contenders) == 0 })
	watch.Process.Signal(syscall.SIGTERM)
	watch.Wait()
	if got := watch.ProcessState.ExitCode(); got != 0 {
		t.Errorf("watch: exit status %d after SIGTERM, want 0; stderr:\n%s", got, stderr(watch))
	}
}

// TestWatchLive follows a lock's line as a holder comes, a waiter joins, and
// both go; then SIGTERM ends the watch with status 0.
func TestWatchLive(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	held := filepath.Join(t.TempDir(), "held")

	watch, next := startWatch(t, addr, path)
	next("no contenders", func(f jsonWatch) bool { return len(f.Contenders) == 0 })

	holder := zklockCmd(t, addr, "run", "-data", "the holder", path, "--", "sh", "-c", `touch "$1"; exec sleep 30`, "sh", held)
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	f := next("the holder", func(f jsonWatch) bool { return len(f.Contenders) == 1 })
	checkContender(t, f, 0, "holder", "the holder")
	waitFile(t, held, holder)

	waiter := zklockCmd(t, addr, "run", "-data", "a waiter", path, "--", "true")
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	f = next("the waiter", func(f jsonWatch) bool { return len(f.Contenders) == 2 })
	checkContender(t, f, 0, "holder", "the holder")
	checkContender(t, f, 1, "waiter", "a waiter")

	holder.Process.Signal(syscall.SIGTERM)
	f = next("the line empty again", func(f jsonWatch) bool { return len(f.Contenders) == 0 })
	if f.Kind != "lock" {
		t.Errorf("empty line after a lock: kind %q, want lock", f.Kind)
	}
	holder.Wait()
	if err := waiter.Wait(); err != nil {
		t.Fatalf("waiter: %v; stderr:\n%s", err, stderr(waiter))
	}

	watch.Process.Signal(syscall.SIGTERM)
	watch.Wait()
	if got := watch.ProcessState.ExitCode(); got != 0 {
		t.Errorf("watch: exit status %d after SIGTERM, want 0; stderr:\n%s", got, stderr(watch))
	}
}

// TestWatchSemaphore shows a semaphore's line: as many holders as it has
// permits (its directory's data), then the waiters.
func TestWatchSemaphore(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := zkrecipes.Connect(ctx, []string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range 3 {
		sm, err := zklock.NewSemaphore(s, path, 2, zklock.WithData([]byte(fmt.Sprint("contender ", i))))
		if err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			if _, err := sm.Acquire(ctx); err != nil {
				t.Fatal(err)
			}
			continue
		}
		wg.Go(func() { sm.Acquire(ctx) }) // waits until the test ends
	}
	var f jsonWatch
	waitFor(t, func() bool { f = watchOnce(t, addr, path); return len(f.Contenders) == 3 },
		func() string { return fmt.Sprintf("the waiter did not show: %+v", f) })
	if f.Kind != "semaphore" || f.Permits != 2 {
		t.Errorf("kind %q, permits %d; want semaphore, 2", f.Kind, f.Permits)
	}
	checkContender(t, f, 0, "holder", "contender 0")
	checkContender(t, f, 1, "holder", "contender 1")
	checkContender(t, f, 2, "waiter", "contender 2")
	if p := f.Contenders[2].Position; p != 1 {
		t.Errorf("the waiter's position: %d, want 1", p)
	}
	want := regexp.MustCompile(`^` + regexp.QuoteMeta(path) + `: semaphore of 2 permits, 2 holders, 1 waiter, at .*\n` +
		`ROLE .*\nholder +\S+-sem-\d+ .* contender 0\nholder +\S+-sem-\d+ .* contender 1\nwaiter 1 +\S+-sem-\d+ .* contender 2\n$`)
	if out := run(t, addr, 0, "watch", "-once", path); !want.MatchString(out) {
		t.Errorf("watch -once printed:\n%s\nwant a match for %s", out, want)
	}
}
