package chaos

import (
	"fmt"
	"slices"
	"strings"

	"github.com/zkrecipes/zkrecipes/chaos/record"
)

// Lease is one lock, permit or leadership as its holder saw it.
//
// It "looks held" from Start, when Lock (Acquire, Campaign) returned, until
// End: the first of its holder learning that it was lost (Done closed),
// its holder starting to release it, its process being killed, and the end
// of the run.
//
// A holder that was stopped with SIGSTOP cannot be told anything while it
// is stopped, nor check anything before it acts once it runs again: that
// is the case fencing exists for. So when a pause of the holder's process
// overlaps a lease that did not end by a clean release (its Unlock found
// it lost, or its Done closed), the lease counts as Paused: it looks held
// only until the pause began, and what the holder did after waking is the
// fenced register's business (see CheckRegister).
type Lease struct {
	W        string
	P, Inc   int
	Sid, Tok int64
	Acq      int64 // when Lock was called
	Start    int64
	End      int64 // after truncation for a pause
	How      string
	Paused   bool
	// Misreported: the lease was lost (its session had ended by the time
	// Unlock returned, or its Done closed with a loss), yet Unlock returned
	// nil or an error other than ErrLockLost (or a timeout).
	Misreported bool
	UnlockErr   string
	lostAt      int64
	releaseAt   int64
	unlockedAt  int64
	lostByRel   bool
}

// How a lease ended.
const (
	Released = "released"
	LostHow  = "lost"
	Died     = "died" // its process was killed
	Running  = "held-at-end"
)

// Pause is a window during which a process was stopped.
type Pause struct {
	P, Inc     int
	Start, End int64
}

// Leases rebuilds the leases of workload w from the events, in the order
// each process wrote them. deaths gives, for a killed process (slot,
// incarnation), when it was reaped; end is the end of the run.
func Leases(events []record.Event, w string, pauses []Pause, deaths map[[2]int]int64, end int64) []*Lease {
	type key struct {
		p, inc int
		tok    int64
	}
	byKey := map[key]*Lease{}
	acq := map[[2]int]int64{}
	ended := map[int64]int64{} // session id -> when its process learned it ended
	var out []*Lease
	for _, e := range events {
		if e.K == record.Ended {
			if _, ok := ended[e.Sid]; !ok {
				ended[e.Sid] = e.T
			}
			continue
		}
		if e.W != w {
			continue
		}
		pk := [2]int{e.P, e.Inc}
		k := key{e.P, e.Inc, e.Tok}
		switch e.K {
		case record.Acquiring:
			acq[pk] = e.T
		case record.Grant:
			l := &Lease{W: w, P: e.P, Inc: e.Inc, Sid: e.Sid, Tok: e.Tok, Acq: acq[pk], Start: e.T}
			if l.Acq == 0 {
				l.Acq = e.T
			}
			byKey[k] = l
			out = append(out, l)
		case record.Lost:
			if l := byKey[k]; l != nil && l.lostAt == 0 {
				l.lostAt = e.T
			}
		case record.Release:
			if l := byKey[k]; l != nil {
				l.releaseAt = e.T
			}
		case record.Unlocked:
			if l := byKey[k]; l != nil {
				l.unlockedAt, l.UnlockErr = e.T, e.Err
				l.lostByRel = e.F == "lost"
			}
		}
	}
	for _, l := range out {
		switch {
		case l.lostAt != 0 && (l.releaseAt == 0 || l.lostAt < l.releaseAt):
			l.How, l.End = LostHow, l.lostAt
		case l.releaseAt != 0:
			l.End = l.releaseAt
			l.How = Released
			if e, ok := ended[l.Sid]; ok && l.unlockedAt != 0 && e <= l.unlockedAt {
				// Its session was over before Unlock returned: whatever
				// Unlock said, no live session confirmed the release.
				l.How = LostHow
			}
			if l.lostByRel || l.lostAt != 0 {
				l.How = LostHow // released, but it had been lost already
			}
			if l.How == LostHow && l.unlockedAt != 0 && !l.lostByRel && !strings.Contains(l.UnlockErr, "deadline exceeded") {
				l.Misreported = true
			}
		default:
			if d, ok := deaths[[2]int{l.P, l.Inc}]; ok {
				l.How, l.End = Died, d
			} else {
				l.How, l.End = Running, end
			}
		}
		if l.How == Released {
			continue
		}
		last := int64(-1)
		for _, p := range pauses {
			if p.P == l.P && p.Inc == l.Inc && p.Start < l.End && p.End > l.Acq {
				last = max(last, p.Start)
			}
		}
		if last >= 0 {
			l.Paused = true
			l.End = max(l.Start, min(l.End, last))
		}
	}
	return out
}

