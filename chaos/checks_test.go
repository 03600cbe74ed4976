package chaos

import (
	"strings"
	"testing"

	"github.com/zkrecipes/zkrecipes/chaos/record"
)

// These tests feed the checkers histories written by hand: each rule must
// report the history that breaks it and accept the one that keeps it.

const ms = int64(1e6)

func ev(p int, w, k string, t int64, tok int64) record.Event {
	return record.Event{P: p, W: w, K: k, T: t * ms, Tok: tok}
}

func rules(vs []Violation) string {
	var s []string
	for _, v := range vs {
		s = append(s, v.Rule)
	}
	return strings.Join(s, "; ")
}

func TestExclusionAndTokens(t *testing.T) {
	// Client 0 holds token 10 from 0 to 100 ms; client 1 token 20 from 150.
	ok := []record.Event{
		ev(0, record.Mutex, record.Acquiring, 0, 0), ev(0, record.Mutex, record.Grant, 1, 10),
		ev(1, record.Mutex, record.Acquiring, 2, 0),
		ev(0, record.Mutex, record.Release, 100, 10), ev(0, record.Mutex, record.Unlocked, 101, 10),
		ev(1, record.Mutex, record.Grant, 150, 20), ev(1, record.Mutex, record.Release, 200, 20),
	}
	ls := Leases(ok, record.Mutex, nil, nil, 1000*ms)
	if vs := append(CheckExclusion(ls, 1, "x"), CheckTokenOrder(ls, "y")...); len(vs) > 0 {
		t.Fatalf("clean history reported: %v", vs)
	}

	// Client 0 learns of its loss only at 180 ms: both looked held.
	late := append([]record.Event(nil), ok[:3]...)
	late = append(late, ev(1, record.Mutex, record.Grant, 150, 20), ev(0, record.Mutex, record.Lost, 180, 10), ev(1, record.Mutex, record.Release, 200, 20))
	ls = Leases(late, record.Mutex, nil, nil, 1000*ms)
	if vs := CheckExclusion(ls, 1, "mutex"); len(vs) != 1 {
		t.Fatalf("overlap not reported: %v", vs)
	}
	if lost, before, _ := LossStats(ls); lost != 1 || before != 0 {
		t.Fatalf("loss stats %d %d", lost, before)
	}

	// The same, but client 0 was stopped from 120 to 170 ms: it could not
	// have known; the lease counts until the pause only.
	ls = Leases(late, record.Mutex, []Pause{{P: 0, Start: 120 * ms, End: 170 * ms}}, nil, 1000*ms)
	if vs := CheckExclusion(ls, 1, "mutex"); len(vs) != 0 {
		t.Fatalf("paused holder reported: %v", vs)
	}
	if !ls[0].Paused || ls[0].End != 120*ms {
		t.Fatalf("paused lease: %+v", ls[0])
	}

	// A lower token granted after a higher one ended.
	back := []record.Event{
		ev(0, record.Mutex, record.Grant, 1, 20), ev(0, record.Mutex, record.Release, 100, 20), ev(0, record.Mutex, record.Unlocked, 101, 20),
		ev(1, record.Mutex, record.Grant, 150, 10), ev(1, record.Mutex, record.Release, 200, 10), ev(1, record.Mutex, record.Unlocked, 201, 10),
	}
	ls = Leases(back, record.Mutex, nil, nil, 1000*ms)
	if vs := CheckTokenOrder(ls, "tokens"); len(vs) != 1 {
		t.Fatalf("tokens going back not reported: %v", vs)
	}

	// Three permits held at once, two allowed.
	sem := []record.Event{
		ev(0, record.Semaphore, record.Grant, 1, 10), ev(1, record.Semaphore, record.Grant, 2, 11),
		ev(2, record.Semaphore, record.Grant, 3, 12),
		ev(0, record.Semaphore, record.Release, 50, 10), ev(1, record.Semaphore, record.Release, 50, 11), ev(2, record.Semaphore, record.Release, 50, 12),
	}
	ls = Leases(sem, record.Semaphore, nil, nil, 1000*ms)
	if vs := CheckExclusion(ls, 2, "sem"); len(vs) != 1 {
		t.Fatalf("three holders of two permits not reported: %v", vs)
	}
	if vs := CheckExclusion(ls, 3, "sem"); len(vs) != 0 {
		t.Fatalf("three of three reported: %v", vs)
	}
}

