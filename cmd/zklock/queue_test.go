package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// run runs `zklock args...` to completion and returns its stdout; it fails
// the test unless the exit status is want.
func run(t *testing.T, addr string, want int, args ...string) string {
	t.Helper()
	cmd := zklockCmd(t, addr, args...)
	if got := status(t, cmd); got != want {
		t.Fatalf("zklock %q: exit status %d, want %d; stderr:\n%s", args, got, want, stderr(cmd))
	}
	return stdout(cmd)
}

// runJSON runs `zklock args...`, which must exit 0, and decodes its stdout
// into v.
func runJSON(t *testing.T, addr string, v any, args ...string) {
	t.Helper()
	out := run(t, addr, 0, args...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("zklock %q: %v; stdout:\n%s", args, err, out)
	}
}

// queueCounts returns the pending items and dead letters `zklock queue ls
// -json` counts.
func queueCounts(t *testing.T, addr, path string) (pending, dead int) {
	t.Helper()
	ls := queueState(t, addr, path)
	return ls.Pending, ls.Dead
}

// queueState returns what `zklock queue ls -json` says.
func queueState(t *testing.T, addr, path string) jsonQueueLs {
	t.Helper()
	var ls jsonQueueLs
	runJSON(t, addr, &ls, "queue", "ls", "-json", path)
	if ls.Path != path {
		t.Fatalf("queue ls -json: path %q, want %q", ls.Path, path)
	}
	return ls
}

// readFile returns a file's content, failing the test if it cannot.
func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// withStderrFile sends cmd's stderr to a file, which the test may read
// while cmd runs (a bytes.Buffer would be written concurrently), and
// returns its name.
func withStderrFile(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "stderr")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	cmd.Stderr = f
	return name
}

// waitFor waits until cond holds, failing the test with what() after 30s.
func waitFor(t *testing.T, cond func() bool, what func() string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal(what())
}

