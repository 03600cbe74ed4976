package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// joiner joins a line with data: it returns once it holds, or, for the one
// that must wait, at once, waiting on until ctx ends.
type joiner func(ctx context.Context, s *zkrecipes.Session, path, data string) (*zklock.Lease, error)

func semaphoreOf(permits int) joiner {
	return func(ctx context.Context, s *zkrecipes.Session, path, data string) (*zklock.Lease, error) {
		sm, err := zklock.NewSemaphore(s, path, permits, zklock.WithData([]byte(data)))
		if err != nil {
			return nil, err
		}
		return sm.Acquire(ctx)
	}
}

func campaigner(ctx context.Context, s *zkrecipes.Session, path, data string) (*zklock.Lease, error) {
	el, err := zklock.NewElection(s, path)
	if err != nil {
		return nil, err
	}
	l, err := el.Campaign(ctx, []byte(data))
	if err != nil {
		return nil, err
	}
	return l.Lease, nil
}

func reader(ctx context.Context, s *zkrecipes.Session, path, data string) (*zklock.Lease, error) {
	rw, err := zklock.NewRWMutex(s, path, zklock.WithData([]byte(data)))
	if err != nil {
		return nil, err
	}
	return rw.RLock(ctx)
}

func writer(ctx context.Context, s *zkrecipes.Session, path, data string) (*zklock.Lease, error) {
	rw, err := zklock.NewRWMutex(s, path, zklock.WithData([]byte(data)))
	if err != nil {
		return nil, err
	}
	return rw.Lock(ctx)
}

// TestHoldersAndWatchTellEveryRecipe: holders and watch -once, as text and
// as JSON, show who holds as each recipe's rule has it: a semaphore's two
// permit holders, an election's leader, an RWMutex's two readers (and
// their writer waiting), then the waiters in order.
func TestHoldersAndWatchTellEveryRecipe(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	for _, tc := range []struct {
		name    string
		kind    string
		permits int
		join    []joiner // in order; the last one waits
		roles   []string // holders and watch -once, text
		header  string   // watch -once's, after the path
	}{
		{"Semaphore", "semaphore", 2, []joiner{semaphoreOf(2), semaphoreOf(2), semaphoreOf(2)},
			[]string{"holder", "holder", "waiter 1"}, "semaphore of 2 permits, 2 holders, 1 waiter"},
		{"Election", "election", 0, []joiner{campaigner, campaigner},
			[]string{"leader", "candidate 1"}, "election, 1 leader, 1 candidate"},
		{"RWMutex", "lock", 0, []joiner{reader, reader, writer},
			[]string{"holder", "holder", "waiter 1"}, "lock, 2 holders, 1 waiter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := lockPath(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			s, err := zkrecipes.Connect(ctx, []string{addr})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			var data []string
			for i, join := range tc.join {
				d := fmt.Sprintf("contender %d", i)
				data = append(data, d)
				if i < len(tc.join)-1 {
					if _, err := join(ctx, s, path, d); err != nil {
						t.Fatal(err)
					}
					continue
				}
				wg.Go(func() { join(ctx, s, path, d) }) // waits until the test ends
			}

			var hs jsonHolders
			waitFor(t, func() bool {
				hs = jsonHolders{}
				runJSON(t, addr, &hs, "holders", "-json", path)
				return len(hs.Contenders) == len(tc.join)
			}, func() string { return fmt.Sprintf("the waiter did not show: %+v", hs) })
			if hs.Path != path || hs.Kind != tc.kind || hs.Permits != tc.permits {
				t.Errorf("holders -json: path %q, kind %q, permits %d; want %q, %q, %d", hs.Path, hs.Kind, hs.Permits, path, tc.kind, tc.permits)
			}
			f := watchOnce(t, addr, path)
			if f.Kind != tc.kind || f.Permits != tc.permits {
				t.Errorf("watch -once -json: kind %q, permits %d; want %q, %d", f.Kind, f.Permits, tc.kind, tc.permits)
			}
			for i, role := range tc.roles {
				wantRole, wantPos := role, 0
				if r, n, ok := strings.Cut(role, " "); ok {
					wantRole, wantPos = r, int(n[0]-'0')
				}
				for _, got := range []struct {
					cmd string
					c   []jsonContender
				}{{"holders", hs.Contenders}, {"watch", f.Contenders}} {
					if len(got.c) != len(tc.roles) {
						t.Fatalf("%s -json: %+v, want %d contenders", got.cmd, got.c, len(tc.roles))
					}
					c := got.c[i]
					if c.Role != wantRole || c.Position != wantPos || deref(c.Data) != data[i] || c.Session != sessionID(s.ID()) {
						t.Errorf("%s -json: contender %d is %+v (data %q); want %s at %d, data %q, session %s",
							got.cmd, i, c, deref(c.Data), wantRole, wantPos, data[i], sessionID(s.ID()))
					}
				}
			}

			rows := ""
			for i, role := range tc.roles {
				rows += regexp.QuoteMeta(role) + ` +\S+ +0x[0-9a-f]+ +\d+ +(?:[0-9.hms]+ +)?` + regexp.QuoteMeta(data[i]) + `\n`
			}
			want := regexp.MustCompile(`^ROLE +NODE +SESSION +TOKEN +DATA\n` + rows + `$`)
			if out := run(t, addr, 0, "holders", path); !want.MatchString(out) {
				t.Errorf("holders printed:\n%s\nwant a match for %s", out, want)
			}
			want = regexp.MustCompile(`^` + regexp.QuoteMeta(path+": "+tc.header) + `, at .*\nROLE +NODE +SESSION +TOKEN +IN LINE +DATA\n` + rows + `$`)
			if out := run(t, addr, 0, "watch", "-once", path); !want.MatchString(out) {
				t.Errorf("watch -once printed:\n%s\nwant a match for %s", out, want)
			}
		})
	}
}

// A CachedMutex's holding kept idle between critical sections shows as a
// holder, "(cached)", in holders' text and JSON.
func TestHoldersShowsCachedHolder(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := zkrecipes.Connect(ctx, []string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m, err := zklock.NewCachedMutex(s, path, zklock.WithData([]byte("kept")), zklock.WithIdleRelease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release(ctx)
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`^ROLE +NODE +SESSION +TOKEN +DATA\nholder \(cached\) +\S+-cached-lock-\d+ +0x[0-9a-f]+ +\d+ +kept\n$`)
	if out := run(t, addr, 0, "holders", path); !want.MatchString(out) {
		t.Errorf("holders printed:\n%s\nwant a match for %s", out, want)
	}
	var hs jsonHolders
	runJSON(t, addr, &hs, "holders", "-json", path)
	if len(hs.Contenders) != 1 || hs.Contenders[0].Role != "holder" || !hs.Contenders[0].Cached {
		t.Errorf("holders -json: %+v, want one cached holder", hs.Contenders)
	}
}
