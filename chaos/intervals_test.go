package chaos

import (
	"testing"

	"github.com/zkrecipes/zkrecipes/chaos/record"
)

// Where a lease's interval ends (see Lease): each case is client 0's
// lease of token 10, granted at 0 ms, and client 1's of token 20, granted
// at 150 ms, when client 0 had called Unlock at 100 ms (or not).
func TestIntervalEnds(t *testing.T) {
	unlocked := func(at int64, err, f string) record.Event {
		e := ev(0, record.Mutex, record.Unlocked, at, 10)
		e.Err, e.F = err, f
		return e
	}
	const lost = "zklock: unlock /m/x: lock lost: session expired"
	const timeout = "zklock: unlock /m/x: context deadline exceeded"
	const givenUp = "zklock: unlock /m/x: lock lost: session lost: no proof of contact with the ensemble's leader for 8s"
	lostEv := func(at int64, err string) record.Event {
		e := ev(0, record.Mutex, record.Lost, at, 10)
		e.Err = err
		return e
	}
	cases := []struct {
		name    string
		events  []record.Event
		overlap bool
		how     string
		end     int64 // ms
	}{
		{"release confirmed: ends when it was sent, though confirmed after the next grant",
			[]record.Event{ev(0, record.Mutex, record.Release, 100, 10), unlocked(160, "", "")},
			false, Released, 100},
		{"release confirmed in the background (Done closed with ErrReleased) after its ctx ended",
			[]record.Event{ev(0, record.Mutex, record.Release, 100, 10), unlocked(120, timeout, ""), ev(0, record.Mutex, record.Freed, 170, 10)},
			false, Released, 100},
		{"release unconfirmed, Unlock told the loss after the next grant",
			[]record.Event{ev(0, record.Mutex, record.Release, 100, 10), unlocked(160, lost, "lost")},
			true, LostHow, 160},
		{"release unconfirmed, Unlock told the loss before the next grant",
			[]record.Event{ev(0, record.Mutex, record.Release, 100, 10), unlocked(140, lost, "lost")},
			false, LostHow, 140},
		{"release unconfirmed, its session given up after the next grant: the release may have landed",
			[]record.Event{ev(0, record.Mutex, record.Release, 100, 10), unlocked(160, givenUp, "lost")},
			false, LostHow, 100},
		{"release unconfirmed, Done closed as its session was given up after the next grant",
			[]record.Event{ev(0, record.Mutex, record.Release, 100, 10), unlocked(120, timeout, ""), lostEv(170, givenUp)},
			false, LostHow, 100},
		{"release sent after the next grant, its session given up",
			[]record.Event{ev(0, record.Mutex, record.Release, 152, 10), unlocked(160, givenUp, "lost")},
			true, LostHow, 152},
		{"given up after the next grant, never released",
			[]record.Event{lostEv(180, givenUp)},
			true, LostHow, 180},
		{"Unlock's ctx ended, then Done closed with the loss after the next grant",
			[]record.Event{ev(0, record.Mutex, record.Release, 100, 10), unlocked(120, timeout, ""), ev(0, record.Mutex, record.Lost, 170, 10)},
			true, LostHow, 170},
		{"Done closed with the loss before Unlock was called",
			[]record.Event{ev(0, record.Mutex, record.Lost, 90, 10), ev(0, record.Mutex, record.Release, 100, 10), unlocked(101, lost, "lost")},
			false, LostHow, 90},
		{"never told: held until the end of the run",
			nil,
			true, Running, 1000},
		{"told of the loss after the next grant, never released",
			[]record.Event{ev(0, record.Mutex, record.Lost, 180, 10)},
			true, LostHow, 180},
	}
	// Client 0 killed (reaped) at 155 ms, or at 120 ms: see the cases "killed".
	deaths := map[string]int64{
		"killed after the next grant, its release sent before it and unanswered":      155,
		"killed after the next grant, never released":                                 155,
		"killed before the next grant, its release unanswered":                        120,
		"killed after the next grant, its release (unanswered) sent after that grant": 155,
	}
	cases = append(cases, []struct {
		name    string
		events  []record.Event
		overlap bool
		how     string
		end     int64
	}{
		{"killed after the next grant, its release sent before it and unanswered",
			[]record.Event{ev(0, record.Mutex, record.Release, 100, 10)}, false, Died, 100},
		{"killed after the next grant, never released", nil, true, Died, 155},
		{"killed before the next grant, its release unanswered",
			[]record.Event{ev(0, record.Mutex, record.Release, 100, 10)}, false, Died, 100},
		{"killed after the next grant, its release (unanswered) sent after that grant",
			[]record.Event{ev(0, record.Mutex, record.Release, 152, 10)}, true, Died, 152},
	}...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs := append([]record.Event{ev(0, record.Mutex, record.Grant, 0, 10), ev(1, record.Mutex, record.Grant, 150, 20)}, c.events...)
			var died map[[2]int]int64
			if d, ok := deaths[c.name]; ok {
				died = map[[2]int]int64{{0, 0}: d * ms}
			}
			ls := Leases(evs, record.Mutex, nil, died, 1000*ms)
			if len(ls) != 2 {
				t.Fatalf("%d leases", len(ls))
			}
			l := ls[0]
			if l.How != c.how || l.End != c.end*ms {
				t.Errorf("lease ended %s at %d ms, want %s at %d ms", l.How, l.End/ms, c.how, c.end)
			}
			if vs := CheckExclusion(ls, 1, "mutex"); (len(vs) > 0) != c.overlap {
				t.Errorf("overlap %v, want %v: %v", len(vs) > 0, c.overlap, vs)
			}
		})
	}
}