// TestQueuePutTake puts items from arguments and stdin and takes them with
// -once and in a loop: the item's data on CMD's stdin, its id and attempt
// in the environment, ack on exit 0, back in its place otherwise.
func TestQueuePutTake(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	dir := t.TempDir()

	ids := strings.Fields(run(t, addr, 0, "queue", "put", path, "a", "b"))
	put := zklockCmd(t, addr, "queue", "put", "-json", path)
	put.Stdin = strings.NewReader("c\nd\n")
	if got := status(t, put); got != 0 {
		t.Fatalf("queue put from stdin: exit status %d; stderr:\n%s", got, stderr(put))
	}
	var fromStdin jsonPut
	if err := json.Unmarshal([]byte(stdout(put)), &fromStdin); err != nil {
		t.Fatalf("queue put -json: %v: %s", err, stdout(put))
	}
	ids = append(ids, fromStdin.IDs...)
	keyed := strings.TrimSpace(run(t, addr, 0, "queue", "put", "-key", "k1", path, "e"))
	if again := strings.TrimSpace(run(t, addr, 0, "queue", "put", "-key", "k1", path, "e")); again != keyed {
		t.Errorf("queue put -key again: id %q, want the first put's %q", again, keyed)
	}
	ids = append(ids, keyed)
	if len(ids) != 5 || !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != 5 {
		t.Fatalf("ids %q: want 5 distinct ids in queue order", ids)
	}
	if p, d := queueCounts(t, addr, path); p != 5 || d != 0 {
		t.Fatalf("queue ls: %d pending, %d dead; want 5, 0", p, d)
	}
	want := regexp.MustCompile(`^QUEUE +PENDING +IN-PROGRESS +DELAYED +DEAD +CONSUMERS +WAITING +DISPATCHER\n` +
		regexp.QuoteMeta(path) + ` +5 +0 +0 +0 +0 +0 +-\n$`)
	if out := run(t, addr, 0, "queue", "ls", path); !want.MatchString(out) {
		t.Errorf("queue ls printed:\n%s\nwant a match for %s", out, want)
	}

	data, env := filepath.Join(dir, "data"), filepath.Join(dir, "env")
	takeOnce := func(want int, script string, flags ...string) {
		t.Helper()
		args := append(append([]string{"queue", "take", "-once"}, flags...), path, "--", "sh", "-c",
			`printf '%s %s' "$ZKLOCK_JOB_ID" "$ZKLOCK_JOB_ATTEMPT" > "$2"; cat > "$1"; `+script, "sh", data, env)
		run(t, addr, want, args...)
	}
	check := func(wantData, wantEnv string) {
		t.Helper()
		if got := readFile(t, data); got != wantData {
			t.Errorf("CMD's stdin: %q, want %q", got, wantData)
		}
		if got := readFile(t, env); got != wantEnv {
			t.Errorf("ZKLOCK_JOB_ID and ZKLOCK_JOB_ATTEMPT: %q, want %q", got, wantEnv)
		}
	}
	takeOnce(0, "")
	check("a", ids[0]+" 1")
	takeOnce(3, "exit 3", "-backoff", "0") // given back at its place, at once: delivered next
	check("b", ids[1]+" 1")
	takeOnce(0, "")
	check("b", ids[1]+" 2")
	if p, _ := queueCounts(t, addr, path); p != 3 {
		t.Fatalf("queue ls after two acks: %d pending, want 3", p)
	}

	// The loop takes the rest, in order, and stops cleanly on SIGTERM
	// once it is waiting for more.
	out := filepath.Join(dir, "out")
	loop := zklockCmd(t, addr, "-v", "queue", "take", path, "--", "sh", "-c", `cat >> "$1"; echo >> "$1"`, "sh", out)
	errFile := withStderrFile(t, loop)
	if err := loop.Start(); err != nil {
		t.Fatal(err)
	}
	// The last item done (Work acks it, even as it stops): from then on a
	// signal stops the loop, not CMD.
	settled := fmt.Sprintf("msg=done id=%s ack=true", ids[4])
	waitFor(t, func() bool { return strings.Contains(readFile(t, errFile), settled) },
		func() string { return "the loop did not ack the last item; stderr:\n" + readFile(t, errFile) })
	loop.Process.Signal(syscall.SIGTERM)
	if err := loop.Wait(); err != nil {
		t.Fatalf("take loop after SIGTERM: %v, want exit status 0; stderr:\n%s", err, readFile(t, errFile))
	}
	if got := readFile(t, out); got != "c\nd\ne\n" {
		t.Errorf("the loop's CMDs got %q, want \"c\\nd\\ne\\n\"", got)
	}
	if p, d := queueCounts(t, addr, path); p != 0 || d != 0 {
		t.Fatalf("queue ls after the loop: %d pending, %d dead; want 0, 0", p, d)
	}

	// Nothing left: -once -timeout gives up with 73; the loop with
	// -timeout stops with 0.
	run(t, addr, exitTimeout, "queue", "take", "-once", "-timeout", "100ms", path, "--", "true")
	run(t, addr, 0, "queue", "take", "-timeout", "100ms", path, "--", "true")

	// A delayed item is not pending until due; its id is the delayed
	// entry's.
	if id := run(t, addr, 0, "queue", "put", "-delay", "1h", path, "later"); !strings.HasPrefix(id, "d-") {
		t.Errorf("queue put -delay: id %q, want d-...", id)
	}
	if ls := queueState(t, addr, path); ls.Pending != 0 || ls.Delayed != 1 {
		t.Errorf("queue ls with only a delayed item: %+v, want 0 pending, 1 delayed", ls)
	}
}