// Violation is one broken rule, with what shows it.
type Violation struct {
	Rule   string
	Detail string
}

func (v Violation) String() string { return v.Rule + ": " + v.Detail }

// CheckExclusion finds moments when more than n leases looked held at once.
func CheckExclusion(leases []*Lease, n int, rule string) []Violation {
	ls := slices.Clone(leases)
	slices.SortFunc(ls, func(a, b *Lease) int { return cmpInt(a.Start, b.Start) })
	var active []*Lease
	var out []Violation
	for _, l := range ls {
		active = slices.DeleteFunc(active, func(a *Lease) bool { return a.End <= l.Start })
		if l.End <= l.Start {
			continue // looked held for no time at all (a paused holder)
		}
		active = append(active, l)
		if len(active) > n {
			out = append(out, Violation{rule, fmt.Sprintf("%d holders at once, at most %d allowed: %s", len(active), n, describe(active, l.Start))})
		}
	}
	return out
}

// CheckTokenOrder checks that a lease that ended before another began has
// the lower token: tokens strictly increase over successive holders.
// Paused leases are left out: their holder may have been stopped before it
// even noted its grant.
func CheckTokenOrder(leases []*Lease, rule string) []Violation {
	var ls []*Lease
	for _, l := range leases {
		if !l.Paused {
			ls = append(ls, l)
		}
	}
	byEnd := slices.Clone(ls)
	slices.SortFunc(byEnd, func(a, b *Lease) int { return cmpInt(a.End, b.End) })
	byStart := slices.Clone(ls)
	slices.SortFunc(byStart, func(a, b *Lease) int { return cmpInt(a.Start, b.Start) })
	var out []Violation
	var top *Lease // highest token among the leases ended so far
	i := 0
	for _, b := range byStart {
		for ; i < len(byEnd) && byEnd[i].End <= b.Start; i++ {
			if top == nil || byEnd[i].Tok > top.Tok {
				top = byEnd[i]
			}
		}
		if top != nil && top.Tok >= b.Tok && top != b {
			out = append(out, Violation{rule, fmt.Sprintf("token %d granted after token %d had ended: %s", b.Tok, top.Tok, describe([]*Lease{top, b}, b.Start))})
		}
	}
	return out
}

// LossStats counts the leases lost while their holder ran (not paused, not
// killed) and, of those, the ones whose loss the holder learned before the
// next holder (the next higher token) was granted.
func LossStats(leases []*Lease) (lost, beforeTakeover, paused int) {
	byTok := slices.Clone(leases)
	slices.SortFunc(byTok, func(a, b *Lease) int { return cmpInt(a.Tok, b.Tok) })
	for i, l := range byTok {
		if l.How != LostHow {
			continue
		}
		if l.Paused {
			paused++
			continue
		}
		lost++
		if i+1 == len(byTok) || l.End <= byTok[i+1].Start {
			beforeTakeover++
		}
	}
	return lost, beforeTakeover, paused
}

func describe(ls []*Lease, at int64) string {
	s := ""
	for i, l := range ls {
		if i > 0 {
			s += "; "
		}
		s += fmt.Sprintf("client %d.%d token %d session 0x%x held %s..%s (%s%s)", l.P, l.Inc, l.Tok, l.Sid, rel(l.Start, at), rel(l.End, at), l.How, map[bool]string{true: ", paused", false: ""}[l.Paused])
	}
	return s
}

// rel writes t relative to at, in milliseconds.
func rel(t, at int64) string { return fmt.Sprintf("%+.1fms", float64(t-at)/1e6) }

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