// A claim of an item ends as a lease does; two claims of one item must not
// overlap.
func TestClaimsOverlap(t *testing.T) {
	job := func(p int, k string, at int64, id string, n int) record.Event {
		return record.Event{P: p, W: record.Queue, K: k, T: at * ms, ID: id, D: "d-" + id, N: n, Sid: int64(p + 1)}
	}
	// Client 0 takes item a at 0; client 1 takes it again at 150.
	cases := []struct {
		name    string
		events  []record.Event
		overlap bool
	}{
		{"told of the loss before the redelivery", []record.Event{job(0, record.Lost, 140, "a", 0)}, false},
		{"told of the loss after the redelivery", []record.Event{job(0, record.Lost, 160, "a", 0)}, true},
		{"its Ack, sent before, said the claim was lost after the redelivery",
			[]record.Event{job(0, record.Acking, 100, "a", 0), {P: 0, W: record.Queue, K: record.AckErr, T: 170 * ms, ID: "a", Err: "claim lost"}}, true},
		{"its Ack, sent before, landed", []record.Event{job(0, record.Acking, 100, "a", 0), job(0, record.Ack, 170, "a", 0)}, false},
		{"never told", nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs := append([]record.Event{job(0, record.Take, 0, "a", 1), job(1, record.Take, 150, "a", 2), job(0, record.Take, 10, "b", 1)}, c.events...)
			cl := Claims(evs, nil, nil, 1000*ms)
			if len(cl) != 3 {
				t.Fatalf("%d claims", len(cl))
			}
			if vs := CheckClaims(cl); (len(vs) > 0) != c.overlap {
				t.Errorf("overlap %v, want %v: %v", len(vs) > 0, c.overlap, vs)
			}
		})
	}
	// A consumer stopped (SIGSTOP) holds its claim only until the pause.
	evs := []record.Event{job(0, record.Take, 0, "a", 1), job(1, record.Take, 150, "a", 2), job(0, record.Lost, 900, "a", 0)}
	if vs := CheckClaims(Claims(evs, []Pause{{P: 0, Start: 100 * ms, End: 800 * ms}}, nil, 1000*ms)); len(vs) != 0 {
		t.Errorf("paused consumer reported: %v", vs)
	}
}
