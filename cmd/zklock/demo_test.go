package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// TestDemo runs `zklock demo` and reads its output: the three parts, in
// order, each showing what it claims. The demo's own checks are read too,
// but the test does not take their word for it.
func TestDemo(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	cmd := zklockCmd(t, addr, "demo", "-path", path)
	got := status(t, cmd)
	out := stdout(cmd)
	t.Logf("demo output:\n%s", out)
	if got != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", got, stderr(cmd))
	}
	mutex, election, queue := demoParts(t, out)

	// 1. Five workers, three rounds, one hand-off at a time, tokens up.
	handoffs := matches(mutex, `(?m)^\s+[+-][\d.]+s\s+(worker-\d+)\s+token (\d+)\s+waited`)
	if len(handoffs) != 15 {
		t.Errorf("mutex: %d hand-offs, want 15 (5 workers x 3 rounds)", len(handoffs))
	}
	checkIncreasing(t, "mutex: fencing tokens", handoffs)
	wantLine(t, mutex, "First come, first served (each hand-off to the worker that joined the line next): yes")

	// 2. Three replicas elected in turn, each term higher; replica-1 and
	// replica-3 resign, replica-2's session is closed; the observer sees
	// each leader, then none.
	elected := matches(election, `(?m)^\s+[+-][\d.]+s\s+(replica-\d+)\s+elected, term (\d+)$`)
	if names := column(elected, 0); !slices.Equal(names, []string{"replica-1", "replica-2", "replica-3"}) {
		t.Errorf("election: elected %q, want replica-1, replica-2, replica-3 in turn", names)
	}
	checkIncreasing(t, "election: terms", elected)
	for _, want := range []string{`replica-1\s+resigns`, `replica-2\s+stops: its session is closed`, `replica-2\s+is told: .*lost`, `replica-3\s+resigns`} {
		if !regexp.MustCompile(want).MatchString(election) {
			t.Errorf("election: no line matches %q", want)
		}
	}
	seen := matches(election, `(?m)^\s+[+-][\d.]+s\s+observer\s+sees (replica-\d+) lead, term (\d+)$`)
	for _, s := range seen {
		if !slices.ContainsFunc(elected, func(e []string) bool { return slices.Equal(e, s) }) {
			t.Errorf("election: the observer saw %s lead in term %s, which no campaign won", s[0], s[1])
		}
	}
	if !regexp.MustCompile(`(?m)observer\s+sees no leader$`).MatchString(election) {
		t.Error("election: the observer never saw the election without a leader")
	}

	// 3. Two producers put three jobs each; three consumers take each job
	// once, each consumer's oldest first, and ack it.
	puts, takes := checkQueueLines(t, queue)
	if len(puts) != 6 {
		t.Errorf("queue: %d puts, want 6", len(puts))
	}
	if len(takes) != 6 {
		t.Errorf("queue: %d takes, want 6", len(takes))
	}

	if !strings.Contains(out, "\nAll 11 checks passed.\n") {
		t.Error("the demo does not say that all its 11 checks passed")
	}
	checkDemoLeftNothing(t, addr, path)
}

// TestDemoInProcess runs the demo in this process, to check that it
// leaves no goroutine behind; with one consumer, the jobs must be taken in
// the queue's order exactly.
func TestDemoInProcess(t *testing.T) {
	addr := zktest.Start(t).Addr()
	var out, errs bytes.Buffer
	path := lockPath(t)
	code := realMain([]string{"-zk", addr, "demo", "-workers", "3", "-rounds", "2", "-replicas", "2", "-producers", "2", "-consumers", "1", "-items", "4", "-hold", "0s", "-path", path}, &out, &errs)
	goleak.VerifyNone(t) // before the test's own session
	t.Logf("demo output:\n%s", &out)
	if code != 0 {
		t.Fatalf("exit status %d\nstderr:\n%s", code, &errs)
	}
	_, _, queue := demoParts(t, out.String())
	puts, takes := checkQueueLines(t, queue)
	ids := column(puts, 1)
	slices.Sort(ids)
	if got := column(takes, 1); !slices.Equal(got, ids) {
		t.Errorf("the one consumer took %q; want the queue's order, %q", got, ids)
	}
	checkDemoLeftNothing(t, addr, path)
}

