package zktest

import (
	"encoding/binary"
	"errors"
	"math"
	"time"
)

// errPaused is what a dial through a paused Dropper fails with once its
// timeout has passed.
var errPaused = errors.New("zktest: dropper paused: no connection until Resume")

// An outage through a [Dropper]: a cut (Arm), then a window during which
// the client cannot reconnect (Pause, Resume), in which other clients
// change what it watches; and the way a client can miss those changes once
// it is back (LoseMissedEvents).

// Pause keeps the client from reconnecting until Resume: a dial waits for
// Resume, then goes ahead, or for its timeout, then fails as a dial to a
// server that does not answer. The connection open now is not touched: cut
// it with Arm to start the outage. The window between the cut and Resume is
// the test's, for changes the client must learn of once it is back; it
// must be shorter than the session's loss time, or the session is over
// when the client comes back.
func (d *Dropper) Pause() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.paused == nil {
		d.paused = make(chan struct{})
	}
}

// Resume lets the client reconnect again, at once: a dial that waits goes
// ahead.
func (d *Dropper) Resume() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.paused != nil {
		close(d.paused)
		d.paused = nil
	}
}

// waitPaused waits, before a dial, while the Dropper is paused: until
// Resume (true) or timeout (false).
func (d *Dropper) waitPaused(timeout time.Duration) bool {
	d.mu.Lock()
	paused := d.paused
	d.mu.Unlock()
	if paused == nil {
		return true
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-paused:
		return true
	case <-t.C:
		return false
	}
}

// LoseMissedEvents makes the watches the client re-sets on its next
// connection blind to every change made while it was away: the setWatches
// requests it sends on that connection claim that it has seen every
// transaction (their relativeZxid is rewritten to the largest zxid), so
// the server re-registers each watch without firing it for a change it
// missed. That is what go-zookeeper v1.0.4 does when the reply to a
// request queued during the outage advances its last zxid before it reads
// it for those requests (its send and receive loops start first). The
// server fires a data watch whose node is gone, and an exists watch whose
// node now exists, whatever the zxid: the changes lost are the writes of a
// node's data and the changes of a directory's children.
//
// It is used once, by the first connection on which the client re-sets
// watches, and counts in Fired then.
func (d *Dropper) LoseMissedEvents() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.missed = true
}

// takeLose uses up LoseMissedEvents, if it was called.
func (d *Dropper) takeLose() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	was := d.missed
	d.missed = false
	return was
}

// forgetMissed rewrites the relativeZxid of a setWatches request (the frame
// with its length: xid, opcode, then relativeZxid) when LoseMissedEvents
// asked for it on this connection.
func (c *dropConn) forgetMissed(frame []byte) {
	if !c.losing {
		if !c.d.takeLose() {
			return
		}
		c.losing = true
		c.d.count()
	}
	if len(frame) >= 20 {
		binary.BigEndian.PutUint64(frame[12:20], math.MaxInt64)
	}
}
