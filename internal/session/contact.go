package session

import (
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/wire"
)

// The Session's loss rule. The wire watcher proves contact from whatever
// the session sends (package wire, proof.go): the latest send time π that
// the ensemble's leader provably heard. No leader can expire the session
// before a full timeout T after π, by its own clock. The Session gives
// itself up at
//
//	D = π + loss × T × (1−ρ)/(1+ρ)
//
// (ρ: the largest rate error of a monotonic clock), so its holders are told
// at least (1−loss)·T before the ensemble can give their nodes to anyone
// else. A busy session proves its contact for free; an idle one sends a
// proof cycle every period (below) so that two cycles in a row can fail
// without a false loss.

// deadline is how long after the proven contact the session is given up.
func deadline(timeout time.Duration, loss float64) time.Duration {
	return time.Duration(float64(timeout) * loss * (1 - wire.ClockDrift) / (1 + wire.ClockDrift))
}

// period is how long after the proven contact a proof cycle starts: a
// third of what is left of the deadline once a cycle's own lag (the window,
// for a follower, and its round trips) is paid.
func period(timeout time.Duration, loss float64, mode wire.Mode, window, rtt time.Duration) time.Duration {
	lag := 3 * rtt
	if mode != wire.ModeStandalone && mode != wire.ModeLeader {
		lag += window
	}
	return max((deadline(timeout, loss)-lag)/3, minPeriod)
}

// minPeriod keeps a hopeless configuration (a timeout too short for the
// tickTime) from spinning; such a session is lost soon, and says why.
const minPeriod = 20 * time.Millisecond

// prove sends one proof cycle on the connection of the moment, as the
// server's role needs it (see package wire): a read; for a follower (or an
// unknown server) a second read, a wait of one window, and a sync; then,
// but on a standalone server, a write that changes nothing, a multi
// checking the root. The wire watcher judges the replies; prove only makes
// the traffic, and stops at the first error (the next cycle starts once the
// client has reconnected). It returns the longest round trip it saw.
func (s *Session) prove() time.Duration {
	conn := s.conn
	mode := s.tr.Mode()
	var rtt time.Duration
	timed := func(f func() error) bool {
		start := time.Now()
		err := f()
		rtt = max(rtt, time.Since(start))
		return err == nil
	}
	read := func() error { _, _, err := conn.Exists("/"); return err }
	if !timed(read) || mode == wire.ModeStandalone {
		return rtt
	}
	pause := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-s.closeReq:
		case <-s.done:
		}
		return false
	}
	if mode != wire.ModeLeader {
		// The first read's touch is what the chain credits: a follower may
		// drop a touch it notes while handing its table to the leader, and
		// cannot drop two in a row. The second is sent apart from the first
		// by the closest two requests the wire watcher keeps apart: closer,
		// it would credit the previous cycle's sync, and cycles would come
		// twice as often.
		if !pause(s.tr.Window()/wire.SpanGap+time.Millisecond) || !timed(read) {
			return rtt
		}
		if !pause(s.tr.Window()) {
			return rtt
		}
		if !timed(func() error { _, err := conn.Sync("/"); return err }) {
			return rtt
		}
	}
	// NoAuth or NoNode from a locked-down root still proves: the leader
	// checks the session before either.
	timed(func() error {
		_, err := conn.Multi(&zk.CheckVersionRequest{Path: "/", Version: -1})
		return err
	})
	return rtt
}

// Remaining is how long from now until the Session gives itself up unless
// a newer contact is proven (lost), and until the earliest moment any
// leader could expire the session (expiry), both by this host's monotonic
// clock; negative once past. Whoever acts for a holder outside this
// process (a command run under a lock) must stop it before expiry.
func (s *Session) Remaining() (lost, expiry time.Duration) {
	timeout, unproven := s.Timeout(), s.tr.Unproven()
	return deadline(timeout, s.loss) - unproven, deadline(timeout, 1) - unproven
}
