package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// TestTLSFlags reaches a ZooKeeper whose secureClientPort needs a client
// certificate with -ca-file, -client-cert and -client-key, and fails, with
// the reason, without the certificate, without the CA, or when the servers'
// certificates are checked for the wrong name.
func TestTLSFlags(t *testing.T) {
	t.Parallel()
	files := zktest.TLSFiles(t)
	addr := zktest.StartPrivate(t, zktest.WithTLS(files, "need")).SecureAddr()
	path := lockPath(t)
	ca, cert, key := []string{"-ca-file", files.CACert}, []string{"-client-cert", files.ClientCert}, []string{"-client-key", files.ClientKey}
	flags := func(sets ...[]string) []string {
		var out []string
		for _, s := range sets {
			out = append(out, s...)
		}
		return out
	}

	// The flags before the command, and after it.
	id := strings.TrimSpace(run(t, addr, 0, flags(ca, cert, key, []string{"queue", "put", path, "over TLS"})...))
	var dead jsonDead
	runJSON(t, addr, &dead, flags([]string{"queue", "dead"}, ca, cert, key, []string{"-json", path})...)
	if dead.Path != path || len(dead.DeadLetters) != 0 {
		t.Errorf("queue dead over TLS: %+v", dead)
	}
	if out := run(t, addr, 0, flags([]string{"queue", "take", "-once"}, ca, cert, key, []string{path, "--", "sh", "-c", `printf '%s ' "$ZKLOCK_JOB_ID"; cat`})...); out != id+" over TLS" {
		t.Errorf("queue take over TLS printed %q, want %q", out, id+" over TLS")
	}

	for _, tc := range []struct {
		name  string
		flags []string
		want  string // in stderr
	}{
		{"no client certificate", flags(ca), "remote error"},
		{"no CA", flags(cert, key), "certificate signed by unknown authority"},
		{"another server name", flags(ca, cert, key, []string{"-tls-server-name", "elsewhere.example"}), "elsewhere.example"},
	} {
		cmd := zklockCmd(t, addr, append(tc.flags, "queue", "ls", path)...)
		if got := status(t, cmd); got != exitFailure || !strings.Contains(stderr(cmd), tc.want) {
			t.Errorf("%s: exit status %d, want %d, and stderr mentioning %q:\n%s", tc.name, got, exitFailure, tc.want, stderr(cmd))
		}
	}
}

// openParent makes the parent of path, with the world's ACL, unless it
// exists: a parent made by an authenticated client would be for that client
// only, and shut the tests that run without credentials out.
func openParent(t *testing.T, addr, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := zkrecipes.Connect(ctx, []string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	parent := path[:strings.LastIndex(path, "/")]
	if _, err := s.Conn().Create(parent, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		t.Fatal(err)
	}
}

// TestDigestAuth: with -auth (or $ZK_AUTH) zklock authenticates with the
// digest scheme: it can read what is for that user only, and what it
// creates is for that user only.
func TestDigestAuth(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	queue, lock := lockPath(t), lockPath(t)
	openParent(t, addr, queue)
	const alice = "alice:secret"

	// A lock held by a session authenticated as alice: its nodes are
	// alice's only.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := zkrecipes.Connect(ctx, []string{addr}, zkrecipes.WithAuth("digest", []byte(alice)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m, err := zklock.NewMutex(s, lock, zklock.WithData([]byte("alice's")))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := l.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}()

	// zklock puts as alice: the queue is alice's only.
	run(t, addr, 0, "-auth", alice, "queue", "put", queue, "x")

	for _, args := range [][]string{{"holders", lock}, {"queue", "ls", queue}} {
		for _, who := range [][]string{nil, {"-auth", "alice:wrong"}, {"-auth", "bob:secret"}} {
			cmd := zklockCmd(t, addr, append(who, args...)...)
			if got := status(t, cmd); got != exitFailure || !strings.Contains(stderr(cmd), "not authenticated") {
				t.Errorf("zklock %q: exit status %d, want %d, and stderr saying not authenticated:\n%s", cmd.Args[1:], got, exitFailure, stderr(cmd))
			}
		}
	}
	if out := run(t, addr, 0, "holders", "-auth", alice, lock); !strings.Contains(out, "alice's") {
		t.Errorf("holders as alice printed:\n%s", out)
	}
	var ls jsonQueueLs
	runJSON(t, addr, &ls, "-auth", alice, "queue", "ls", "-json", queue)
	if ls.Pending != 1 {
		t.Errorf("queue ls as alice: %+v, want the one item", ls)
	}
}

// TestDigestAuthFromEnvironment: $ZK_AUTH is -auth's default.
func TestDigestAuthFromEnvironment(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	queue := lockPath(t)
	openParent(t, addr, queue)
	run(t, addr, 0, "-auth", "carol:pw", "queue", "put", queue, "x")
	for _, env := range []struct {
		value string
		want  int
	}{{"carol:pw", 0}, {"carol:other", exitFailure}} {
		cmd := zklockCmd(t, addr, "queue", "ls", queue)
		cmd.Env = append(os.Environ(), "ZK_AUTH="+env.value)
		if got := status(t, cmd); got != env.want {
			t.Errorf("ZK_AUTH=%s zklock queue ls: exit status %d, want %d; stderr:\n%s", env.value, got, env.want, stderr(cmd))
		}
	}
}