// TestQueueDeadLetters sends items to the dead letters with -max-attempts,
// lists them (text and JSON, binary data as base64) and requeues one.
func TestQueueDeadLetters(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)

	run(t, addr, exitNoPath, "queue", "dead", path) // no queue there yet
	poison := strings.TrimSpace(run(t, addr, 0, "queue", "put", path, "poison"))
	if out := run(t, addr, 0, "queue", "dead", path); out != path+": no dead letters\n" {
		t.Errorf("queue dead on a new queue printed %q", out)
	}
	put := zklockCmd(t, addr, "queue", "put", path)
	put.Stdin = strings.NewReader("\xff\x00\n")
	if got := status(t, put); got != 0 {
		t.Fatalf("queue put binary: exit status %d; stderr:\n%s", got, stderr(put))
	}
	binary := strings.TrimSpace(stdout(put))

	// CMD fails on its first delivery: with -max-attempts 1, dead at once.
	run(t, addr, 1, "queue", "take", "-once", "-max-attempts", "1", path, "--", "false")
	run(t, addr, 1, "queue", "take", "-once", "-max-attempts", "1", path, "--", "false")
	if p, d := queueCounts(t, addr, path); p != 0 || d != 2 {
		t.Fatalf("queue ls: %d pending, %d dead; want 0, 2", p, d)
	}
	want := regexp.MustCompile(`^ID +ATTEMPTS +DATA\n` + regexp.QuoteMeta(poison) + ` +1 +poison\n` +
		regexp.QuoteMeta(binary) + ` +1 +"\\xff\\x00"\n$`)
	if out := run(t, addr, 0, "queue", "dead", path); !want.MatchString(out) {
		t.Errorf("queue dead printed:\n%s\nwant a match for %s", out, want)
	}
	var dead jsonDead
	runJSON(t, addr, &dead, "-json", "queue", "dead", path)
	if len(dead.DeadLetters) != 2 {
		t.Fatalf("queue dead -json: %+v, want 2 dead letters", dead)
	}
	if d := dead.DeadLetters[0]; d.ID != poison || d.Attempts != 1 || d.Data == nil || *d.Data != "poison" || d.Base64 != nil {
		t.Errorf("queue dead -json: first %+v, want id %s, 1 attempt, data \"poison\"", d, poison)
	}
	if d := dead.DeadLetters[1]; d.ID != binary || d.Data != nil || string(d.Base64) != "\xff\x00" {
		t.Errorf("queue dead -json: second %+v, want id %s, data_base64 of ff 00", d, binary)
	}

	// requeue prints the new item's id: the id the item is taken with.
	newID := strings.TrimSpace(run(t, addr, 0, "queue", "requeue", path, poison))
	if !regexp.MustCompile(`^\d{10}-\d{10}$`).MatchString(newID) || newID <= binary {
		t.Errorf("queue requeue printed %q: want the new id, after %s", newID, binary)
	}
	run(t, addr, exitNoDeadLetter, "queue", "requeue", path, poison)
	if p, d := queueCounts(t, addr, path); p != 1 || d != 1 {
		t.Fatalf("queue ls after requeue: %d pending, %d dead; want 1, 1", p, d)
	}
	if out := run(t, addr, 0, "queue", "take", "-once", path, "--", "sh", "-c", `printf '%s ' "$ZKLOCK_JOB_ID"; cat`); out != newID+" poison" {
		t.Errorf("the requeued item's id and data: %q, want %q", out, newID+" poison")
	}

	// -json: the old and new ids, and the ids that are no dead letter.
	var rq jsonRequeue
	out := run(t, addr, exitNoDeadLetter, "queue", "requeue", "-json", path, binary, poison)
	if err := json.Unmarshal([]byte(out), &rq); err != nil {
		t.Fatalf("queue requeue -json: %v: %s", err, out)
	}
	if rq.Path != path || len(rq.Requeued) != 1 || rq.Requeued[0].ID != binary || rq.Requeued[0].NewID <= newID ||
		!slices.Equal(rq.NotFound, []string{poison}) {
		t.Errorf("queue requeue -json: %+v; want %s requeued after %s, %s not found", rq, binary, newID, poison)
	}
	if out := run(t, addr, 0, "queue", "take", "-once", path, "--", "sh", "-c", `printf '%s' "$ZKLOCK_JOB_ID"`); out != rq.Requeued[0].NewID {
		t.Errorf("the item requeued with -json was taken as %q, want %q", out, rq.Requeued[0].NewID)
	}
}

// TestQueueTakeSignals: a signal while take waits for an item ends it:
// with -once as an interruption (128+N), in a loop as a clean stop (0).
func TestQueueTakeSignals(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	for _, tc := range []struct {
		args []string
		sig  syscall.Signal
		want int
	}{
		{[]string{"-once"}, syscall.SIGINT, 128 + int(syscall.SIGINT)},
		{nil, syscall.SIGTERM, 0},
	} {
		args := append(append([]string{"-v", "queue", "take"}, tc.args...), path, "--", "true")
		cmd := zklockCmd(t, addr, args...)
		errFile := withStderrFile(t, cmd)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Signals are zklock's to handle from before it connects.
		waitFor(t, func() bool { return strings.Contains(readFile(t, errFile), "msg=connected") },
			func() string { return "zklock did not connect; stderr:\n" + readFile(t, errFile) })
		cmd.Process.Signal(tc.sig)
		cmd.Wait()
		if got := cmd.ProcessState.ExitCode(); got != tc.want {
			t.Errorf("%q: exit status %d after %v, want %d; stderr:\n%s", args, got, tc.sig, tc.want, readFile(t, errFile))
		}
	}
}

