package chaos

import (
	"strings"
	"testing"
	"time"
)

// testdata/divergence.log is made of a real run's server log lines (server
// 0 of a failed 10-minute run): its start, a truncation the leader asked
// for and the digest mismatch that followed it, a restart that loaded the
// same tree again, then a snapshot from a leader (that line taken from
// another server's log of the same run). Each mismatch begins a diverged
// tree; a start, a truncation or a snapshot ends it.
func TestReadDivergences(t *testing.T) {
	c := Clock{Wall: time.Date(2026, 12, 4, 4, 50, 0, 0, time.Local), Mono: 1000 * int64(time.Second)}
	at := func(hms string) int64 {
		tod, err := time.Parse("15:04:05.000", hms)
		if err != nil {
			t.Fatal(err)
		}
		w := time.Date(2026, 12, 4, tod.Hour(), tod.Minute(), tod.Second(), tod.Nanosecond(), time.Local)
		return c.Mono + int64(w.Sub(c.Wall))
	}
	ds, err := ReadDivergences("testdata/divergence.log", 0, c)
	if err != nil {
		t.Fatal(err)
	}
	want := []Divergence{
		{Server: 0, From: at("04:52:44.892"), Until: at("04:53:28.394"), Zxid: 0x700000001},
		{Server: 0, From: at("04:53:28.791"), Until: at("04:55:21.850"), Zxid: 0x700000001},
	}
	if len(ds) != len(want) {
		t.Fatalf("got %d divergences, want %d: %+v", len(ds), len(want), ds)
	}
	for i, w := range want {
		d := ds[i]
		if d.Server != w.Server || d.From != w.From || d.Until != w.Until || d.Zxid != w.Zxid || !strings.Contains(d.Line, "First digest mismatch") {
			t.Errorf("divergence %d: got %+v, want %+v", i, d, w)
		}
	}
	if !ds[0].Covers(at("04:52:52.105")) || ds[0].Covers(at("04:52:44.000")) || ds[1].Covers(at("04:55:30.000")) {
		t.Errorf("Covers: %+v", ds)
	}
}

// A log that runs past midnight: the time of day starting again is the next
// day, not the same day's morning.
func TestLogTimeAcrossMidnight(t *testing.T) {
	c := Clock{Wall: time.Date(2026, 12, 4, 23, 59, 0, 0, time.Local), Mono: 5 * int64(time.Second)}
	read := c.dayReader()
	a, ok1 := read("23:59:59.500 [main] INFO x - y")
	b, ok2 := read("00:00:00.250 [main] INFO x - y")
	if !ok1 || !ok2 {
		t.Fatal("lines not read")
	}
	if a != c.Mono+int64(59500*time.Millisecond) || b-a != int64(750*time.Millisecond) {
		t.Fatalf("23:59:59.500 at %d, 00:00:00.250 %d later", a-c.Mono, b-a)
	}
	if _, ok := read(", expected digest is 2,59408306822"); ok {
		t.Fatal("a continuation line read as a moment")
	}
}
