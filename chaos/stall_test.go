package chaos

import (
	"testing"
	"time"

	"github.com/zkrecipes/zkrecipes/chaos/record"
)

// TestStalls feeds CheckStalls histories written by hand: the stall runs
// from the first moment an item is pending while a consumer that could
// take it waits, to the next delivery, and is reported past its bound.
func TestStalls(t *testing.T) {
	const timeout = 3 * time.Second // bound: 5 s
	q := func(p int, k string, at int64, sid int64, d, srv string) record.Event {
		return record.Event{P: p, W: record.Queue, K: k, T: at * ms, Sid: sid, D: d, Srv: srv, Seq: at}
	}
	// Before the fault: client 0 takes item a. Client 3's session 9 is the
	// dispatcher's, and client 3 waits in Take on it: it cannot take once
	// the fault began. Client 0 waits again at 1100 ms, item b is put at
	// 1200 ms: the stall begins then.
	base := []record.Event{
		q(0, record.Taking, 0, 1, "", "s2"),
		q(2, record.PutOK, 10, 5, "a", ""),
		q(0, record.Take, 20, 1, "a", "s2"),
		q(3, record.Taking, 500, 9, "", "s1"),
		q(2, record.PutOK, 1050, 5, "x", ""), // x is offered to client 3, which dies with it
		q(0, record.Taking, 1100, 1, "", "s2"),
	}
	kill := Fault{Kind: KillDispatcher, Start: 1000 * ms, End: 3000 * ms, Slot: 3, Session: 9, Serving: 1000 * ms}
	deaths := map[[2]int]int64{{3, 0}: 1001 * ms}
	end := int64(60_000) * ms
	run := func(evs []record.Event, faults ...Fault) ([]Stall, []Violation) {
		return CheckStalls(evs, faults, nil, deaths, end, timeout)
	}

	// Item x is pending from 1050 ms, client 0 waiting from 1100 ms: a stall
	// of 2.9 s, to its delivery at 4000 ms.
	ok := append(append([]record.Event(nil), base...), q(0, record.Take, 4000, 1, "x", "s2"))
	ss, vs := run(ok, kill)
	if len(vs) != 0 || len(ss) != 1 || ss[0].From != 1100*ms || ss[0].Stall != 2900*time.Millisecond || ss[0].Bound != 5*time.Second {
		t.Fatalf("a stall within its bound: %+v %v", ss, vs)
	}

	// Delivered only at 7000 ms: 5.9 s.
	late := append(append([]record.Event(nil), base...), q(0, record.Take, 7000, 1, "x", "s2"))
	if ss, vs = run(late, kill); len(vs) != 1 || vs[0].Rule != "queue: hand-out stall bounded" || ss[0].Stall != 5900*time.Millisecond {
		t.Fatalf("a stall past its bound: %+v %v", ss, vs)
	}

	// No delivery ever after: stalled until the run's end.
	if ss, vs = run(base, kill); len(vs) != 1 || ss[0].Cut || ss[0].To != 0 || ss[0].Stall != time.Duration(end-1100*ms) {
		t.Fatalf("no delivery after the fault: %+v %v", ss, vs)
	}

	// A hand-out sent before the fault, read 6 ms into it, ends a first
	// stall at once; the longest is the next: from 1300 ms, when item y is
	// put while client 0 waits again, to 7000 ms.
	second := append(append([]record.Event(nil), base...),
		q(0, record.Take, 1106, 1, "x", "s2"), q(0, record.Taking, 1150, 1, "", "s2"),
		q(2, record.PutOK, 1300, 5, "y", ""), q(0, record.Take, 7000, 1, "y", "s2"))
	if ss, vs = run(second, kill); len(vs) != 1 || ss[0].From != 1300*ms || ss[0].To != 7000*ms || ss[0].Stall != 5700*time.Millisecond {
		t.Fatalf("the longest of two stalls: %+v %v", ss, vs)
	}

	// Item z is taken before its Put is seen to return (the consumer's
	// event stamped first): it was never pending after that.
	early := append(append([]record.Event(nil), base...),
		q(0, record.Take, 1106, 1, "x", "s2"), q(0, record.Taking, 1150, 1, "", "s2"),
		q(0, record.Take, 1300, 1, "z", "s2"), q(2, record.PutOK, 1301, 5, "z", ""), q(0, record.Taking, 1400, 1, "", "s2"))
	if ss, vs = run(early, kill); len(vs) != 0 || ss[0].Stall != 6*time.Millisecond {
		t.Fatalf("an item taken before its Put returned: %+v %v", ss, vs)
	}

	// Stopped rather than killed: client 3 is paused until 5000 ms, and its
	// session (the dispatcher's) is over; the same stall.
	stop := kill
	stop.Kind, stop.End = StopDispatcher, 5000*ms
	if ss, vs := CheckStalls(late, []Fault{stop}, []Pause{{P: 3, Start: 1000 * ms, End: 5000 * ms}}, nil, end, timeout); len(vs) != 1 || ss[0].From != 1100*ms {
		t.Fatalf("a stall past its bound after a stop: %+v %v", ss, vs)
	}

	// Only the dispatcher's process waits: nothing to measure, whatever
	// comes after the next fault.
	alone := append(append([]record.Event(nil), base[:5]...), q(0, record.Take, 20_000, 1, "x", "s2"))
	next := Fault{Kind: KillServer, Start: 10_000 * ms, End: 12_000 * ms}
	if ss, vs := run(alone, kill, next); len(vs) != 0 || len(ss) != 1 || ss[0].Measured() {
		t.Fatalf("no consumer able to take: %+v %v", ss, vs)
	}

	// The next fault begins 2 s into the stall: cut short, within the bound;
	// 6 s into it: past the bound.
	for _, c := range []struct {
		at        int64
		violation bool
	}{{3100, false}, {7100, true}} {
		next := Fault{Kind: KillServer, Start: c.at * ms, End: (c.at + 2000) * ms}
		ss, vs := run(append(append([]record.Event(nil), base...), q(0, record.Take, 20_000, 1, "x", "s2")), kill, next)
		if !ss[0].Cut || ss[0].Stall != time.Duration(c.at-1100)*time.Millisecond || (len(vs) == 1) != c.violation {
			t.Fatalf("next fault at %d ms: %+v %v", c.at, ss, vs)
		}
	}

	// The dispatcher's server cut off: a consumer that waits on that server
	// cannot take while the cut lasts (client 1 on s1), one on another can
	// (client 0 on s2). The server was the leader: the ensemble had none for
	// 5 s, which the bound adds.
	cut := Fault{Kind: IsolateDispatcher, Start: 1000 * ms, End: 15_000 * ms, Slot: 3, Session: 9, Server: "s1", Serving: 6000 * ms}
	onCut := []record.Event{
		q(2, record.PutOK, 1050, 5, "x", ""),
		q(1, record.Taking, 1100, 4, "", "s1"),
		q(0, record.Taking, 2000, 1, "", "s2"),
		q(0, record.Take, 11_000, 1, "x", "s2"),
	}
	if ss, vs := CheckStalls(onCut, []Fault{cut}, nil, nil, end, timeout); len(vs) != 0 || ss[0].From != 2000*ms || ss[0].Bound != 10*time.Second {
		t.Fatalf("isolated: %+v %v", ss, vs)
	}
	cut.Serving = cut.Start
	if ss, vs := CheckStalls(onCut, []Fault{cut}, nil, nil, end, timeout); len(vs) != 1 || ss[0].Stall != 9*time.Second {
		t.Fatalf("isolated follower: %+v %v", ss, vs)
	}
}
