package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/zkrecipes/zkrecipes/chaos/record"
)

// Lease is one lock, permit or leadership, or one claim of a queue item by
// a Job, as its holder saw it: the interval [Start, End] during which the
// holder could believe it held it. Two leases of one lock must never
// overlap (for a semaphore, no more than its permits), nor two claims of
// one item.
//
// Start is when Lock (Acquire, Campaign, Take) returned: the Grant (Take)
// event, written after the call returned.
//
// End is the earliest moment the holder could know it no longer held it,
// as the holder saw it (events of its own process):
//
//   - Released: Unlock (Resign, Ack) was called at R and the release was
//     confirmed: it returned nil, or Done later closed with ErrReleased (a
//     release that outlived its ctx, confirmed in the background). Then End
//     is R. The holder acts on the lease no more once it calls Unlock, and
//     a confirmed release proves the lease's node stood until the release
//     removed it, after R, so that no one else could be granted before R.
//     R is safe only because the release was confirmed: an unconfirmed one
//     proves nothing about when the lease ended.
//   - Otherwise, the first of: Done closing with a loss (the Lost event,
//     written by a goroutine that waits on Done); Unlock returning
//     ErrLockLost (for a Job: Ack returning any error: the claim lost, or
//     the outcome unknown; either way the consumer knows it may not hold
//     the item any more). An Unlock that returned another error (its ctx
//     ended; the release goes on in the background) does not end the
//     lease: its holder cannot know yet. But a lease whose release was
//     sent at R and never confirmed, told lost because its session was
//     given up (ErrSessionLost, not expired), ends at R: the release may
//     have landed (its answer lost with a server), and the holder acted on
//     the lease no more from R. A session given up is left to expire, no
//     sooner than a fifth of its timeout later, so a grant to another
//     between R and the loss came from the release; a release overtaken by
//     an expiry is told as one (ErrSessionExpired) and ends no sooner.
//   - Failing those, when its process was killed (reaped: Died), or the end
//     of the run (Running). A killed process that had called Unlock (its
//     release sent, no answer read before it died) ends it at R instead:
//     it acted on the lease no more from R, and from its death it can be
//     told nothing, so the moments in between are no holder's either. A
//     grant to another before R still overlaps it.
//
// The library promises that a holder is told of a loss before anyone else
// is granted the lock (the item): an overlap is that promise broken.
//
// A holder that was stopped with SIGSTOP cannot be told anything while it
// is stopped, nor check anything before it acts once it runs again: that
// is the case fencing exists for. So when a pause of the holder's process
// overlaps a lease that was not released cleanly, the lease counts as
// Paused: it ends at the start of the pause, and what the holder did after
// waking is the fenced register's business (see CheckRegister). How soon
// it was told after waking is counted (WakeStats), not judged.
type Lease struct {
	W        string
	P, Inc   int
	Sid, Tok int64  // for a Job's claim, Tok is the delivery's attempt
	Sec      uint32 // a CachedMutex lease's section: its fence is {Tok, Sec}
	ID       string // a Job's item; a lock lease's node
	Srv      string // the server its session was on when it was granted
	Acq      int64  // when Lock was called
	Start    int64
	End      int64 // after truncation for a pause
	How      string
	Paused   bool
	// Misreported: the lease was lost (its session had ended by the time
	// Unlock returned, or its Done closed with a loss), yet Unlock returned
	// nil or an error other than ErrLockLost (or a timeout).
	Misreported bool
	UnlockErr   string
	// Told is when its holder was told it no longer held it (0: never);
	// Woke, for a paused lease, when its process was resumed.
	Told, Woke int64
	lostAt     int64
	freedAt    int64
	releaseAt  int64
	unlockedAt int64
	lostByRel  bool
	givenUp    bool // told lost because its session was given up, not expired
	landed     bool // its release is proven to have landed (see landed)
	job        bool
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

// Leases rebuilds the leases of workload w from the events (in the order
// they happened: see Ordered). deaths gives, for a killed process (slot,
// incarnation), when it was reaped; end is the end of the run.
func Leases(events []record.Event, w string, pauses []Pause, deaths map[[2]int]int64, end int64) []*Lease {
	type key struct {
		p, inc int
		tok    int64
		sec    uint32
	}
	byKey := map[key]*Lease{}
	acq := map[[2]int]int64{}
	ended := map[int64]int64{} // session id -> when its process learned it ended
	var out []*Lease
	for _, e := range Ordered(events) {
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
		k := key{e.P, e.Inc, e.Tok, e.Sec}
		if e.K == record.Acquiring {
			acq[pk] = e.T
			continue
		}
		if e.K == record.Grant {
			l := &Lease{W: w, P: e.P, Inc: e.Inc, Sid: e.Sid, Tok: e.Tok, Sec: e.Sec, ID: e.ID, Srv: e.Srv, Acq: acq[pk], Start: e.T}
			if l.Acq == 0 {
				l.Acq = e.T
			}
			byKey[k] = l
			out = append(out, l)
			continue
		}
		if l := byKey[k]; l != nil {
			l.note(e, e.K == record.Unlocked && e.F == "lost")
		}
	}
	if w == record.Cached {
		landed(out)
	}
	for _, l := range out {
		l.finish(ended, pauses, deaths, end)
	}
	return out
}

// landed marks the releases of the cached workload's leases proven to
// have landed although unconfirmed: another lease of the same session was
// granted after the release was sent. That lock is exclusive, so the
// released lease's node was gone by that grant, with its session live, and
// in the suite nothing but its own release deletes it. (The cached workload
// holds several leases of one session in turn, from several goroutines: a
// reply lost with the connection would otherwise make two of them overlap.)
func landed(leases []*Lease) {
	for _, a := range leases {
		if a.releaseAt == 0 || (a.lostAt != 0 && a.lostAt < a.releaseAt) {
			continue
		}
		for _, b := range leases {
			if b != a && b.Sid == a.Sid && b.Start >= a.releaseAt {
				a.landed = true
				break
			}
		}
	}
}

// Claims rebuilds the claims of queue items by Jobs: each from its Take to
// its end, by the rules of Lease (Acking is the call of Ack; an Ack that
// returned an error ends the claim when it returned).
func Claims(events []record.Event, pauses []Pause, deaths map[[2]int]int64, end int64) []*Lease {
	type key struct {
		p, inc int
		id     string
	}
	open := map[key]*Lease{} // the latest Take of each item by each process
	var out []*Lease
	for _, e := range Ordered(events) {
		if e.W != record.Queue {
			continue
		}
		k := key{e.P, e.Inc, e.ID}
		switch e.K {
		case record.Take:
			l := &Lease{W: record.Queue, P: e.P, Inc: e.Inc, Sid: e.Sid, Tok: int64(e.N), ID: e.ID, Srv: e.Srv, Acq: e.T, Start: e.T, job: true}
			open[k] = l
			out = append(out, l)
		case record.Acking, record.Ack, record.AckErr, record.Lost:
			if l := open[k]; l != nil {
				kind := map[string]string{record.Acking: record.Release, record.Ack: record.Unlocked, record.AckErr: record.Unlocked, record.Lost: record.Lost}[e.K]
				e.K = kind
				l.note(e, kind == record.Unlocked && e.Err != "")
			}
		}
	}
	for _, l := range out {
		l.finish(nil, pauses, deaths, end)
	}
	return out
}

// note records one event of the lease (Lost, Freed, Release, Unlocked);
// toldLost says that an Unlocked told its holder the lease was lost.
func (l *Lease) note(e record.Event, toldLost bool) {
	if (e.K == record.Lost || toldLost) && strings.Contains(e.Err, "session lost") {
		l.givenUp = true
	}
	switch e.K {
	case record.Lost:
		if l.lostAt == 0 {
			l.lostAt = e.T
		}
	case record.Freed:
		if l.freedAt == 0 {
			l.freedAt = e.T
		}
	case record.Release:
		if l.releaseAt == 0 {
			l.releaseAt = e.T
		}
	case record.Unlocked:
		if l.unlockedAt == 0 {
			l.unlockedAt, l.UnlockErr, l.lostByRel = e.T, e.Err, toldLost
		}
	}
}

// finish works out how and when the lease ended (see Lease).
func (l *Lease) finish(ended map[int64]int64, pauses []Pause, deaths map[[2]int]int64, end int64) {
	confirmed := l.releaseAt != 0 && ((l.unlockedAt != 0 && l.UnlockErr == "") || l.freedAt != 0)
	lost := l.lostAt != 0 || l.lostByRel
	if l.landed {
		// Released at releaseAt; a loss told later is its session's end.
		confirmed, lost = true, false
	}
	if e, ok := ended[l.Sid]; ok && l.unlockedAt != 0 && e <= l.unlockedAt {
		// Its session was over before Unlock returned: whatever Unlock
		// said, no live session confirmed the release.
		lost = true
	}
	told := int64(0)
	first := func(t int64) {
		if t != 0 && (told == 0 || t < told) {
			told = t
		}
	}
	first(l.lostAt)
	if l.lostByRel {
		first(l.unlockedAt)
	}
	switch {
	case confirmed && !lost:
		l.How, l.End, l.Told = Released, l.releaseAt, l.releaseAt
		return
	case confirmed:
		// Released, but lost already, and Unlock did not say so.
		first(l.releaseAt)
		l.How, l.End = LostHow, told
	case told != 0:
		l.How, l.End = LostHow, told
		if l.givenUp && l.releaseAt != 0 && l.releaseAt < told {
			l.End = l.releaseAt
		}
	default:
		if d, ok := deaths[[2]int{l.P, l.Inc}]; ok {
			l.How, l.End = Died, d
			if l.releaseAt != 0 && l.releaseAt < d {
				l.End = l.releaseAt
			}
		} else {
			l.How, l.End = Running, end
		}
	}
	l.Told = told
	if !l.job && l.How == LostHow && l.unlockedAt != 0 && !l.lostByRel && !strings.Contains(l.UnlockErr, "deadline exceeded") {
		l.Misreported = true
	}
	last := int64(-1)
	for _, p := range pauses {
		if p.P == l.P && p.Inc == l.Inc && p.Start < l.End && p.End > l.Acq {
			if p.Start > last {
				last, l.Woke = p.Start, p.End
			}
		}
	}
	if last >= 0 {
		l.Paused = true
		l.End = max(l.Start, min(l.End, last))
	}
}

// Violation is one broken rule, with what shows it.
type Violation struct {
	Rule   string
	Detail string
	At     int64 `json:",omitempty"` // when it happened, on the shared clock (0: not one moment)
	// Told is set when the violation is a report a server gave a client
	// (an observer's): which server, of what, when.
	Told *Told `json:",omitempty"`
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
			until := l.End
			for _, a := range active {
				until = min(until, a.End)
			}
			out = append(out, Violation{Rule: rule, Detail: fmt.Sprintf("%d holders at once for %.1fms, at most %d allowed: %s", len(active), float64(until-l.Start)/1e6, n, describe(active, l.Start)), At: l.Start})
		}
	}
	return out
}