// TestQueueTakeClaimLost deletes the delivery's ticket from another
// session: zklock must stop CMD (SIGTERM, then SIGKILL as CMD ignores
// SIGTERM) and exit 75.
func TestQueueTakeClaimLost(t *testing.T) {
	testLossStopsCMD(t, "queue take -once", func(addr, path string) {
		run(t, addr, 0, "queue", "put", path, "job")
	}, deliveryTicket, "lost the delivery of ", "its ticket was deleted by another client")
}

// deliveryTicket returns the ticket of the one delivery under way in the
// queue at path: a delivery is the consumer's ticket in ready/, served by
// the dispatcher (data version 1), with the offer in the consumer's inbox
// in consumers/ (see the fairqueue package documentation); deleting the
// ticket loses the delivery, as the end of the consumer's session does.
func deliveryTicket(_ context.Context, s *zkrecipes.Session, path string) (string, error) {
	tickets, _, err := s.Conn().Children(path + "/ready")
	if err != nil || len(tickets) != 1 {
		return "", fmt.Errorf("tickets %v, %v; want the one delivery's", tickets, err)
	}
	ticket := path + "/ready/" + tickets[0]
	if _, st, err := s.Conn().Get(ticket); err != nil || st.Version != 1 {
		return "", fmt.Errorf("ticket %s: %+v, %v; want it served (data version 1)", ticket, st, err)
	}
	consumer, ok := ticketConsumer(tickets[0])
	if !ok {
		return "", fmt.Errorf("ticket %s names no consumer", ticket)
	}
	inbox, _, err := s.Conn().Get(path + "/consumers/" + consumer)
	if err != nil || !strings.Contains(string(inbox), tickets[0]+" ") {
		return "", fmt.Errorf("inbox of %s: %q, %v; want the offer for %s", consumer, inbox, err, tickets[0])
	}
	return ticket, nil
}

// TestQueueTakeFailingJobBacksOff: a CMD that fails on its item does not
// spin through deliveries. With the defaults the item is held back 1s after
// its first delivery and 2s after its second, so in the 3 seconds after
// the first delivery there are at most 3; each failure is said on stderr.
func TestQueueTakeFailingJobBacksOff(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	deliveries := filepath.Join(t.TempDir(), "deliveries")
	run(t, addr, 0, "queue", "put", path, "poison")

	loop := zklockCmd(t, addr, "queue", "take", path, "--", "sh", "-c", `echo "$ZKLOCK_JOB_ATTEMPT" >> "$1"; exit 1`, "sh", deliveries)
	errFile := withStderrFile(t, loop)
	if err := loop.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, deliveries, loop)
	time.Sleep(3 * time.Second)
	loop.Process.Signal(syscall.SIGTERM)
	if err := loop.Wait(); err != nil {
		t.Fatalf("take loop after SIGTERM: %v, want exit status 0; stderr:\n%s", err, readFile(t, errFile))
	}
	got := strings.Fields(readFile(t, deliveries))
	t.Logf("deliveries in the 3s after the first: %q; stderr:\n%s", got, readFile(t, errFile))
	if len(got) > 3 {
		t.Fatalf("%d deliveries in the 3s after the first, want at most 3 (held back 1s, then 2s)", len(got))
	}
	for i, attempt := range got {
		wantLine := fmt.Sprintf("zklock: queue take %s: item %s: CMD failed (status 1) on delivery %d of 5: given back, delivered again in %v at the soonest\n",
			path, "0000000000-0000000000", i+1, time.Second<<i)
		if attempt != strconv.Itoa(i+1) || !strings.Contains(readFile(t, errFile), wantLine) {
			t.Errorf("delivery %d: ZKLOCK_JOB_ATTEMPT %s; stderr lacks %q", i+1, attempt, wantLine)
		}
	}
}

