//go:build interop

package interop_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// countingProxy forwards connections to server through a zktest.Counter,
// so that what a Java or Python client sends and is sent is counted on the
// wire; it returns the address to give the client.
func countingProxy(t *testing.T, server string, c *zktest.Counter) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := c.Dial("tcp", server, 5*time.Second)
			if err != nil {
				down.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, down, up)
			mu.Unlock()
			wg.Add(2)
			pipe := func(dst, src net.Conn) {
				defer wg.Done()
				_, _ = io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			go pipe(up, down)
			go pipe(down, up)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// timedHelper starts a Curator ("java") or kazoo ("python") locker in its
// "timed" mode, connected to addr, on path.
func timedHelper(t *testing.T, ctx context.Context, name, addr, path string) *helper {
	t.Helper()
	var h *helper
	switch name {
	case "java":
		h = startHelper(t, ctx, "Curator", "java", "-cp", compileJava(t), "CuratorLocker", "timed", addr, path)
	case "python":
		h = startHelper(t, ctx, "kazoo", python, "kazoo_locker.py", "timed", addr, path)
	default:
		t.Fatalf("unknown helper %q", name)
	}
	require.Equal(t, "ready", h.expect(t, 60*time.Second), name)
	return h
}

// do sends cmd and returns the reply's fields after the first, which must
// be want.
func (h *helper) do(t *testing.T, cmd, want string) []string {
	t.Helper()
	h.send(t, cmd)
	f := strings.Fields(h.expect(t, 60*time.Second))
	require.NotEmpty(t, f)
	require.Equal(t, want, f[0], "%s: reply to %q", h.name, cmd)
	return f[1:]
}

// micros reads a helper's microseconds.
func micros(t *testing.T, s string) time.Duration {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err)
	return time.Duration(n) * time.Microsecond
}

// keptIdle returns a CachedMutex on s that holds path, kept idle, and the
// path of its node.
func keptIdle(t *testing.T, ctx context.Context, s *zkrecipes.Session, path string, opts ...zklock.Option) (*zklock.CachedMutex, string) {
	t.Helper()
	m, err := zklock.NewCachedMutex(s, path, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Release(context.Background()) })
	for range 10 {
		l, err := m.Lock(ctx)
		require.NoError(t, err)
		f := l.Fence()
		require.NoError(t, l.Unlock(ctx))
		if f.Section >= 2 {
			cs, err := m.Contenders(ctx)
			require.NoError(t, err)
			require.Len(t, cs, 1)
			require.True(t, cs[0].Holds && cs[0].Cached)
			return m, cs[0].Path
		}
	}
	t.Fatal("no section granted from a kept holding in 10 Locks")
	return nil, ""
}

// Curator's InterProcessMutex and kazoo's Lock, joining a lock kept idle
// by a CachedMutex, are granted after the holder's one write (its release)
// and at most one notification about the holder's node, both counted on
// the wire.
func TestCachedReleasesOnForeignJoin(t *testing.T) {
	for _, name := range []string{"java", "python"} {
		t.Run(name, func(t *testing.T) {
			srv, _, path := setup(t)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			var theirs zktest.Counter
			h := timedHelper(t, ctx, name, countingProxy(t, srv.Addrs()[0], &theirs), path)
			free := micros(t, h.do(t, "lock", "held")[0])
			h.do(t, "unlock", "released")

			hw := &zktest.Counter{Path: path}
			hs := connect(t, srv.Addrs(), zkrecipes.WithDialer(hw.Dial))
			m, node := keptIdle(t, ctx, hs, path, zklock.WithIdleRelease(time.Minute))
			before := hw.ByOp()
			behind := micros(t, h.do(t, "lock", "held")[0])
			sent := map[int32]int64{}
			for op, n := range hw.ByOp() {
				if d := n - before[op]; d > 0 {
					sent[op] = d
				}
			}
			notes := theirs.NotificationsOn(node)
			t.Logf("%s: acquire took %v on a free lock, %v behind an idle kept holding; the holder sent %v; %s got %d notifications about its node",
				h.name, free, behind, sent, h.name, notes)
			require.Equal(t, map[int32]int64{zktest.OpMulti: 1}, sent, "the holder sent more than its release")
			require.LessOrEqual(t, notes, int64(1), "notifications about the holder's node")
			h.do(t, "unlock", "released")

			l, err := m.Lock(ctx)
			require.NoError(t, err)
			require.Zero(t, l.Fence().Section, "a holding kept after one given up to a contender")
			require.NoError(t, l.Unlock(ctx))
			h.stdin.Close()
			require.Empty(t, h.wait())
		})
	}
}