// CheckTokenOrder checks that a lease that ended before another began has
// the lower fence (token, then a CachedMutex's section): fences strictly
// increase over successive holders.
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
	var top *Lease // highest fence among the leases ended so far
	i := 0
	for _, b := range byStart {
		for ; i < len(byEnd) && byEnd[i].End <= b.Start; i++ {
			if top == nil || byFence(byEnd[i], top) > 0 {
				top = byEnd[i]
			}
		}
		if top != nil && byFence(top, b) >= 0 && top != b {
			out = append(out, Violation{Rule: rule, Detail: fmt.Sprintf("%s granted after %s had ended: %s", b.fence(), top.fence(), describe([]*Lease{top, b}, b.Start)), At: b.Start})
		}
	}
	return out
}

// byFence orders leases by fence: token, then section.
func byFence(a, b *Lease) int {
	if c := cmpInt(a.Tok, b.Tok); c != 0 {
		return c
	}
	return cmpInt(int64(a.Sec), int64(b.Sec))
}

// fence names a lease's fence: "token T", or "fence T.S" for a
// CachedMutex's section.
func (l *Lease) fence() string {
	if l.Sec == 0 {
		return fmt.Sprintf("token %d", l.Tok)
	}
	return fmt.Sprintf("fence %d.%d", l.Tok, l.Sec)
}

