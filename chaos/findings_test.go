package chaos_test

import (
	"bufio"
	"context"
	"flag"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

var findings = flag.Bool("chaos.findings", false, "run the tests of what the chaos runs found")

// A holder stopped (SIGSTOP) past its session timeout has lost its lock:
// its session expired and another client holds the lock. Woken, it
// unlocks at once. Unlock must then say the lease was lost (ErrLockLost),
// and the lease's Err too: a holder that is told "released" believes its
// critical section was exclusive.
//
// Found by the chaos suite: Unlock sometimes returns nil here. The release
// finds the connection closed (the server dropped it at expiry), is sent
// again once the client has reconnected, and go-zookeeper reconnects by
// opening a NEW session on the same *zk.Conn; the delete sent on it finds
// no node, which the owner takes for "an earlier try of ours landed".
func TestUnlockAfterLossReportsLoss(t *testing.T) {
	if !*findings {
		t.Skip("go test ./chaos -chaos.findings")
	}
	zktest.CheckGoroutines(t)
	c := zktest.StartCluster(t, 3)
	bin := zktest.BuildProgram(t, "./testdata/pausedholder")
	s := zktest.Connect(t, c.Addrs())
	const rounds = 10
	wrong := 0
	for i := range rounds {
		path := zktest.Path(t, "/findings")
		cmd := exec.Command(bin, strings.Join(c.Addrs(), ","), path)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(stdout)
		if !lines.Scan() || !strings.HasPrefix(lines.Text(), "locked") {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child: %q", lines.Text())
		}
		cmd.Process.Signal(syscall.SIGSTOP)
		// Take the lock: the child's session has expired once we hold it.
		m, err := zklock.NewMutex(s, path)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		l, err := m.Lock(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		stdin.Write([]byte("unlock\n")) // read the moment it wakes
		cmd.Process.Signal(syscall.SIGCONT)
		var got []string
		for lines.Scan() {
			got = append(got, lines.Text())
		}
		cmd.Wait()
		if len(got) != 2 || !strings.Contains(got[0], "lock lost") || !strings.Contains(got[1], "lock lost") {
			wrong++
			t.Errorf("round %d: another client holds the lock, and the woken holder's Unlock and Err say %q", i, got)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		l.Unlock(ctx)
		cancel()
	}
	t.Logf("%d of %d rounds reported a lost lease as released", wrong, rounds)
}
