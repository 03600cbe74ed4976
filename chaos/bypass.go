package chaos

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/chaos/record"
)

// BypassWindow is how long after a contender's join the sections of a kept
// CachedMutex holding may still begin ahead of it, in CheckBypass: the
// freshness window the cached workload runs with (zklock's default, 25ms),
// and a margin for the moment its holder notes a section begun (its
// process's scheduling, on a machine the suite loads).
const BypassWindow = 25*time.Millisecond + 500*time.Millisecond

// watchJoins notes, until stop is closed, the moment each node is first
// seen in dir: its contender's join, seen from outside, never earlier than
// the join itself (a node seen late, or missed, only makes CheckBypass
// laxer). It lists dir at each change, and every 200ms besides. The
// returned function waits for it and gives the moments, by node path.
func watchJoins(s *zkrecipes.Session, dir string, stop <-chan struct{}) func() map[string]int64 {
	joins := map[string]int64{}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			names, _, ev, err := s.Conn().ChildrenW(dir)
			now := record.Now()
			for _, name := range names {
				if _, ok := joins[dir+"/"+name]; !ok {
					joins[dir+"/"+name] = now
				}
			}
			if err != nil && !errors.Is(err, zk.ErrNoNode) {
				ev = nil
			}
			t := time.NewTimer(200 * time.Millisecond)
			select {
			case <-ev:
			case <-t.C:
			case <-stop:
				t.Stop()
				return
			}
			t.Stop()
		}
	})
	return func() map[string]int64 {
		wg.Wait()
		return joins
	}
}

// CheckBypass finds contenders passed by a kept CachedMutex holding for
// longer than the library allows. A contender that joined the line (a
// lease of the lock that took a node of its own: a Mutex's, or the first
// section of a CachedMutex holding) at J, seen in joins, waits behind the
// sections a kept holding begins up to window after J, and at most one
// more per holding (the one whose sync was in flight when it joined);
// any other section that holding begins before the contender is granted
// is a violation. Sections begun during a pause of their process (or just
// after it: granted before the stop, noted after the wake) are left out.
// It returns how many contenders it could judge and the most late sections
// one was passed by.
func CheckBypass(leases []*Lease, joins map[string]int64, pauses []Pause, window time.Duration) (waiters, worst int, vs []Violation) {
	var sections []*Lease
	for _, l := range leases {
		if l.W == record.Cached && l.Sec >= 2 && !pausedAround(l, pauses, window) {
			sections = append(sections, l)
		}
	}
	slices.SortFunc(sections, func(a, b *Lease) int { return cmpInt(a.Start, b.Start) })
	for _, w := range leases {
		j, ok := joins[w.ID]
		if !ok || w.Sec > 1 || w.Start <= j+int64(window) {
			continue
		}
		waiters++
		late := map[int64][]*Lease{} // by holding
		for _, s := range sections {
			if s.Start >= w.Start {
				break
			}
			if s.Start > j+int64(window) && s.Tok != w.Tok {
				late[s.Tok] = append(late[s.Tok], s)
			}
		}
		for _, ls := range late {
			worst = max(worst, len(ls))
			if len(ls) > 1 {
				vs = append(vs, Violation{Rule: "cached: bypass bounded",
					Detail: fmt.Sprintf("%d sections of holding %d began later than %v after client %d.%d joined the line at %s, before it was granted %s: %s",
						len(ls), ls[0].Tok, window, w.P, w.Inc, clock(j), rel(w.Start, j), describe(ls[1:2], ls[1].Start)),
					At: ls[1].Start})
			}
		}
	}
	return waiters, worst, vs
}

// pausedAround reports whether l began during a pause of its process, or
// within window after one.
func pausedAround(l *Lease, pauses []Pause, window time.Duration) bool {
	for _, p := range pauses {
		if p.P == l.P && p.Inc == l.Inc && p.Start <= l.Start && l.Start <= p.End+int64(window) {
			return true
		}
	}
	return false
}