// TestDemoInterrupted interrupts the demo (SIGINT) while its consumer works
// on a job: the demo must take back the jobs it put, so that the next demo
// finds the queue empty.
func TestDemoInterrupted(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	// One consumer working 1s on each of 6 jobs: the queue part lasts 6s,
	// time enough to see its first take and interrupt it.
	cmd := zklockCmd(t, addr, "demo", "-workers", "1", "-rounds", "1", "-replicas", "1", "-consumers", "1", "-hold", "1s", "-path", path)
	name := filepath.Join(t.TempDir(), "stdout")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd.Stdout = f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	took := regexp.MustCompile(`consumer-1\s+took\s`)
	waitFor(t, func() bool { return took.MatchString(readFile(t, name)) }, func() string {
		return "the consumer took no job; stdout:\n" + readFile(t, name) + "\nstderr:\n" + stderr(cmd)
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	t.Logf("demo output:\n%s\nstderr:\n%s", readFile(t, name), stderr(cmd))
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("exit status %d (%v), want 1", code, err)
	}
	if !strings.Contains(stderr(cmd), "demo interrupted") {
		t.Error("stderr does not say the demo was interrupted")
	}
	if !regexp.MustCompile(`took back the [1-6] jobs left in `).MatchString(stderr(cmd)) {
		t.Error("stderr does not say the demo took back the jobs it left")
	}
	checkDemoLeftNothing(t, addr, path)
}

// demoParts splits the demo's output into its three parts, which must all
// be there, in order.
func demoParts(t *testing.T, out string) (mutex, election, queue string) {
	t.Helper()
	heads := []string{"\n1. Fair mutex at ", "\n2. Leader election at ", "\n3. Job queue at "}
	at := make([]int, len(heads))
	for i, h := range heads {
		if at[i] = strings.Index(out, h); at[i] < 0 {
			t.Fatalf("the demo's output has no part %q", strings.TrimSpace(h))
		}
		if i > 0 && at[i] < at[i-1] {
			t.Fatalf("part %q comes before part %q", strings.TrimSpace(h), strings.TrimSpace(heads[i-1]))
		}
	}
	return out[at[0]:at[1]], out[at[1]:at[2]], out[at[2]:]
}

// matches returns the submatches of every match of re in s.
func matches(s, re string) [][]string {
	var out [][]string
	for _, m := range regexp.MustCompile(re).FindAllStringSubmatch(s, -1) {
		out = append(out, m[1:])
	}
	return out
}

// column is the i-th submatch of each match.
func column(ms [][]string, i int) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m[i])
	}
	return out
}

// checkIncreasing checks that the numbers in the last submatch strictly
// increase.
func checkIncreasing(t *testing.T, what string, ms [][]string) {
	t.Helper()
	prev := int64(-1)
	for _, m := range ms {
		n, err := strconv.ParseInt(m[len(m)-1], 10, 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", what, m, err)
		}
		if n <= prev {
			t.Errorf("%s: %d after %d, want strictly increasing", what, n, prev)
		}
		prev = n
	}
}

// wantLine checks that out has the line (trimmed) line.
func wantLine(t *testing.T, out, line string) {
	t.Helper()
	if !regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(line) + `$`).MatchString(out) {
		t.Errorf("no line %q", line)
	}
}