func reg(p int, op, f string, tok, x, v int64, call, ret int64, rej bool, rv int64) []record.Event {
	return []record.Event{
		{P: p, W: record.Mutex, K: record.Call, Op: op, F: f, Tok: tok, X: x, V: v, T: call * ms},
		{P: p, W: record.Mutex, K: record.Ret, Op: op, Rej: rej, V: rv, T: ret * ms},
	}
}

func TestRegisterLostUpdate(t *testing.T) {
	// Client 0 reads 0 and, paused, writes 1 after client 1 read 0 and
	// wrote 1 and client 2 read 1 and wrote 2: a lost update unless its
	// write was refused.
	h := func(staleRefused bool) []record.Event {
		var evs []record.Event
		evs = append(evs, reg(0, "a", "r", 10, 0, 0, 0, 1, false, 0)...)
		evs = append(evs, reg(1, "b", "r", 20, 0, 0, 10, 11, false, 0)...)
		evs = append(evs, reg(1, "c", "w", 20, 0, 1, 12, 13, false, 0)...)
		evs = append(evs, reg(2, "d", "r", 30, 0, 0, 20, 21, false, 1)...)
		evs = append(evs, reg(2, "e", "w", 30, 1, 2, 22, 23, false, 0)...)
		evs = append(evs, reg(0, "f", "w", 10, 0, 1, 30, 31, staleRefused, 0)...)
		evs = append(evs, reg(2, "g", "r", 30, 0, 0, 40, 41, false, map[bool]int64{true: 2, false: 1}[staleRefused])...)
		return evs
	}
	ops, _ := RegisterHistory(h(true), nil)
	if res, vs, _ := CheckRegister(ops, "", 0); len(vs) != 0 {
		t.Fatalf("fenced history: %s %v", res, vs)
	}
	ops, _ = RegisterHistory(h(false), nil)
	if _, vs, _ := CheckRegister(ops, t.TempDir()+"/r.html", 0); len(vs) != 1 {
		t.Fatalf("lost update not reported: %v", vs)
	}

	// A write whose client died before the answer: the register's log
	// decides. Applied, it is in the history; never received, it is not.
	evs := reg(0, "a", "r", 10, 0, 0, 0, 1, false, 0)
	evs = append(evs, record.Event{P: 0, W: record.Mutex, K: record.Call, Op: "b", F: "w", Tok: 10, X: 0, V: 1, T: 2 * ms})
	evs = append(evs, reg(1, "c", "r", 20, 0, 0, 10, 11, false, 1)...)
	ops, st := RegisterHistory(evs, map[string]applied{"a": {T: ms}, "b": {T: 3 * ms}, "c": {T: 10 * ms, V: 1}})
	if st.FromLog != 1 || len(ops) != 3 {
		t.Fatalf("log not used: %+v", st)
	}
	if _, vs, _ := CheckRegister(ops, "", 0); len(vs) != 0 {
		t.Fatalf("%v", vs)
	}
	ops, st = RegisterHistory(evs[:3], nil)
	if st.NeverArrived != 1 || len(ops) != 1 {
		t.Fatalf("never-arrived write kept: %+v", st)
	}
}

