package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/zkrecipes/zkrecipes/chaos/record"
)

// StallMargin is how much longer than the dispatcher's session timeout a
// hand-out stall after a dispatcher fault may last: the ensemble expires
// sessions on its tick (500 ms in the suite's ensembles), then the next
// candidate learns that it leads, reads the queue's state (a few round
// trips), hands out, and the consumer reads its offer and its item, on a
// machine that three servers and the client processes share.
const StallMargin = 2 * time.Second

// StallBound is the longest a hand-out may stall after a dispatcher fault,
// counted from when the ensemble could commit again (Fault.Serving): the
// dispatcher's session timeout plus StallMargin. The package fairqueue
// promises that a dispatcher that dies or freezes stalls hand-out for at
// most its session's timeout.
func StallBound(timeout time.Duration) time.Duration { return timeout + StallMargin }

// Stall is the hand-out stall measured after one dispatcher fault: from
// the first moment, at or after the fault began and before the next one
// did, when an item was pending (its Put had returned, and no one had been
// handed it) and a consumer that could take it was waiting in Take, to the
// next delivery of any item to anyone. A consumer that could take it: of
// a process neither killed, stopped nor frozen, on a session not ended,
// not the dispatcher's, and, while the fault lasts, not on the server cut
// off.
type Stall struct {
	Fault        int // its number among the run's faults, from 1
	Kind, Target string
	Start        int64 // the fault's
	From, To     int64 // 0: no such moment before the next fault; no delivery before the run's end
	Stall        time.Duration
	Bound        time.Duration // StallBound, plus how long the ensemble could not commit (Serving - Start)
	Cut          bool          // the next fault began before a delivery came: Stall is how long it had lasted by then
}

// Measured says whether there was a stall to measure: an item pending and
// a consumer waiting for it before the next fault began.
func (s Stall) Measured() bool { return s.From != 0 }

func (s Stall) String() string {
	if !s.Measured() {
		return fmt.Sprintf("fault %d (%s): no item pending while a consumer waited, before the next fault", s.Fault, s.Kind)
	}
	how := fmt.Sprintf("next delivery %s after the fault began", dur(s.To-s.Start))
	switch {
	case s.Cut:
		how = "the next fault began first"
	case s.To == 0:
		how = "no delivery before the run's end"
	}
	return fmt.Sprintf("fault %d (%s): stall %v from %s after the fault began (bound %v), %s; %s", s.Fault, s.Kind,
		s.Stall.Round(time.Millisecond), dur(s.From-s.Start), s.Bound, how, s.Target)
}

func dur(ns int64) string { return time.Duration(ns).Round(time.Millisecond).String() }

// CheckStalls measures the hand-out stall after each dispatcher fault
// (see Stall), and reports each longer than its bound.
func CheckStalls(events []record.Event, faults []Fault, pauses []Pause, deaths map[[2]int]int64, end int64, timeout time.Duration) ([]Stall, []Violation) {
	var evs []record.Event
	for _, e := range Ordered(events) {
		if e.W == record.Queue || e.K == record.Ended || e.K == record.Frozen || e.K == record.Thawed {
			evs = append(evs, e)
		}
	}
	var stalls []Stall
	var vs []Violation
	for i, f := range faults {
		if !slices.Contains(DispatcherFaults, f.Kind) {
			continue
		}
		until := end // the next fault's start
		for _, g := range faults {
			if g.Start > f.Start && g.Start < until {
				until = g.Start
			}
		}
		s := measureStall(evs, f, until, end, pauses, deaths)
		s.Fault, s.Kind, s.Target, s.Start = i+1, f.Kind, f.Target, f.Start
		s.Bound = StallBound(timeout)
		if f.Serving > f.Start {
			s.Bound += time.Duration(f.Serving - f.Start)
		}
		stalls = append(stalls, s)
		if s.Measured() && s.Stall > s.Bound {
			vs = append(vs, Violation{Rule: "queue: hand-out stall bounded", At: s.From,
				Detail: fmt.Sprintf("no item handed out for %v while one was pending and a consumer waited, from %s after fault %d (%s) began: the bound is %v",
					s.Stall.Round(time.Millisecond), dur(s.From-f.Start), i+1, f.Kind, s.Bound)})
		}
	}
	return stalls, vs
}