// LossStats counts the leases lost while their holder ran (not paused, not
// killed) and, of those, the ones whose loss the holder learned before the
// next holder (the next higher token) was granted.
func LossStats(leases []*Lease) (lost, beforeTakeover, paused int) {
	byTok := slices.Clone(leases)
	slices.SortFunc(byTok, byFence)
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
		what := l.fence()
		if l.job {
			what = fmt.Sprintf("item %s attempt %d", l.ID, l.Tok)
		}
		on := ""
		if l.Srv != "" {
			on = " on " + l.Srv
		}
		how := l.How
		if l.Paused {
			how += ", paused"
		}
		if l.How != Released && l.releaseAt != 0 && l.releaseAt < l.End {
			how += fmt.Sprintf("; its release, sent at %s, unconfirmed", rel(l.releaseAt, at))
		}
		s += fmt.Sprintf("client %d.%d %s session 0x%x%s held %s..%s (%s)", l.P, l.Inc, what, l.Sid, on, rel(l.Start, at), rel(l.End, at), how)
	}
	return s + fmt.Sprintf(" [at %s on the run's clock]", clock(at))
}

// CheckClaims finds moments when two Jobs claimed one item at once.
func CheckClaims(claims []*Lease) []Violation {
	byItem := map[string][]*Lease{}
	var items []string
	for _, l := range claims {
		if _, ok := byItem[l.ID]; !ok {
			items = append(items, l.ID)
		}
		byItem[l.ID] = append(byItem[l.ID], l)
	}
	slices.Sort(items)
	var out []Violation
	for _, id := range items {
		if len(byItem[id]) > 1 {
			out = append(out, CheckExclusion(byItem[id], 1, "queue: one claim per item")...)
		}
	}
	return out
}

// WakeStats counts the paused leases whose holder was told of the loss
// after it woke, and the longest it ran before it was told.
func WakeStats(leases []*Lease) (n int, longest time.Duration) {
	for _, l := range leases {
		if l.Paused && l.Told > l.Woke && l.Woke > 0 {
			n++
			longest = max(longest, time.Duration(l.Told-l.Woke))
		}
	}
	return n, longest
}

// rel writes t relative to at, in milliseconds.
func rel(t, at int64) string { return fmt.Sprintf("%+.1fms", float64(t-at)/1e6) }

// clock writes a time of the shared monotonic clock in seconds, as
// faults.txt and events.jsonl (in nanoseconds) have it.
func clock(t int64) string { return fmt.Sprintf("%.3fs", float64(t)/1e9) }

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