// TestQueueTakeDeadLetterAfterDefaultAttempts: an item CMD fails on is
// moved to the dead letters at its 5th delivery, by default, and the loop
// goes on (here to its -timeout); stderr says so.
func TestQueueTakeDeadLetterAfterDefaultAttempts(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	deliveries := filepath.Join(t.TempDir(), "deliveries")
	id := strings.TrimSpace(run(t, addr, 0, "queue", "put", path, "poison"))

	loop := zklockCmd(t, addr, "queue", "take", "-backoff", "10ms", "-timeout", "3s", path, "--",
		"sh", "-c", `echo "$ZKLOCK_JOB_ATTEMPT" >> "$1"; exit 7`, "sh", deliveries)
	if err := loop.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- loop.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("take loop: %v, want exit status 0 once no item came for 3s; stderr:\n%s", err, stderr(loop))
		}
	case <-time.After(60 * time.Second):
		loop.Process.Kill()
		<-done
		t.Fatalf("take loop still running after 60s: the item was never set aside; %d deliveries; stderr:\n%.2000s",
			len(strings.Fields(readFile(t, deliveries))), stderr(loop))
	}
	if got := readFile(t, deliveries); got != "1\n2\n3\n4\n5\n" {
		t.Errorf("deliveries %q, want 1 to 5", got)
	}
	var dead jsonDead
	runJSON(t, addr, &dead, "queue", "dead", "-json", path)
	if len(dead.DeadLetters) != 1 || dead.DeadLetters[0].ID != id || dead.DeadLetters[0].Attempts != 5 {
		t.Errorf("queue dead -json: %+v, want %s after 5 attempts", dead, id)
	}
	errs := stderr(loop)
	for i, d := range []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond} {
		want := fmt.Sprintf("item %s: CMD failed (status 7) on delivery %d of 5: given back, delivered again in %v at the soonest\n", id, i+1, d)
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	want := fmt.Sprintf("zklock: queue take %s: item %s: CMD failed (status 7) on delivery 5 of 5: moved to the dead letters (see zklock queue dead %s)\n", path, id, path)
	if !strings.Contains(errs, want) {
		t.Errorf("stderr lacks %q:\n%s", want, errs)
	}
}

// -zk takes Java's connect string with a chroot: the queue's PATH is under
// it on the server, and nothing is made outside of it.
func TestChrootForm(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	admin := zktest.Connect(t, []string{addr})
	root := fmt.Sprintf("/zklock-cmd-chroot-%d", time.Now().UnixNano())
	if _, err := admin.Conn().Create(root, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteTree(admin.Conn(), root) })
	zkArg := addr + root
	if out := run(t, zkArg, 0, "queue", "put", "/q", "one", "two"); len(strings.Fields(out)) != 2 {
		t.Fatalf("queue put printed %q, want two ids", out)
	}
	if p, d := queueCounts(t, zkArg, "/q"); p != 2 || d != 0 {
		t.Fatalf("queue ls in the chroot: %d pending, %d dead; want 2, 0", p, d)
	}
	if ok, _, err := admin.Conn().Exists(root + "/q"); err != nil || !ok {
		t.Fatalf("the queue is not under the chroot on the server: %v %v", ok, err)
	}
	if ok, _, err := admin.Conn().Exists("/q"); err != nil || ok {
		t.Fatalf("a queue outside the chroot: %v %v", ok, err)
	}
}

// deleteTree deletes p and everything under it.
func deleteTree(conn *zk.Conn, p string) {
	children, _, _ := conn.Children(p)
	for _, c := range children {
		deleteTree(conn, p+"/"+c)
	}
	conn.Delete(p, -1)
}