var (
	price    = flag.Bool("price", false, "run TestCachedPrice: what the CachedMutex wins and costs, beside zk.Lock, Curator and kazoo")
	priceOut = flag.String("price.out", "", "also write TestCachedPrice's tables to this file")
)

// TestCachedPrice measures, side by side in one run on one server, what the
// CachedMutex wins and what it costs others, next to zk.Lock, Curator's
// InterProcessMutex and kazoo's Lock:
//
//  1. one process re-locking with nobody else: cycles/s and requests per
//     cycle, rounds in rotating order;
//  2. what a waiter pays behind an idle kept holding, against a free lock:
//     its acquire's latency, for each client;
//  3. a waiter locking every 100 ms while one process re-locks as fast as
//     it can, with a CachedMutex or with a Mutex: the waiter's latency;
//  4. how many sections begin after a waiter's join, for three freshness
//     windows;
//  5. what a frozen holder costs the next: an idle kept holding, and a
//     Mutex's holder inside its section.
//
// It asserts nothing but that everything worked: the figures are for
// docs/cached-mutex.md.
//
//	go test -tags interop -count=1 -v -run TestCachedPrice ./interop/ -price
func TestCachedPrice(t *testing.T) {
	if !*price {
		t.Skip("go test -tags interop -run TestCachedPrice ./interop/ -price")
	}
	srv, s, path := setup(t)
	// Its lock paths are left as containers, which the server reaps in
	// time: beside the path setup checks, not under it.
	root := path + "-price"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	var out strings.Builder
	report := func(format string, args ...any) {
		fmt.Fprintf(&out, format+"\n", args...)
	}
	n := 0
	fresh := func() string {
		n++
		return fmt.Sprintf("%s/p%d", root, n)
	}
	java := timedHelper(t, ctx, "java", srv.Addrs()[0], root+"/java")
	kazoo := timedHelper(t, ctx, "python", srv.Addrs()[0], root+"/python")
	java.do(t, "lock", "held")
	java.do(t, "unlock", "released")

	// 1. Uncontended.
	const rounds, d = 3, 3 * time.Second
	type uncontended struct {
		name string
		loop func(path string) (int64, time.Duration, int64) // cycles, elapsed, requests
	}
	goLoop := func(lock func(s *zkrecipes.Session, path string) func(context.Context) (*zklock.Lease, error)) func(string) (int64, time.Duration, int64) {
		return func(path string) (int64, time.Duration, int64) {
			var wire zktest.Counter
			s := connect(t, srv.Addrs(), zkrecipes.WithDialer(wire.Dial))
			defer s.Close()
			take := lock(s, path)
			sent := wire.Requests()
			var cycles int64
			t0 := time.Now()
			for time.Since(t0) < d {
				l, err := take(ctx)
				require.NoError(t, err)
				require.NoError(t, l.Unlock(ctx))
				cycles++
			}
			return cycles, time.Since(t0), wire.Requests() - sent
		}
	}
	cachedLock := func(opts ...zklock.Option) func(*zkrecipes.Session, string) func(context.Context) (*zklock.Lease, error) {
		return func(s *zkrecipes.Session, path string) func(context.Context) (*zklock.Lease, error) {
			m, err := zklock.NewCachedMutex(s, path, opts...)
			require.NoError(t, err)
			t.Cleanup(func() { _ = m.Release(context.Background()) })
			return m.Lock
		}
	}
	helperLoop := func(h *helper) func(string) (int64, time.Duration, int64) {
		return func(string) (int64, time.Duration, int64) {
			f := h.do(t, fmt.Sprintf("loop %g", d.Seconds()), "cycles")
			c, err := strconv.ParseInt(f[0], 10, 64)
			require.NoError(t, err)
			secs, err := strconv.ParseFloat(f[1], 64)
			require.NoError(t, err)
			return c, time.Duration(secs * float64(time.Second)), -1
		}
	}
	impls := []uncontended{
		{"go-zookeeper zk.Lock", func(path string) (int64, time.Duration, int64) {
			var wire zktest.Counter
			conn, _, err := zk.Connect(srv.Addrs(), 10*time.Second, zk.WithDialer(wire.Dial), zk.WithLogInfo(false))
			require.NoError(t, err)
			defer conn.Close()
			zl := zk.NewLock(conn, path, zk.WorldACL(zk.PermAll))
			sent := wire.Requests()
			var cycles int64
			t0 := time.Now()
			for time.Since(t0) < d {
				require.NoError(t, zl.Lock())
				require.NoError(t, zl.Unlock())
				cycles++
			}
			return cycles, time.Since(t0), wire.Requests() - sent
		}},
		{"Curator InterProcessMutex", helperLoop(java)},
		{"kazoo Lock", helperLoop(kazoo)},
		{"zklock.Mutex", goLoop(func(s *zkrecipes.Session, path string) func(context.Context) (*zklock.Lease, error) {
			m, err := zklock.NewMutex(s, path)
			require.NoError(t, err)
			return m.Lock
		})},
		{"zklock.CachedMutex, WithFreshness(0)", goLoop(cachedLock(zklock.WithFreshness(0)))},
		{"zklock.CachedMutex", goLoop(cachedLock())},
	}
	perSec := map[string][]float64{}
	perCycle := map[string]float64{}
	for r := range rounds {
		for i := range impls {
			u := impls[(i+r)%len(impls)]
			c, el, req := u.loop(fresh())
			perSec[u.name] = append(perSec[u.name], float64(c)/el.Seconds())
			if req >= 0 {
				perCycle[u.name] += float64(req) / float64(c) / rounds
			}
		}
	}
	report("1. One process re-locking, nobody else (%d rounds of %v, order rotating; median cycles/s; requests per cycle counted on the wire, pings left out)\n", rounds, d)
	report("| client | cycles/s | vs zk.Lock | vs zklock.Mutex | requests/cycle |")
	report("| --- | ---: | ---: | ---: | ---: |")
	med := func(xs []float64) float64 { s := slices.Sorted(slices.Values(xs)); return s[len(s)/2] }
	for _, u := range impls {
		rc := "not counted"
		if _, ok := perCycle[u.name]; ok {
			rc = fmt.Sprintf("%.4f", perCycle[u.name])
		}
		report("| %s | %.0f | %.2f | %.2f | %s |", u.name, med(perSec[u.name]), med(perSec[u.name])/med(perSec["go-zookeeper zk.Lock"]),
			med(perSec[u.name])/med(perSec["zklock.Mutex"]), rc)
	}

	// 2. A waiter behind an idle kept holding.
	const trials = 15
	type waiter struct {
		name string
		wait func(path string) (time.Duration, func()) // acquire's latency, and the release
	}
	helperWaiter := func(h *helper) func(string) (time.Duration, func()) {
		return func(string) (time.Duration, func()) {
			d := micros(t, h.do(t, "lock", "held")[0])
			return d, func() { h.do(t, "unlock", "released") }
		}
	}
	ws := s // the waiters' session, for ours and zk.Lock's
	zconn, _, err := zk.Connect(srv.Addrs(), 10*time.Second, zk.WithLogInfo(false))
	require.NoError(t, err)
	defer zconn.Close()
	waiters := []waiter{
		{"zklock.Mutex", func(path string) (time.Duration, func()) {
			m, err := zklock.NewMutex(ws, path)
			require.NoError(t, err)
			t0 := time.Now()
			l, err := m.Lock(ctx)
			require.NoError(t, err)
			return time.Since(t0), func() { require.NoError(t, l.Unlock(ctx)) }
		}},
		{"go-zookeeper zk.Lock", func(path string) (time.Duration, func()) {
			zl := zk.NewLock(zconn, path, zk.WorldACL(zk.PermAll))
			t0 := time.Now()
			require.NoError(t, zl.Lock())
			return time.Since(t0), func() { require.NoError(t, zl.Unlock()) }
		}},
		{"Curator", helperWaiter(java)},
		{"kazoo", helperWaiter(kazoo)},
	}
	holder := connect(t, srv.Addrs())
	report("\n2. A waiter's acquire, on a free lock and behind an idle kept holding (%d trials each, p50 / p99 of the acquire's latency)\n", trials)
	report("| waiter | free lock | behind an idle kept holding | difference (p50) |")
	report("| --- | ---: | ---: | ---: |")
	for _, w := range waiters {
		var freeLat, keptLat []time.Duration
		path := root + "/" + map[string]string{"Curator": "java", "kazoo": "python"}[w.name]
		for range trials {
			if path == root+"/" {
				path = fresh()
			}
			d, release := w.wait(path)
			release()
			freeLat = append(freeLat, d)
			m, _ := keptIdle(t, ctx, holder, path, zklock.WithIdleRelease(time.Minute))
			d, release = w.wait(path)
			release()
			keptLat = append(keptLat, d)
			require.NoError(t, m.Release(ctx))
			if _, foreign := map[string]bool{"Curator": true, "kazoo": true}[w.name]; !foreign {
				path = root + "/"
			}
		}
		report("| %s | %v / %v | %v / %v | %+v |", w.name, pct(freeLat, 50), pct(freeLat, 99), pct(keptLat, 50), pct(keptLat, 99), pct(keptLat, 50)-pct(freeLat, 50))
	}

	// 3. A waiter every 100 ms while another process re-locks flat out.
	report("\n3. A waiter locking every 100 ms (20 times) while another process re-locks as fast as it can (p50 / p99 of the waiter's acquire)\n")
	report("| waiter | beside a zklock.Mutex | beside a zklock.CachedMutex |")
	report("| --- | ---: | ---: |")
	hot := func(path string, cached bool) func() int64 {
		hs := connect(t, srv.Addrs())
		var take func(context.Context) (*zklock.Lease, error)
		if cached {
			take = cachedLock()(hs, path)
		} else {
			m, err := zklock.NewMutex(hs, path)
			require.NoError(t, err)
			take = m.Lock
		}
		hctx, stop := context.WithCancel(ctx)
		var cycles int64
		done := make(chan struct{})
		go func() {
			defer close(done)
			for hctx.Err() == nil {
				l, err := take(hctx)
				if err != nil {
					continue
				}
				cycles++
				_ = l.Unlock(ctx)
			}
		}()
		return func() int64 { stop(); <-done; return cycles }
	}
	every := map[string]func(path string) []time.Duration{
		"go-zookeeper zk.Lock": func(path string) []time.Duration {
			zl := zk.NewLock(zconn, path, zk.WorldACL(zk.PermAll))
			var ds []time.Duration
			for range 20 {
				time.Sleep(100 * time.Millisecond)
				t0 := time.Now()
				require.NoError(t, zl.Lock())
				ds = append(ds, time.Since(t0))
				require.NoError(t, zl.Unlock())
			}
			return ds
		},
	}
	for name, h := range map[string]*helper{"Curator": java, "kazoo": kazoo} {
		every[name] = func(string) []time.Duration {
			var ds []time.Duration
			for _, f := range h.do(t, "every 100 20", "waits") {
				ds = append(ds, micros(t, f))
			}
			return ds
		}
	}
	for _, name := range []string{"go-zookeeper zk.Lock", "Curator", "kazoo"} {
		var cells []string
		for _, cached := range []bool{false, true} {
			path := fresh()
			if name == "Curator" {
				path = root + "/java"
			} else if name == "kazoo" {
				path = root + "/python"
			}
			stop := hot(path, cached)
			ds := every[name](path)
			c := stop()
			cells = append(cells, fmt.Sprintf("%v / %v (%d cycles of the other)", pct(ds, 50), pct(ds, 99), c))
		}
		report("| %s | %s | %s |", name, cells[0], cells[1])
	}

	// 4. Sections begun after a waiter's join.
	report("\n4. Sections the re-locking process began after a waiter's create was answered (%d joins each)\n", trials)
	report("| freshness window | max | median | waiter's acquire p50 / p99 |")
	report("| --- | ---: | ---: | ---: |")
	for _, f := range []time.Duration{0, zklock.DefaultFreshness, 100 * time.Millisecond} {
		var bypass []float64
		var lat []time.Duration
		for range trials {
			path := fresh()
			hs := connect(t, srv.Addrs())
			m, err := zklock.NewCachedMutex(hs, path, zklock.WithFreshness(f))
			require.NoError(t, err)
			var mu sync.Mutex
			var begins []time.Time
			hctx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for hctx.Err() == nil {
					l, err := m.Lock(hctx)
					if err != nil {
						continue
					}
					mu.Lock()
					begins = append(begins, time.Now())
					mu.Unlock()
					_ = l.Unlock(ctx)
				}
			}()
			time.Sleep(100 * time.Millisecond)
			t0 := time.Now()
			p, err := zconn.Create(path+"/_c_waiter-lock-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
			require.NoError(t, err)
			joined := time.Now()
			waitFirst(t, zconn, path, p[len(path)+1:])
			lat = append(lat, time.Since(t0))
			mu.Lock()
			k := 0
			for _, b := range begins {
				if b.After(joined) {
					k++
				}
			}
			mu.Unlock()
			bypass = append(bypass, float64(k))
			require.NoError(t, zconn.Delete(p, -1))
			stop()
			<-done
			require.NoError(t, m.Release(ctx))
			hs.Close()
		}
		report("| %v | %.0f | %.0f | %v / %v |", f, slices.Max(bypass), med(bypass), pct(lat, 50), pct(lat, 99))
	}

	// 5. A frozen holder.
	report("\n5. A holder whose network freezes (session timeout 4 s): the next contender's wait\n")
	report("| frozen holder | waiter's wait |")
	report("| --- | ---: |")
	for _, cached := range []bool{true, false} {
		path := fresh()
		var net zktest.Freezer
		hs := connect(t, srv.Addrs(), zkrecipes.WithSessionTimeout(4*time.Second), zkrecipes.WithDialer(net.Dial))
		what := "zklock.Mutex, inside its section"
		if cached {
			what = "zklock.CachedMutex, kept idle"
			keptIdle(t, ctx, hs, path, zklock.WithIdleRelease(time.Minute))
		} else {
			m, err := zklock.NewMutex(hs, path)
			require.NoError(t, err)
			_, err = m.Lock(ctx)
			require.NoError(t, err)
		}
		net.Freeze()
		t0 := time.Now()
		m, err := zklock.NewMutex(ws, path)
		require.NoError(t, err)
		l, err := m.Lock(ctx)
		require.NoError(t, err)
		report("| %s | %v |", what, time.Since(t0).Round(time.Millisecond))
		require.NoError(t, l.Unlock(ctx))
		net.Thaw()
		hs.Close()
	}

	t.Logf("\n%s", out.String())
	if *priceOut != "" {
		require.NoError(t, os.WriteFile(*priceOut, []byte(out.String()), 0o644))
	}
	for _, h := range []*helper{java, kazoo} {
		h.stdin.Close()
		require.Empty(t, h.wait())
	}
}

// waitFirst waits until mine is first in dir's line, watching the node
// just ahead of it as Curator does.
func waitFirst(t *testing.T, conn *zk.Conn, dir, mine string) {
	t.Helper()
	for {
		names, _, err := conn.Children(dir)
		require.NoError(t, err)
		slices.SortFunc(names, func(a, b string) int { return strings.Compare(a[len(a)-10:], b[len(b)-10:]) })
		i := slices.Index(names, mine)
		require.GreaterOrEqual(t, i, 0)
		if i == 0 {
			return
		}
		_, _, ev, err := conn.GetW(dir + "/" + names[i-1])
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		require.NoError(t, err)
		<-ev
	}
}

// pct is the nearest-rank p-th percentile of ds, rounded for the tables.
func pct(ds []time.Duration, p float64) time.Duration {
	s := slices.Sorted(slices.Values(ds))
	i := int(float64(len(s))*p/100+0.5) - 1
	d := s[min(max(i, 0), len(s)-1)]
	if d > 10*time.Millisecond {
		return d.Round(time.Millisecond)
	}
	return d.Round(10 * time.Microsecond)
}
