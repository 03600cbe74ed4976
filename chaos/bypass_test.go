package chaos

import (
	"testing"
	"time"

	"github.com/zkrecipes/zkrecipes/chaos/record"
)

// sec is an event of a CachedMutex section: holding tok, section n.
func sec(p int, k string, t, tok int64, n uint32) record.Event {
	e := ev(p, record.Cached, k, t, tok)
	e.Sec = n
	return e
}

// A contender passed by the sections a kept holding begins later than the
// window after its join is reported, beyond the one allowed; the sections
// of its own holding, sections begun within the window, and sections begun
// around a pause of their process are not. Fences order the sections of a
// holding.
func TestBypassAndFences(t *testing.T) {
	const window = 100 * time.Millisecond
	// Client 0 keeps holding 10, sections 2, 3, 4... every 50 ms; client
	// 1's node joins at 50 ms (seen by the harness then), and it is
	// granted token 20 at 400 ms.
	var evs []record.Event
	for i := range 6 {
		t0 := int64(i) * 50
		evs = append(evs, sec(0, record.Grant, t0, 10, uint32(i+2)), sec(0, record.Release, t0+10, 10, uint32(i+2)), sec(0, record.Unlocked, t0+11, 10, uint32(i+2)))
	}
	waiter := ev(1, record.Mutex, record.Grant, 400, 20)
	waiter.ID = "/l/w"
	evs = append(evs, waiter, ev(1, record.Mutex, record.Release, 450, 20))
	joins := map[string]int64{"/l/w": 50 * ms}
	ls := append(Leases(evs, record.Mutex, nil, nil, 1000*ms), Leases(evs, record.Cached, nil, nil, 1000*ms)...)
	if vs := append(CheckExclusion(ls, 1, "x"), CheckTokenOrder(ls, "y")...); len(vs) > 0 {
		t.Fatalf("exclusion and fences of a clean history reported: %v", vs)
	}
	// Sections at 200 and 250, later than 50+100: two late, one allowed.
	waiters, worst, vs := CheckBypass(ls, joins, nil, window)
	if waiters != 1 || worst != 2 || len(vs) != 1 || vs[0].Rule != "cached: bypass bounded" {
		t.Fatalf("bypass: %d waiters, worst %d, %v", waiters, worst, vs)
	}
	// A wider window: one late section, allowed.
	if _, worst, vs := CheckBypass(ls, joins, nil, 175*time.Millisecond); worst != 1 || len(vs) != 0 {
		t.Fatalf("one late section reported: worst %d, %v", worst, vs)
	}
	// Client 0 stopped from 180 to 240 ms: its sections then are left out.
	if _, worst, vs := CheckBypass(ls, joins, []Pause{{P: 0, Start: 180 * ms, End: 240 * ms}}, window); worst != 0 || len(vs) != 0 {
		t.Fatalf("sections around a pause reported: worst %d, %v", worst, vs)
	}
	// Unseen joins judge nothing.
	if waiters, _, vs := CheckBypass(ls, nil, nil, window); waiters != 0 || len(vs) != 0 {
		t.Fatalf("no joins: %d waiters, %v", waiters, vs)
	}
	// A section numbered lower than one before it, of the same holding, is
	// out of order.
	back := append(evs[:len(evs):len(evs)], sec(0, record.Grant, 500, 10, 3), sec(0, record.Release, 510, 10, 3))
	ls = Leases(back, record.Cached, nil, nil, 1000*ms)
	if vs := CheckTokenOrder(ls, "fences"); len(vs) != 1 {
		t.Fatalf("a section out of order: %v", vs)
	}
}

// The register orders fences as zklock does: by token, then section.
func TestRegisterFences(t *testing.T) {
	r := &Register{log: map[string]applied{}}
	for i, c := range []struct {
		req  []string
		want string
	}{
		{[]string{"R", "a", "10.2"}, "OK 0"},
		{[]string{"W", "b", "10.3", "0", "1"}, "OK"},
		{[]string{"W", "c", "10.2", "1", "2"}, "REJ"}, // an earlier section
		{[]string{"R", "d", "10"}, "REJ"},             // section 0 of the same token
		{[]string{"R", "e", "11"}, "OK 1"},            // a later holder
		{[]string{"R", "f", "10.99"}, "REJ"},
		{[]string{"R", "g", "0"}, "OK 1"}, // no token
	} {
		got, err := r.apply(c.req)
		if err != nil || got != c.want {
			t.Fatalf("request %d %v: %q, %v; want %q", i, c.req, got, err, c.want)
		}
	}
	if _, err := r.apply([]string{"R", "h", "10.x"}); err == nil {
		t.Fatal("a bad fence was taken")
	}
}

// A cached lease whose release was sent but never confirmed (the reply lost
// with the connection, the session lost later) ends when its release was
// sent if a later lease of the same session was granted: its node was gone
// by then. Of another session, it overlaps.
func TestLandedRelease(t *testing.T) {
	for _, c := range []struct {
		sid  int64
		want int
	}{{1, 0}, {2, 1}} {
		a := sec(0, record.Grant, 0, 10, 1)
		a.Sid = 1
		b := sec(0, record.Grant, 110, 11, 1)
		b.Sid = c.sid
		evs := []record.Event{a, sec(0, record.Release, 100, 10, 1), b, sec(0, record.Lost, 3000, 10, 1), sec(0, record.Release, 200, 11, 1)}
		ls := Leases(evs, record.Cached, nil, nil, 5000*ms)
		if vs := CheckExclusion(ls, 1, "x"); len(vs) != c.want {
			t.Fatalf("session %d: %v", c.sid, vs)
		}
	}
}
