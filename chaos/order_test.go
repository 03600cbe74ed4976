package chaos

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zkrecipes/zkrecipes/chaos/record"
)

// history is a small run written by hand, as four processes would have
// recorded it, each event stamped with its time (ms) and its process's Seq.
// It breaks one rule: client 3 is told of its loss of the mutex (token 7)
// at 450 ms, after client 2 was granted it again (token 9) at 400 ms. And it
// has the case of a real run (seed 12402937831525012181): item 1-0 put by
// client 0 (its Put returned at 120 ms) and taken by client 1 at 140 ms,
// whose Take arrived before the Put.
func orderHistory() *History {
	seq := map[int]int64{}
	e := func(p int, w, k string, at int64, f func(*record.Event)) record.Event {
		seq[p]++
		x := record.Event{P: p, W: w, K: k, T: at * ms, Seq: seq[p]}
		if f != nil {
			f(&x)
		}
		return x
	}
	tok := func(t int64) func(*record.Event) { return func(x *record.Event) { x.Tok = t } }
	item := func(x *record.Event) { x.ID, x.D, x.N, x.Sid = "0000000001-0000000000", "p0.0.1", 1, 2 }
	var p0, p1, p2, p3 []record.Event
	p0 = append(p0,
		e(0, "", record.Ready, 1, nil),
		e(0, record.Semaphore, record.Grant, 5, tok(11)),
		e(0, record.Election, record.Grant, 10, tok(3)),
		e(0, record.Semaphore, record.Release, 30, tok(11)),
		e(0, record.Semaphore, record.Unlocked, 31, tok(11)),
		e(0, record.Semaphore, record.Freed, 31, tok(11)), // same ms: Seq orders them
		e(0, record.Election, record.Release, 50, tok(3)),
		e(0, record.Election, record.Unlocked, 52, tok(3)),
		e(0, record.Queue, record.Put, 100, func(x *record.Event) { x.D = "p0.0.1" }),
		e(0, record.Queue, record.PutOK, 120, func(x *record.Event) { x.D, x.ID = "p0.0.1", "0000000001-0000000000" }),
	)
	p1 = append(p1,
		e(1, "", record.Ready, 2, nil),
		e(1, record.Election, record.Grant, 60, tok(4)),
		e(1, record.Election, record.Release, 70, tok(4)),
		e(1, record.Election, record.Unlocked, 71, tok(4)),
		e(1, record.Queue, record.Take, 140, item),
		e(1, record.Queue, record.Acking, 150, item),
		e(1, record.Queue, record.Ack, 160, item),
	)
	p2 = append(p2,
		e(2, "", record.Ready, 3, nil),
		e(2, record.Observe, record.Obs, 20, func(x *record.Event) { x.Tok, x.ID, x.Sid = 3, "/e/a", 7 }),
		e(2, record.Observe, record.Obs, 65, func(x *record.Event) { x.Tok, x.ID, x.Sid = 4, "/e/b", 7 }),
		e(2, record.Mutex, record.Grant, 200, tok(5)),
		e(2, record.Mutex, record.Call, 201, func(x *record.Event) { x.Op, x.F, x.Tok = "r1", "r", 5 }),
		e(2, record.Mutex, record.Ret, 202, func(x *record.Event) { x.Op, x.F = "r1", "r" }),
		e(2, record.Mutex, record.Call, 203, func(x *record.Event) { x.Op, x.F, x.Tok, x.V = "w1", "w", 5, 1 }),
		e(2, record.Mutex, record.Ret, 204, func(x *record.Event) { x.Op, x.F = "w1", "w" }),
		e(2, record.Mutex, record.Release, 300, tok(5)),
		e(2, record.Mutex, record.Unlocked, 305, tok(5)),
		e(2, record.Mutex, record.Grant, 400, tok(9)),
		e(2, record.Mutex, record.Release, 500, tok(9)),
		e(2, record.Mutex, record.Unlocked, 510, tok(9)),
	)
	p3 = append(p3,
		e(3, "", record.Ready, 4, nil),
		e(3, record.Mutex, record.Grant, 310, tok(7)),
		e(3, record.Mutex, record.Lost, 450, tok(7)),
		e(3, record.Mutex, record.Release, 451, tok(7)),
		e(3, record.Mutex, record.Unlocked, 452, func(x *record.Event) { x.Tok, x.Err, x.F = 7, "lock lost", "lost" }),
	)
	// As they arrived: client 1's pipe first.
	var evs []record.Event
	for _, p := range [][]record.Event{p1, p3, p2, p0} {
		evs = append(evs, p...)
	}
	return &History{
		Config:   Config{Servers: 3, Clients: 4, Permits: 2, SessionTimeout: 3e9},
		Events:   evs,
		Register: map[string]applied{"r1": {T: 201*ms + 1, V: 0}, "w1": {T: 203*ms + 1}},
		End:      1000 * ms, Converged: "4/4",
	}
}

// verdict is what Check concluded, without the summary's first line (the
// run's settings).
func verdict(r *Result) string {
	var vs []string
	for _, v := range r.Violations {
		vs = append(vs, v.String())
	}
	_, rest, _ := strings.Cut(r.Summary, "\n")
	return rest + strings.Join(vs, "\n")
}

// The checks judge a history in the order things happened, whatever the
// order of the lines of events.jsonl: shuffled, the file gives the same
// verdict, and the item taken before its Put's record arrived is no
// phantom.
func TestVerdictIgnoresRecordOrder(t *testing.T) {
	h := orderHistory()
	want := Check(h)
	if len(want.Violations) != 1 || want.Violations[0].Rule != "mutex: one holder at a time" {
		t.Fatalf("the history breaks one rule, the mutex's; the checks say:\n%s", verdict(want))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 50 {
		dir := t.TempDir()
		evs := slices.Clone(h.Events)
		rng.Shuffle(len(evs), func(a, b int) { evs[a], evs[b] = evs[b], evs[a] })
		writeLines(t, filepath.Join(dir, "events.jsonl"), evs)
		hj, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "history.json"), hj, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := LoadHistory(dir)
		if err != nil {
			t.Fatal(err)
		}
		got.Config.Out = "" // no register.html
		if g, w := verdict(Check(got)), verdict(want); g != w {
			t.Fatalf("shuffle %d: verdict\n%s\nwant\n%s", i, g, w)
		}
	}
}

func writeLines(t *testing.T, path string, evs []record.Event) {
	var b strings.Builder
	for _, e := range evs {
		j, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
