package fairqueue_test

import (
	"context"
	"errors"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// setup returns the shared test server and checks, once the test and its
// clean-ups are done, that no goroutine was left behind.
func setup(t *testing.T) *zktest.Server {
	t.Helper()
	srv := zktest.Start(t)
	zktest.CheckGoroutines(t)
	return srv
}

func connect(t testing.TB, addrs []string, opts ...zkrecipes.Option) *zkrecipes.Session {
	t.Helper()
	return zktest.Connect(t, addrs, opts...)
}

// queuePath is a path no other test uses. When the test ends the queue must
// hold nothing: no item, claim, consumer in line or dead letter (empty
// directories are containers the server reaps).
func queuePath(t *testing.T, addrs []string) string {
	t.Helper()
	p := zktest.Path(t, "/fairqueue-test")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := zkrecipes.Connect(ctx, addrs)
		require.NoError(t, err)
		defer s.Close()
		zktest.CatchUp(t, s.Conn(), p)
		left := leaves(t, s.Conn(), p, 0)
		require.Empty(t, left[:min(len(left), 5)], "%d nodes left behind in %s", len(left), p)
	})
	return p
}

// leaves lists the nodes under p that are not directories of the layout:
// anything at depth 2 (ready/x, consumers/x, dead/x, held/x) or 3
// (items/b/i), but the blobs of a bucket that is there (items/p/x: they go
// with it).
func leaves(t *testing.T, c *zk.Conn, p string, depth int) []string {
	if dir, n := path.Split(p); depth == 2 && strings.HasPrefix(n, "p") && strings.HasSuffix(dir, "/items/") {
		if ok, _, err := c.Exists(dir + "b" + n[1:]); err == nil && ok {
			return nil
		}
	}
	names, _, err := c.Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	require.NoError(t, err)
	var out []string
	for _, n := range names {
		child := p + "/" + n
		if depth+1 >= 2 && !(depth+1 == 2 && strings.HasSuffix(p, "/items")) {
			out = append(out, child)
			continue
		}
		out = append(out, leaves(t, c, child, depth+1)...)
	}
	return out
}

func bg(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// buildChild builds the program in testdata/<name> and returns its path.
func buildChild(t *testing.T, name string) string {
	t.Helper()
	return zktest.BuildProgram(t, "./testdata/"+name)
}

// got is a job one consumer took: its id and attempt, and how many multis
// the consumers' sessions had sent (on their wire) when its Take returned.
type got struct {
	id      string
	attempt int
}

// assertOrder checks the order promise on the jobs one consumer took, in
// order: no id is lower than one taken before, except an item that came
// back, which its Attempt tells (above 1): a Nack, a lost claim, or an
// offer left unclaimed (passed over, or given up by a Take that ended),
// since an offer counts its hand-out as a claim does. It returns how many
// items came back out of order.
func assertOrder(t *testing.T, jobs []got) int {
	t.Helper()
	back, high := 0, ""
	for _, j := range jobs {
		if j.id > high {
			high = j.id
			continue
		}
		back++
		assert.Greater(t, j.attempt, 1, "%s taken after %s, and it did not come back (attempt %d)", j.id, high, j.attempt)
	}
	return back
}

// deleteTicket deletes, as another client would, the ticket that j's
// delivery stands on: the delivery is lost.
func deleteTicket(t *testing.T, other *zkrecipes.Session, p string, j *fairqueue.Job) error {
	t.Helper()
	return other.Conn().Delete(fairqueue.TicketOf(j), -1)
}

// waiting lists the tickets in p's ready/ that wait for an item (not
// served yet: data version 0), read through s.
func waiting(t *testing.T, s *zkrecipes.Session, p string) []string {
	t.Helper()
	var out []string
	for _, n := range names(t, s, p+"/ready") {
		if _, st, err := s.Conn().Exists(p + "/ready/" + n); err == nil && st != nil && st.Version == 0 {
			out = append(out, n)
		}
	}
	return out
}

// deadLetters waits, up to wait, for q's dead letters to hold any, and
// returns them.
func deadLetters(t *testing.T, ctx context.Context, q *fairqueue.Queue, wait time.Duration, msgAndArgs ...any) []fairqueue.DeadLetter {
	t.Helper()
	var dead []fairqueue.DeadLetter
	require.Eventually(t, func() bool {
		var err error
		dead, err = q.DeadLetters(ctx)
		require.NoError(t, err)
		return len(dead) > 0
	}, wait, 5*time.Millisecond, msgAndArgs...)
	return dead
}

// tooLargeForAName pads s past what an item's name holds: items of a
// PutMany whose payloads all fit their names are not put in a blob.
func tooLargeForAName(s string) string {
	return s + strings.Repeat(".", fairqueue.InlineMax)
}

// standFirst makes a Queue on s that stands first at p, so is its
// dispatcher: its TryTake of the empty queue is answered by itself.
func standFirst(t *testing.T, ctx context.Context, s *zkrecipes.Session, p string, opts ...fairqueue.Option) *fairqueue.Queue {
	t.Helper()
	d := newQueue(t, s, p, opts...)
	_, err := d.TryTake(ctx)
	require.ErrorIs(t, err, fairqueue.ErrEmpty, "d stands first: the dispatcher")
	return d
}