func TestElectionChecks(t *testing.T) {
	evs := []record.Event{
		{P: 0, Sid: 1, W: record.Election, K: record.Grant, T: 1, Tok: 10},
		{P: 1, Sid: 2, W: record.Election, K: record.Grant, T: 2, Tok: 10},
		{P: 2, Sid: 3, W: record.Observe, K: record.Obs, T: 3, Tok: 20, ID: "/e/b"},
		{P: 2, Sid: 3, W: record.Observe, K: record.Obs, T: 4, ID: ""},
		{P: 2, Sid: 3, W: record.Observe, K: record.Obs, T: 5, Tok: 10, ID: "/e/a"},
		{P: 2, Sid: 4, W: record.Observe, K: record.Obs, T: 6, Tok: 5, ID: "/e/z"},
	}
	ls := Leases(evs, record.Election, nil, nil, 100)
	if vs := CheckTerms(ls); len(vs) != 1 {
		t.Fatalf("two leaders of one term not reported: %v", vs)
	}
	if n, vs := CheckObservers(evs); n != 4 || len(vs) != 1 {
		t.Fatalf("observer going back: %d %v", n, vs)
	}
	if got := LastObserved(evs, map[int]int{2: 0}); got[2] != "/e/z" {
		t.Fatalf("last observed %v", got)
	}
}

func TestQueueChecks(t *testing.T) {
	q := func(p int, k, id, d string, n int, unknown bool) record.Event {
		return record.Event{P: p, W: record.Queue, K: k, ID: id, D: d, N: n, Sid: 1, Unknown: unknown}
	}
	good := []record.Event{
		q(0, record.Put, "", "a", 0, false), q(0, record.PutOK, "1-1", "a", 0, false),
		q(0, record.Put, "", "b", 0, false), q(0, record.PutOK, "1-2", "b", 0, false),
		q(1, record.Take, "1-1", "a", 1, false), q(1, record.AckErr, "1-1", "a", 0, false),
		q(1, record.Take, "1-2", "b", 1, false), q(1, record.Ack, "1-2", "b", 0, false),
		q(1, record.Take, "1-1", "a", 2, false), q(1, record.Ack, "1-1", "a", 0, false),
	}
	if st, vs, _ := CheckQueue(good, 0); len(vs) != 0 || st.Redeliveries != 1 {
		t.Fatalf("good queue history: %+v %v", st, vs)
	}
	bad := append(append([]record.Event(nil), good...),
		q(0, record.Put, "", "c", 0, false), q(0, record.PutOK, "1-3", "c", 0, false), // never acked
		q(2, record.Take, "1-9", "zz", 1, false), // never put
		q(2, record.Take, "1-2", "b", 1, false),  // backwards, first delivery
		q(2, record.Ack, "1-2", "b", 0, false),   // second ack
	)
	_, vs, _ := CheckQueue(bad, 1)
	want := "no phantom items; ids go backwards only on redelivery; no item acked twice; every put item acked; queue drained"
	got := rules(vs)
	for _, r := range strings.Split(want, "; ") {
		if !strings.Contains(got, r) {
			t.Errorf("rule %q not reported; got %s", r, got)
		}
	}
}

// An Ack that said "claim lost" for an item that never came back and is gone
// is a finding (the Ack landed), not a lost item.
func TestQueueAckMisreported(t *testing.T) {
	evs := []record.Event{
		{P: 0, W: record.Queue, K: record.Put, D: "a"}, {P: 0, W: record.Queue, K: record.PutOK, D: "a", ID: "1-1"},
		{P: 1, W: record.Queue, K: record.Take, D: "a", ID: "1-1", N: 1},
		{P: 1, W: record.Queue, K: record.AckErr, D: "a", ID: "1-1"},
	}
	if _, vs, fs := CheckQueue(evs, 0); len(vs) != 0 || len(fs) != 1 {
		t.Fatalf("violations %v, findings %v", vs, fs)
	}
	if _, vs, _ := CheckQueue(evs, 1); len(vs) == 0 {
		t.Fatal("an item left in the queue not reported")
	}
	noAck := evs[:3]
	if _, vs, _ := CheckQueue(noAck, 0); len(vs) != 1 {
		t.Fatalf("an item gone without any Ack not reported: %v", vs)
	}
}
