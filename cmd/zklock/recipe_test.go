package main

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// A typo is not an answer: a command that reads what is at PATH says when
// nothing is there (status 4), and every command refuses a PATH that holds
// another recipe than its own (status 5), before it changes anything.
func TestPathMissingOrAnotherRecipe(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := zktest.Connect(t, []string{addr})

	// A lock held, an election with a leader, a queue with an item, a
	// queue that a consumer waits on before anything was put (it has only
	// the consumers' directories: ready/, consumers/, dispatch/).
	lock, election, queue, other, waited := lockPath(t), lockPath(t), lockPath(t), lockPath(t), lockPath(t)
	m, err := zklock.NewMutex(s, lock)
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	el, err := zklock.NewElection(s, election)
	if err != nil {
		t.Fatal(err)
	}
	lead, err := el.Campaign(ctx, []byte("leader"))
	if err != nil {
		t.Fatal(err)
	}
	defer lead.Resign(ctx)
	run(t, addr, 0, "queue", "put", queue, "item")
	// A node with children of no recipe's.
	for _, p := range []string{other, other + "/config"} {
		if _, err := s.Conn().Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	defer deleteTree(s.Conn(), other)
	consumer := zklockCmd(t, addr, "queue", "take", "-once", "-timeout", "60s", waited, "--", "true")
	if err := consumer.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		ls := zklockCmd(t, addr, "queue", "ls", "-json", waited)
		return status(t, ls) == 0 && strings.Contains(stdout(ls), `"waiting":1`)
	}, func() string { return "the consumer of " + waited + " is not waiting; stderr:\n" + stderr(consumer) })
	missing := lockPath(t)

	for _, tc := range []struct {
		args []string
		want int
		says string
	}{
		{[]string{"holders", missing}, exitNoPath, missing + " does not exist"},
		{[]string{"leader", missing}, exitNoPath, missing + " does not exist"},
		{[]string{"queue", "ls", missing}, exitNoPath, missing + " does not exist"},
		{[]string{"queue", "dead", missing}, exitNoPath, missing + " does not exist"},
		{[]string{"queue", "requeue", missing, "0000000000-0000000000"}, exitNoPath, missing + " does not exist"},
		{[]string{"holders", queue}, exitWrongRecipe, queue + " holds a queue, not a lock or a semaphore or an election"},
		{[]string{"holders", other}, exitWrongRecipe, "holds nodes of no recipe zklock knows"},
		{[]string{"watch", "-once", queue}, exitWrongRecipe, "holds a queue"},
		{[]string{"leader", lock}, exitWrongRecipe, lock + " holds a lock, not an election"},
		{[]string{"leader", queue}, exitWrongRecipe, "holds a queue, not an election"},
		{[]string{"queue", "ls", lock}, exitWrongRecipe, lock + " holds a lock, not a queue"},
		{[]string{"queue", "dead", election}, exitWrongRecipe, "holds an election, not a queue"},
		{[]string{"queue", "requeue", lock, "0000000000-0000000000"}, exitWrongRecipe, "holds a lock, not a queue"},
		{[]string{"queue", "put", lock, "x"}, exitWrongRecipe, "holds a lock, not a queue"},
		{[]string{"queue", "take", "-once", "-timeout", "1s", election, "--", "true"}, exitWrongRecipe, "holds an election, not a queue"},
		{[]string{"run", "-timeout", "1s", queue, "--", "true"}, exitWrongRecipe, "holds a queue, not a lock"},
		{[]string{"run", "-timeout", "1s", election, "--", "true"}, exitWrongRecipe, "holds an election, not a lock"},
		{[]string{"run", "-n", "2", "-timeout", "1s", lock, "--", "true"}, exitWrongRecipe, "holds a lock, not a semaphore"},
		{[]string{"lead", "-timeout", "1s", queue, "--", "true"}, exitWrongRecipe, "holds a queue, not an election"},
		{[]string{"lead", "-timeout", "1s", lock, "--", "true"}, exitWrongRecipe, "holds a lock, not an election"},
		{[]string{"holders", waited}, exitWrongRecipe, waited + " holds a queue, not a lock or a semaphore or an election"},
		{[]string{"watch", "-once", waited}, exitWrongRecipe, "holds a queue"},
		{[]string{"leader", waited}, exitWrongRecipe, "holds a queue, not an election"},
		{[]string{"run", "-timeout", "1s", waited, "--", "true"}, exitWrongRecipe, "holds a queue, not a lock"},
		{[]string{"lead", "-timeout", "1s", waited, "--", "true"}, exitWrongRecipe, "holds a queue, not an election"},
	} {
		cmd := zklockCmd(t, addr, tc.args...)
		if got := status(t, cmd); got != tc.want || !strings.Contains(stderr(cmd), tc.says) {
			t.Errorf("zklock %s: status %d, stderr:\n%s\nwant status %d and %q", strings.Join(tc.args, " "), got, stderr(cmd), tc.want, tc.says)
		}
		if strings.Count(stderr(cmd), "zklock:") != 1 {
			t.Errorf("zklock %s: want one line, with one \"zklock:\":\n%s", strings.Join(tc.args, " "), stderr(cmd))
		}
	}

	// Nothing was put in the lock's directory, nor a lock node in the queue's.
	cs, err := m.Contenders(ctx)
	if err != nil || len(cs) != 1 {
		t.Errorf("the lock's contenders: %+v, %v; want its one holder", cs, err)
	}
	if pending, _ := queueCounts(t, addr, queue); pending != 1 {
		t.Errorf("%d items pending in the queue, want its one", pending)
	}
	children, _, err := s.Conn().Children(queue)
	if err != nil {
		t.Fatal(err)
	}
	if k := zklock.KindOf(children); k != zklock.KindNone {
		t.Errorf("the queue's directory holds contenders (%s): %v", k, children)
	}
	if children, _, err = s.Conn().Children(waited); err != nil || len(children) != 3 {
		t.Errorf("the waited-on queue's directory: %v, %v; want ready, consumers and dispatch, and no contender", children, err)
	}
	consumer.Process.Signal(syscall.SIGTERM)
	consumer.Wait()

	// A requeue of an id that is no item id is bad input.
	cmd := zklockCmd(t, addr, "queue", "requeue", queue, "no-such-id")
	if got := status(t, cmd); got != exitUsage || !strings.Contains(stderr(cmd), `"no-such-id" is no item id`) {
		t.Errorf("queue requeue with a malformed id: status %d, stderr:\n%s\nwant %d", got, stderr(cmd), exitUsage)
	}
}

// An error from the library, which names its package (package zklock's
// "zklock: "), is printed after zklock's name once, not twice.
func TestErrorsHaveOnePrefix(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	held := filepath.Join(t.TempDir(), "held")
	sem := zklockCmd(t, addr, "run", "-n", "2", path, "--", "sh", "-c", `touch "$1"; exec sleep 30`, "sh", held)
	if err := sem.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, held, sem)
	// Another number of permits than the semaphore's: zklock.ErrPermitsMismatch.
	cmd := zklockCmd(t, addr, "run", "-n", "3", "-timeout", "5s", path, "--", "true")
	if got := status(t, cmd); got != exitFailure || !strings.Contains(stderr(cmd), "permits mismatch") {
		t.Errorf("run -n 3 on a semaphore of 2: status %d, stderr:\n%s\nwant %d, permits mismatch", got, stderr(cmd), exitFailure)
	}
	if !strings.HasPrefix(stderr(cmd), "zklock: ") || strings.Count(stderr(cmd), "zklock:") != 1 {
		t.Errorf("want one \"zklock:\", at the start:\n%s", stderr(cmd))
	}
	sem.Process.Signal(syscall.SIGTERM)
	sem.Wait()
}