// TestQueueLs: queue ls counts the items pending, in progress (handed out
// and not settled: CMD running, and with -prefetch the items held ahead)
// and delayed, the consumers and those waiting for an item, and names the
// dispatcher by its session. A queue take that exits leaves none of its
// nodes behind: no ticket in ready/, no inbox in consumers/, no election
// node in dispatch/.
func TestQueueLs(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	s := zktest.Connect(t, []string{addr})
	busy, idle, ahead := lockPath(t), lockPath(t)+"-idle", lockPath(t)+"-ahead"
	for _, p := range []string{busy, idle, ahead} {
		t.Cleanup(func() { deleteTree(s.Conn(), p) })
	}
	dir := t.TempDir()

	// takeBg starts a queue take (-v: it logs its session) and returns it
	// with the file its stderr goes to.
	takeBg := func(args ...string) (*exec.Cmd, string) {
		t.Helper()
		cmd := zklockCmd(t, addr, append([]string{"-v", "queue", "take"}, args...)...)
		errFile := withStderrFile(t, cmd)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, errFile
	}
	sessionOf := func(errFile string) string {
		t.Helper()
		var m []string
		waitFor(t, func() bool {
			m = regexp.MustCompile(`msg=connected session=(0x[0-9a-f]+)`).FindStringSubmatch(readFile(t, errFile))
			return m != nil
		}, func() string { return "zklock did not say its session; stderr:\n" + readFile(t, errFile) })
		return m[1]
	}
	check := func(path string, want jsonQueueLs, dispatcher string) {
		t.Helper()
		got := queueState(t, addr, path)
		want.Path = path
		d := got.Dispatcher
		got.Dispatcher = nil
		if got != want {
			t.Errorf("queue ls -json %s: %+v, want %+v", path, got, want)
		}
		switch {
		case dispatcher == "" && d != nil:
			t.Errorf("queue ls -json %s: dispatcher %+v, want none", path, d)
		case dispatcher == "":
		case d == nil:
			t.Errorf("queue ls -json %s: no dispatcher, want session %s", path, dispatcher)
		case d.Session != dispatcher || !strings.HasPrefix(d.Consumer, fmt.Sprintf("%016s-", dispatcher[2:])) ||
			!strings.HasPrefix(d.Node, path+"/dispatch/"):
			t.Errorf("queue ls -json %s: dispatcher %+v, want session %s's", path, d, dispatcher)
		}
	}

	// A loop whose CMD runs on the first of three items: one in progress,
	// two pending; the one consumer is not waiting, and dispatches.
	run(t, addr, 0, "queue", "put", busy, "a", "b", "c")
	run(t, addr, 0, "queue", "put", "-delay", "1h", busy, "later")
	started := filepath.Join(dir, "busy")
	loop, loopErr := takeBg(busy, "--", "sh", "-c", `touch "$1"; exec sleep 60`, "sh", started)
	waitFile(t, started, loop)
	check(busy, jsonQueueLs{Pending: 2, InProgress: 1, Delayed: 1, Consumers: 1}, sessionOf(loopErr))
	want := regexp.MustCompile(`^QUEUE +PENDING +IN-PROGRESS +DELAYED +DEAD +CONSUMERS +WAITING +DISPATCHER\n` +
		regexp.QuoteMeta(busy) + ` +2 +1 +1 +0 +1 +0 +` + sessionOf(loopErr) + `\n$`)
	if out := run(t, addr, 0, "queue", "ls", busy); !want.MatchString(out) {
		t.Errorf("queue ls printed:\n%s\nwant a match for %s", out, want)
	}

	// -prefetch 1 holds the next item too while CMD runs.
	run(t, addr, 0, "queue", "put", ahead, "a", "b", "c")
	aheadStarted := filepath.Join(dir, "ahead")
	prefetching, prefetchErr := takeBg("-prefetch", "1", ahead, "--", "sh", "-c", `touch "$1"; exec sleep 60`, "sh", aheadStarted)
	waitFile(t, aheadStarted, prefetching)
	waitFor(t, func() bool { return queueState(t, addr, ahead).InProgress == 2 }, func() string {
		return fmt.Sprintf("-prefetch 1: %+v, want 2 items in progress", queueState(t, addr, ahead))
	})
	check(ahead, jsonQueueLs{Pending: 1, InProgress: 2, Consumers: 1}, sessionOf(prefetchErr))

	// A consumer waiting on an empty queue.
	once, onceErr := takeBg("-once", "-timeout", "60s", idle, "--", "true")
	waitFor(t, func() bool {
		// Until the consumer has made its nodes, there is no queue.
		ls := zklockCmd(t, addr, "queue", "ls", "-json", idle)
		return status(t, ls) == 0 && strings.Contains(stdout(ls), `"waiting":1`)
	}, func() string {
		return fmt.Sprintf("queue ls %s: %+v, want the consumer waiting; stderr:\n%s", idle, queueState(t, addr, idle), readFile(t, onceErr))
	})
	check(idle, jsonQueueLs{Consumers: 1, Waiting: 1}, sessionOf(onceErr))

	// Each stops on SIGTERM, and leaves nothing of its own.
	for _, p := range []struct {
		cmd  *exec.Cmd
		path string
	}{{loop, busy}, {prefetching, ahead}, {once, idle}} {
		p.cmd.Process.Signal(syscall.SIGTERM)
		p.cmd.Wait()
		for _, d := range []string{"ready", "consumers", "dispatch"} {
			if left, err := listChildren(s, p.path+"/"+d); err != nil || len(left) > 0 {
				t.Errorf("%s/%s after queue take exited: %q, %v; want nothing", p.path, d, left, err)
			}
		}
	}
	check(idle, jsonQueueLs{}, "")
	// The CMDs died of the SIGTERM: their items were given back, held back
	// 1s (-backoff); the one held ahead given back at once.
	check(busy, jsonQueueLs{Pending: 3, Delayed: 1}, "")
	check(ahead, jsonQueueLs{Pending: 3}, "")
}
