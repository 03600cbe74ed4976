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
)

// A consumer killed with SIGKILL mid-job: its claim goes with its session
// and the item is delivered again, with Attempt 2, ahead of later items.
func TestKilledConsumerRedelivers(t *testing.T) {
	srv := setup(t)
	bin := buildChild(t, "consumer")
	s := connect(t, srv.Addrs())
	p := queuePath(t, srv.Addrs())
	q := newQueue(t, s, p)
	ctx := bg(t, 60*time.Second)
	first, err := q.Put(ctx, []byte("first"))
	require.NoError(t, err)
	second, err := q.Put(ctx, []byte("second"))
	require.NoError(t, err)

	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "FQ_ADDRS="+strings.Join(srv.Addrs(), ","), "FQ_PATH="+p)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "took "+first+" 1\n", line)

	require.NoError(t, cmd.Process.Kill()) // SIGKILL: no goodbye to the server
	_ = cmd.Wait()                         // "signal: killed"
	killed := time.Now()

	// While the dead consumer's session lingers, its claim stands and the
	// next item is served.
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
