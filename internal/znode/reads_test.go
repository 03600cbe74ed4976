package znode

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestReadsWaitJoinsErrors(t *testing.T) {
	defer goleak.VerifyNone(t)
	errA, errB := errors.New("a"), errors.New("b")
	var r Reads
	r.Do(func() error { return errA })
	r.Do(func() error { return nil })
	r.Do(func() error { return errB })
	err := r.Wait(context.Background())
	require.ErrorIs(t, err, errA)
	require.ErrorIs(t, err, errB)
}

func TestReadsWaitEndsWithCtx(t *testing.T) {
	defer goleak.VerifyNone(t)
	release := make(chan struct{})
	cause := errors.New("caller gave up")
	ctx, cancel := context.WithCancelCause(context.Background())
	var r Reads
	done := make(chan struct{})
	r.Do(func() error { <-release; close(done); return nil })
	cancel(cause)
	require.ErrorIs(t, r.Wait(ctx), cause, "Wait returns ctx's cause while a request is out")
	close(release)
	<-done // the request went on after Wait gave up
}

func TestReadsWaitAfterEveryRequestIsBack(t *testing.T) {
	defer goleak.VerifyNone(t)
	var r Reads
	var wg sync.WaitGroup
	wg.Add(1)
	r.Do(func() error { defer wg.Done(); return nil })
	wg.Wait()
	// Back before Wait, and then a second round on the same Reads.
	require.NoError(t, r.Wait(context.Background()))
	release := make(chan struct{})
	r.Do(func() error { <-release; return nil })
	go close(release)
	require.NoError(t, r.Wait(context.Background()))
}

func TestPoolReusesIdleGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t)
	stop := make(chan struct{})
	p := NewPool(stop, make(chan struct{}))
	ran := 0
	for range 100 {
		r := Reads{Pool: p}
		r.Do(func() error { ran++; return nil })
		require.NoError(t, r.Wait(context.Background()))
	}
	require.Equal(t, 100, ran, "every request ran")
	// One at a time, they ran on a goroutine or two that stayed (a request
	// sent before the last one's goroutine is idle again starts another),
	// not on one each.
	extra := poolGoroutines()
	require.True(t, extra >= 1 && extra <= 4, "%d goroutines stay for 100 requests one at a time", extra)
	close(stop)
}

func TestPoolLeavesWhenOver(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := NewPool(make(chan struct{}), make(chan struct{}))
	over := make(chan struct{})
	p.over = over
	var r Reads
	r.Pool = p
	for range 8 {
		r.Do(func() error { return nil })
	}
	require.NoError(t, r.Wait(context.Background()))
	close(over)
}

// poolGoroutines counts the goroutines running a Pool's loop, from every
// goroutine's stack: a count of all goroutines would take in those of the
// test before, still ending.
func poolGoroutines() int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "znode.(*Pool).run(")
}
