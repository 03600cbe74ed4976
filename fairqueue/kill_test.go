package fairqueue_test

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes/fairqueue"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// startConsumer runs testdata/consumer against the queue at p: it takes
// one job, says so, and blocks until killed. It returns the process and
// the line it printed.
func startConsumer(t *testing.T, addrs []string, p string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(buildChild(t, "consumer"))
	cmd.Env = append(os.Environ(), "FQ_ADDRS="+strings.Join(addrs, ","), "FQ_PATH="+p)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	return cmd, line
}

// A consumer killed with SIGKILL mid-job: its delivery goes with its
// session and the item is delivered again, with Attempt 2, ahead of later
// items; while its session lingers, the others are served (the dispatcher
// is another process).
func TestKilledConsumerRedelivers(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	p := queuePath(t, srv.Addrs())
	q := newQueue(t, s, p)
	ctx := bg(t, 60*time.Second)
	// q takes first: it is the dispatcher.
	_, err := q.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty)
	first, err := q.Put(ctx, []byte("first"))
	require.NoError(t, err)
	second, err := q.Put(ctx, []byte("second"))
	require.NoError(t, err)

	cmd, line := startConsumer(t, srv.Addrs(), p)
	require.Equal(t, "took "+first+" 1\n", line)
	require.NoError(t, cmd.Process.Kill()) // SIGKILL: no goodbye to the server
	_ = cmd.Wait()                         // "signal: killed"
	killed := time.Now()

	// While the dead consumer's session lingers, its delivery stands and
	// the next item is served.
	j, err := q.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, second, j.ID())
	require.NoError(t, j.Ack(ctx))

	// Once the server expires that session, the first item comes back.
	j, err = q.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, first, j.ID())
	require.Equal(t, "first", string(j.Data()))
	require.Equal(t, 2, j.Attempt())
	t.Logf("redelivered %v after the kill", time.Since(killed).Round(time.Millisecond))
	require.NoError(t, j.Ack(ctx))
	_, err = q.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty)
}

// The dispatcher killed with SIGKILL while it holds a job itself: a
// consumer and the dispatcher die together. Hand-out stops until its
// session expires (a new dispatcher is elected only then); then the next
// Queue that takes dispatches, and the item the dead one held comes back
// first, with Attempt 2 (free at or below the high mark: handed out
// before), and the other with Attempt 1. Nothing is lost or delivered
// twice.
func TestKilledDispatcherHandsOverAtExpiry(t *testing.T) {
	srv := setup(t)
	s := connect(t, srv.Addrs())
	p := queuePath(t, srv.Addrs())
	q := newQueue(t, s, p)
	ctx := bg(t, 60*time.Second)
	first, err := q.Put(ctx, []byte("first"))
	require.NoError(t, err)
	second, err := q.Put(ctx, []byte("second"))
	require.NoError(t, err)

	// The child takes first: it is the dispatcher, and holds the first item.
	cmd, line := startConsumer(t, srv.Addrs(), p)
	require.Equal(t, "took "+first+" 1\n", line)
	zktest.CatchUp(t, s.Conn(), p) // the child's session made its election node
	leader, _, err := s.Conn().Children(p + "/dispatch")
	require.NoError(t, err)
	require.Len(t, leader, 1, "the child stands alone as dispatcher")
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	killed := time.Now()

	j, err := q.Take(ctx)
	require.NoError(t, err)
	took := time.Since(killed)
	// The dispatcher's node went with its session: only then could q be
	// elected and hand out.
	ok, _, err := s.Conn().Exists(p + "/dispatch/" + leader[0])
	require.NoError(t, err)
	require.False(t, ok, "handed out while the killed dispatcher's session lived")
	require.Equal(t, first, j.ID(), "the dead one's item comes back first")
	require.Equal(t, 2, j.Attempt(), "it was handed out before: Attempt counts it")
	require.NoError(t, j.Ack(ctx))
	j, err = q.Take(ctx)
	require.NoError(t, err)
	require.Equal(t, second, j.ID())
	require.Equal(t, 1, j.Attempt())
	require.NoError(t, j.Ack(ctx))
	t.Logf("hand-out stopped %v after the kill (the child's session timeout: 2s)", took.Round(time.Millisecond))
	_, err = q.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty)
}