// measureStall replays the queue's events for fault f, up to the first
// delivery after the stall began; until is the next fault's start, or the
// run's end.
func measureStall(evs []record.Event, f Fault, until, end int64, pauses []Pause, deaths map[[2]int]int64) Stall {
	type consumer struct {
		p, inc int
		sid    int64
	}
	pending := map[string]bool{} // payloads put and not yet handed out
	handed := map[string]bool{}  // payloads handed out (a Take can be stamped before its Put returned)
	waiting := map[consumer]string{}
	ended := map[int64]bool{}
	frozen := map[[2]int]bool{}
	able := func(c consumer, srv string, t int64) bool {
		pi := [2]int{c.p, c.inc}
		if d, ok := deaths[pi]; ok && d <= t {
			return false
		}
		for _, p := range pauses {
			if p.P == c.p && p.Inc == c.inc && p.Start <= t && t <= p.End {
				return false
			}
		}
		during := t <= f.End
		return !ended[c.sid] && !frozen[pi] && c.sid != f.Session &&
			!(f.Kind == KillDispatcher && c.p == f.Slot && c.inc == f.Inc) &&
			!(during && f.Kind == StopDispatcher && c.p == f.Slot && c.inc == f.Inc) &&
			!(during && f.Kind == IsolateDispatcher && srv == f.Server)
	}
	demand := func(t int64) bool {
		if len(pending) == 0 {
			return false
		}
		for c, srv := range waiting {
			if able(c, srv, t) {
				return true
			}
		}
		return false
	}
	// Moments at which a consumer may become able to take without an event
	// of its own: the fault's end, and the ends of pauses.
	checks := []int64{f.Start, f.End}
	for _, p := range pauses {
		checks = append(checks, p.End)
	}
	slices.Sort(checks)
	checks = slices.DeleteFunc(checks, func(t int64) bool { return t < f.Start || t >= until })

	// Each stretch of demand without a delivery is a stall; the longest
	// one begun before until is the fault's. (The first may end at once: a
	// hand-out the dispatcher sent before the fault, read after.)
	var s Stall
	open := int64(0)
	look := func(t int64) {
		if open == 0 && t >= f.Start && t < until && demand(t) {
			open = t
		}
	}
	closed := func(to int64) {
		last := to // a stall the next fault or the run's end found going on counts until then
		if to == 0 || to > until {
			last = until
		}
		if d := time.Duration(last - open); s.From == 0 || d > s.Stall {
			s.From, s.To, s.Stall = open, to, d
			s.Cut = last != to && until < end
		}
		open = 0
	}
	for _, e := range evs {
		for len(checks) > 0 && checks[0] <= e.T {
			look(checks[0])
			checks = checks[1:]
		}
		if open == 0 && e.T >= until {
			break
		}
		c := consumer{e.P, e.Inc, e.Sid}
		switch e.K {
		case record.PutOK:
			if !handed[e.D] {
				pending[e.D] = true
			}
		case record.Take:
			if open != 0 {
				closed(e.T)
			}
			delete(pending, e.D)
			handed[e.D] = true
			delete(waiting, c)
		case record.Taking:
			waiting[c] = e.Srv
		case record.TakeErr:
			delete(waiting, c)
		case record.Ended:
			ended[e.Sid] = true
		case record.Frozen:
			frozen[[2]int{e.P, e.Inc}] = true
		case record.Thawed:
			delete(frozen, [2]int{e.P, e.Inc})
		}
		look(e.T)
	}
	for _, t := range checks {
		look(t)
	}
	if open != 0 {
		closed(0) // no delivery came before the run's end
	}
	return s
}

// describeStalls is the summary's line on the hand-out stalls.
func describeStalls(stalls []Stall, timeout time.Duration) string {
	var ms []string
	var longest time.Duration
	none := 0
	for _, s := range stalls {
		if !s.Measured() {
			none++
			continue
		}
		longest = max(longest, s.Stall)
		m := fmt.Sprintf("%.2fs", s.Stall.Seconds())
		if s.Cut {
			m += " (cut short by the next fault)"
		}
		if s.Bound != StallBound(timeout) {
			m += fmt.Sprintf(" (bound %.2fs: the ensemble had no leader for %.2fs)", s.Bound.Seconds(), (s.Bound - StallBound(timeout)).Seconds())
		}
		ms = append(ms, m)
	}
	if len(stalls) == 0 {
		return "no dispatcher fault"
	}
	out := fmt.Sprintf("%d dispatcher faults; hand-out stall after each (bound: session timeout %v + %v): %s; longest %.2fs",
		len(stalls), timeout, StallMargin, strings.Join(ms, ", "), longest.Seconds())
	if none > 0 {
		out += fmt.Sprintf("; %d with no item pending while a consumer waited", none)
	}
	return out
}
