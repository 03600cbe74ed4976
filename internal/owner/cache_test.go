package owner

import (
	"testing"
	"time"
)

// The rule of a local grant is pure: a table of every way it can go.
func TestDecide(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const T = 10 * time.Second
	const F = 25 * time.Millisecond
	ok := view{live: true, expiry: 8 * time.Second, timeout: T, watched: true, certOK: true,
		certSent: t0, now: t0.Add(F), asked: t0.Add(F), fresh: F}
	with := func(f func(*view)) view { v := ok; f(&v); return v }
	for _, c := range []struct {
		name string
		v    view
		want verdict
		why  string
	}{
		{"fresh sync, nobody joined", ok, grantNow, ""},
		{"sync just older than the window", with(func(v *view) { v.now = t0.Add(F + 1) }), refresh, ""},
		{"no sync answered on this connection", with(func(v *view) { v.certOK = false }), refresh, ""},
		{"strict: a sync sent before the ask", with(func(v *view) { v.fresh = 0; v.now = t0.Add(time.Millisecond) }), refresh, ""},
		{"strict: a sync sent as asked", with(func(v *view) { v.fresh = 0; v.asked = t0; v.now = t0.Add(time.Millisecond) }), grantNow, ""},
		{"a slow sync sent for this ask", with(func(v *view) { v.asked = t0.Add(-time.Millisecond); v.now = t0.Add(time.Second) }), grantNow, ""},
		{"the watch fired or the client reconnected", with(func(v *view) { v.watched = false }), letGo, WhyJoin},
		{"the watch fired, even with a fresh sync", with(func(v *view) { v.watched = false; v.now = t0 }), letGo, WhyJoin},
		{"contact older than half the timeout", with(func(v *view) { v.expiry = T/2 - 1 }), letGo, WhyUnproven},
		{"contact at half the timeout", with(func(v *view) { v.expiry = T / 2 }), grantNow, ""},
		{"session over", with(func(v *view) { v.live = false }), letGo, WhyLost},
		{"session over comes first", with(func(v *view) { v.live, v.watched, v.expiry = false, false, 0 }), letGo, WhyLost},
		{"contact before the watch", with(func(v *view) { v.watched, v.expiry = false, 0 }), letGo, WhyUnproven},
		{"the watch before the sync", with(func(v *view) { v.watched, v.certOK = false, false }), letGo, WhyJoin},
	} {
		got, why := decide(c.v)
		if got != c.want || why != c.why {
			t.Errorf("%s: decide = %v %q, want %v %q", c.name, got, why, c.want, c.why)
		}
	}
}
