package main

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// Every way of losing what zklock holds while CMD runs ends in status 75,
// and in one line on stderr that says what was lost and why, whoever
// noticed first: zklock, or its guard acting on the session's deadline
// (which used to kill CMD first, and zklock then returned CMD's status,
// 143). Each CMD here dies of SIGTERM, as most do. (testLossStopsCMD
// checks the SIGTERM, then SIGKILL, of a CMD that ignores it.)
func TestLossExits75(t *testing.T) {
	t.Parallel()
	const timeout = "2s" // the session's: 1.6 s to the loss
	for _, tc := range []struct {
		name string
		verb string // run, lead
		// lose makes zklock, running VERB PATH, lose what it holds; s is
		// another session.
		lose func(t *testing.T, srv *zktest.Server, s *zkrecipes.Session, verb, path string, zklock *processOf)
		why  string // in the line
	}{
		{"server paused", "run", func(t *testing.T, srv *zktest.Server, _ *zkrecipes.Session, _, _ string, _ *processOf) {
			srv.Pause()
			t.Cleanup(srv.Resume)
		}, "session lost: no proof of contact"},
		{"server killed", "run", func(t *testing.T, srv *zktest.Server, _ *zkrecipes.Session, _, _ string, _ *processOf) {
			srv.Stop()
		}, "session lost: no proof of contact"},
		{"node deleted", "run", func(t *testing.T, _ *zktest.Server, s *zkrecipes.Session, verb, path string, _ *processOf) {
			if err := s.Conn().Delete(heldNode(t, s, verb, path), -1); err != nil {
				t.Fatal(err)
			}
		}, "deleted by another client"},
		{"zklock stopped past the session's expiry", "run", func(t *testing.T, _ *zktest.Server, _ *zkrecipes.Session, _, _ string, p *processOf) {
			p.signal(t, syscall.SIGSTOP)
			time.Sleep(3 * time.Second)
			p.signal(t, syscall.SIGCONT)
		}, "session "},
		{"server paused", "lead", func(t *testing.T, srv *zktest.Server, _ *zkrecipes.Session, _, _ string, _ *processOf) {
			srv.Pause()
			t.Cleanup(srv.Resume)
		}, "session lost: no proof of contact"},
		{"server paused", "queue take -once", func(t *testing.T, srv *zktest.Server, _ *zkrecipes.Session, _, _ string, _ *processOf) {
			srv.Pause()
			t.Cleanup(srv.Resume)
		}, "session lost: no proof of contact"},
		{"node deleted", "lead", func(t *testing.T, _ *zktest.Server, s *zkrecipes.Session, verb, path string, _ *processOf) {
			if err := s.Conn().Delete(heldNode(t, s, verb, path), -1); err != nil {
				t.Fatal(err)
			}
		}, "deleted by another client"},
	} {
		t.Run(tc.verb+" "+tc.name, func(t *testing.T) {
			srv := zktest.StartPrivate(t)
			path := lockPath(t)
			held := filepath.Join(t.TempDir(), "held")
			if tc.verb == "queue take -once" {
				run(t, srv.Addr(), 0, "queue", "put", path, "job")
			}
			args := append([]string{"-session-timeout", timeout}, strings.Fields(tc.verb)...)
			cmd := zklockCmd(t, srv.Addr(), append(args, path, "--", "sh", "-c", `touch "$1"; sleep 37`, "sh", held)...)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waitFile(t, held, cmd)
			s := zktest.Connect(t, srv.Addrs())
			tc.lose(t, srv, s, tc.verb, path, &processOf{cmd.Process.Pid})
			cmd.Wait()
			what := map[string]string{"run": "the lock on " + path, "lead": "leadership of " + path,
				"queue take -once": "the delivery of " + path + " item "}[tc.verb]
			checkLossReport(t, cmd.ProcessState.ExitCode(), stderr(cmd), what, tc.why)
		})
	}
}

// heldNode is the node of the one holder of the lock (run) or election
// (lead) at path.
func heldNode(t *testing.T, s *zkrecipes.Session, verb, path string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cs []zklock.Contender
	var err error
	if verb == "lead" {
		var el *zklock.Election
		if el, err = zklock.NewElection(s, path); err == nil {
			cs, err = el.Contenders(ctx)
		}
	} else {
		var m *zklock.Mutex
		if m, err = zklock.NewMutex(s, path); err == nil {
			cs, err = m.Contenders(ctx)
		}
	}
	if err != nil || len(cs) != 1 || !cs[0].Holds {
		t.Fatalf("contenders of %s: %+v, %v; want the one holder", path, cs, err)
	}
	return cs[0].Path
}

// checkLossReport checks that zklock exited 75 and said, in one line, that
// it lost what (the lock on PATH, ...) and why, without claiming a failed
// release or repeating its name.
func checkLossReport(t *testing.T, code int, stderr, what, why string) {
	t.Helper()
	if code != exitLost {
		t.Errorf("exit status %d, want %d", code, exitLost)
	}
	lines := regexp.MustCompile(`(?m)^zklock: lost `+regexp.QuoteMeta(what)+`.* while .*$`).FindAllString(stderr, -1)
	switch {
	case len(lines) != 1:
		t.Errorf("%d lines say that zklock lost %s, want 1", len(lines), what)
	case !strings.Contains(lines[0], why):
		t.Errorf("the line does not say why (%q): %s", why, lines[0])
	}
	for _, bad := range []string{"could not confirm the release", "zklock: zklock:", "level=WARN"} {
		if strings.Contains(stderr, bad) {
			t.Errorf("stderr says %q", bad)
		}
	}
	if t.Failed() {
		t.Logf("stderr:\n%s", stderr)
	}
}

// processOf is a process a test signals.
type processOf struct{ pid int }

func (p *processOf) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(p.pid, sig); err != nil {
		t.Fatal(fmt.Errorf("%v to %d: %w", sig, p.pid, err))
	}
}