// checkQueueLines reads the queue part's puts and takes (who, id, data)
// and checks them: every job put is taken once, with its data, and acked;
// each producer's ids and each consumer's ids increase.
func checkQueueLines(t *testing.T, queue string) (puts, takes [][]string) {
	t.Helper()
	line := `(?m)^\s+[+-][\d.]+s\s+(%s-\d+)\s+%s\s+(\d+-\d+)(?:\s+"(.*)")?`
	puts = matches(queue, strings.ReplaceAll(strings.Replace(line, "%s", "producer", 1), "%s", "put"))
	takes = matches(queue, strings.ReplaceAll(strings.Replace(line, "%s", "consumer", 1), "%s", "took"))
	acks := matches(queue, strings.ReplaceAll(strings.Replace(line, "%s", "consumer", 1), "%s", "acked"))
	data := map[string]string{}
	for _, p := range puts {
		if _, dup := data[p[1]]; dup {
			t.Errorf("queue: id %s put twice", p[1])
		}
		data[p[1]] = p[2]
	}
	taken := map[string]bool{}
	for _, tk := range takes {
		if taken[tk[1]] {
			t.Errorf("queue: %s taken twice", tk[1])
		}
		taken[tk[1]] = true
		if d, ok := data[tk[1]]; !ok || d != tk[2] {
			t.Errorf("queue: %s took %s with data %q; it was put with %q", tk[0], tk[1], tk[2], d)
		}
	}
	if len(taken) != len(data) {
		t.Errorf("queue: %d jobs put, %d taken", len(data), len(taken))
	}
	if got, want := slices.Sorted(slices.Values(column(acks, 1))), slices.Sorted(slices.Values(column(takes, 1))); !slices.Equal(got, want) {
		t.Errorf("queue: acked %q, took %q", got, want)
	}
	byWho := func(ms [][]string) map[string][]string {
		m := map[string][]string{}
		for _, x := range ms {
			m[x[0]] = append(m[x[0]], x[1])
		}
		return m
	}
	for who, ids := range byWho(puts) {
		if !slices.IsSorted(ids) {
			t.Errorf("queue: %s's jobs got the ids %q in the order it put them: not the queue's order", who, ids)
		}
		for i, id := range ids {
			if want := "job " + strconv.Itoa(i+1) + " of " + who; data[id] != want {
				t.Errorf("queue: %s's put %d is %q, want %q", who, i+1, data[id], want)
			}
		}
	}
	for who, ids := range byWho(takes) {
		if !slices.IsSorted(ids) {
			t.Errorf("queue: %s took %q: not oldest first", who, ids)
		}
	}
	return puts, takes
}

// checkDemoLeftNothing checks, with a session of the test's own, that the
// demo at path left no contender in its lock and election and no job in
// its queue.
func checkDemoLeftNothing(t *testing.T, addr, path string) {
	t.Helper()
	ctx := t.Context()
	s := zktest.Connect(t, []string{addr})
	m, err := zklock.NewMutex(s, path+"/lock")
	if err != nil {
		t.Fatal(err)
	}
	if cs, err := m.Contenders(ctx); err != nil || len(cs) > 0 {
		t.Errorf("lock: %d contenders left (%v)", len(cs), err)
	}
	el, err := zklock.NewElection(s, path+"/election")
	if err != nil {
		t.Fatal(err)
	}
	if cs, err := el.Contenders(ctx); err != nil || len(cs) > 0 {
		t.Errorf("election: %d contenders left (%v)", len(cs), err)
	}
	checkQueueEmpty(t, ctx, s, path+"/queue")
}

// checkQueueEmpty checks that the queue at path holds no pending job and
// no dead letter.
func checkQueueEmpty(t *testing.T, ctx context.Context, s *zkrecipes.Session, path string) {
	t.Helper()
	q, err := fairqueue.New(s, path)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := q.Len(ctx); err != nil || n > 0 {
		t.Errorf("queue: %d jobs left (%v)", n, err)
	}
	if dl, err := q.DeadLetters(ctx); err != nil || len(dl) > 0 {
		t.Errorf("queue: %d dead letters left (%v)", len(dl), err)
	}
}
