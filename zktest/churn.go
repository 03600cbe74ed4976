package zktest

import (
	"math/rand/v2"
	"time"
)

// Churn makes a [Dropper] cut its connection at random, as a flaky network
// does: after a request (the connection dropped right after it was
// written, as with AfterWrite), chosen with probability 1/Every among the
// requests the client sends (pings and re-sent watches included, the
// connect request not), no sooner than Gap after the Dropper's previous
// churn cut. With Reads set, only reads are cut after (getData, exists,
// getChildren): the writes of a recipe always get their answers.
//
// The session survives each cut, as with [Dropper.Arm]: the client
// reconnects through the Dropper and resumes it.
type Churn struct {
	Every int           // one request in Every, on average, is cut after; 0 stops the churn
	Gap   time.Duration // the least time between two churn cuts of the Dropper
	Reads bool          // cut only after reads
	Seed  uint64        // the random choices' seed, for a run to be repeated
}

// Churn starts (or, with a zero Churn, stops) cutting the Dropper's
// connections at random. Arms and Holds go first: a request that matches
// one is not also churned.
func (d *Dropper) Churn(c Churn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.churn = c
	d.rng = rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15))
	d.lastChurn = time.Time{}
}

// Churned is the number of cuts made by the Dropper's Churn so far (they
// count in Fired too).
func (d *Dropper) Churned() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.churned
}

// churns reports whether r is to be cut after, by the Churn.
func (d *Dropper) churns(r request) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.churn
	if c.Every <= 0 || (c.Reads && !readOps[r.op]) {
		return false
	}
	now := time.Now()
	if !d.lastChurn.IsZero() && now.Sub(d.lastChurn) < c.Gap {
		return false
	}
	if d.rng.IntN(c.Every) != 0 {
		return false
	}
	d.lastChurn = now
	d.churned++
	return true
}

// readOps are the requests Churn.Reads cuts after.
var readOps = map[int32]bool{OpExists: true, OpGetData: true, OpGetChildren: true, OpGetChildren2: true}
