package wire

// Proof of contact: which replies prove that the ensemble's leader, the one
// server that expires sessions, has heard from this session lately.
//
// A follower never tells the leader of a request when it arrives: it notes
// the session in a table that it hands over in its answer to the leader's
// next PING (every tickTime/2). A follower cut off from the leader still
// answers pings and reads for syncLimit x tickTime, so a reply proves
// nothing about the leader's clock. Three replies on one connection do:
//
//   - j, any request, answered at r_j: the follower noted the session;
//   - m, a sync or a write sent at least one window W after r_j and
//     answered: the leader's PING of that window reached the follower
//     before m did, so the follower wrote its answer, with j's touch, onto
//     the one ordered stream to the leader before it forwarded m;
//   - k, a write sent after m's answer, that the leader prepared with the
//     session live (a success, or an error it raises only after checking
//     the session): the leader read that PING answer, and applied j's
//     touch, before it read k; k being a quorum write, no newer leader had
//     started its own clock of the session before k was sent.
//
// So when k's answer arrives, no leader can expire the session until a
// full timeout after j was sent. Any traffic makes such chains (a busy
// session proves its contact for free); the Session's monitor sends one
// when none came in time. The analysis, from ZooKeeper 3.8's source, is in
// docs/loss-bound.md.
//
// Two kinds of server need less. A standalone server is its own leader and
// touches the session when a request arrives: any reply proves its send
// time. A leader touches on arrival too, but it may have been deposed
// without knowing it yet: a write it commits proves its send time. A
// server's role is asked once per connection (the srvr four-letter word);
// a role change closes every client connection, so the answer holds for
// requests sent after it on a connection that still answers them.
//
// One more care: a follower can lose a touch noted while it hands its table
// over (ZooKeeper's LearnerSessionTracker swaps the table without a lock),
// so j's predecessor on the connection is credited, not j itself.

import (
	"sort"
	"time"
)

// Mode is the role of the server at the other end of a connection.
type Mode int32

const (
	// ModeUnknown is a connection whose server has not said (or could not
	// be asked): it is treated as a follower, which is always safe.
	ModeUnknown Mode = iota
	ModeFollower
	ModeLeader
	ModeStandalone
)

func (m Mode) String() string {
	switch m {
	case ModeFollower:
		return "follower"
	case ModeLeader:
		return "leader"
	case ModeStandalone:
		return "standalone"
	}
	return "unknown"
}

// ParseMode reads the Mode line of a srvr answer: "leader", "follower",
// "standalone"; an observer is treated as a follower (one hop to the
// leader), anything else as unknown.
func ParseMode(s string) Mode {
	switch s {
	case "leader":
		return ModeLeader
	case "follower", "observer":
		return ModeFollower
	case "standalone":
		return ModeStandalone
	}
	return ModeUnknown
}

// The bound's constants (see docs/loss-bound.md): a monotonic clock's largest rate
// error, the leader's ping loop's own overhead, and the leader stall the
// window absorbs.
const (
	ClockDrift  = 1e-3
	pingSlack   = 10 * time.Millisecond
	leaderStall = 250 * time.Millisecond
)

// Window is W: a span of client time certain to contain one PING from the
// leader to each follower, for a tickTime of at most tick.
func Window(tick time.Duration) time.Duration {
	return time.Duration(float64(tick/2+pingSlack+leaderStall) * (1 + ClockDrift) / (1 - ClockDrift))
}

// Request opcodes and error codes of the protocol that the rule needs.
const (
	opCreate          = 1
	opDelete          = 2
	opSetData         = 5
	opSync            = 9
	opMulti           = 14
	opCreate2         = 15
	opCreateContainer = 19
	opCreateTTL       = 21
	opError           = -1 // a multi result's type when it failed
)

// isWrite: a request the leader prepares and proposes (forwarded by a
// follower).
func isWrite(op int32) bool {
	switch op {
	case opCreate, opDelete, opSetData, opMulti, opCreate2, opCreateContainer, opCreateTTL:
		return true
	}
	return false
}

// checkedAt is whether a write's error code is one the leader raises only
// after it has checked that the session is live: 0 and the errors of a
// node's state (no node, no auth, bad version, no children for ephemerals,
// node exists, not empty). ZooKeeper 3.8's PrepRequestProcessor checks the
// session first for delete, setData and check, and in validateCreateRequest,
// before any of these, for create.
func checkedAt(code int32) bool {
	switch code {
	case 0, -101, -102, -103, -108, -110, -111:
		return true
	}
	return false
}

// pending is a request still owed a reply.
type pending struct {
	xid   int32
	op    int32
	sent  int64 // when its first byte was written
	fence int64 // a sync or write: the contact it fences once answered; -1 none
	win   int64 // the window the fence was found with
	prior int64 // a write: the best fenced contact answered before it was sent; -1 none
}

// span is an answered request: sent and answered.
type span struct{ sent, recv int64 }

// SpanGap is the closest, in fractions of the window, that two answered
// requests a connection keeps may be: a busy connection keeps a few
// hundred per window, not every one. Requests skipped only widen the pair
// the chain credits (an earlier predecessor), which is conservative.
const SpanGap = 512

// proof is the chain state of one connection. The watched connection holds
// its lock.
type proof struct {
	spans  []span // answered requests, oldest first, pruned to the window
	fenced int64  // the best contact fenced by an answered sync or write; -1 none
}

func newProof() proof { return proof{fenced: -1} }

// answered records a reply at now; w is the window.
func (p *proof) answered(s span, now, w int64) {
	// spans[0] matters only as the predecessor of spans[1]; once spans[2]
	// is old enough to serve, the pair (1, 2) beats (0, 1).
	for len(p.spans) >= 3 && p.spans[2].recv <= now-w {
		p.spans = p.spans[1:]
	}
	if n := len(p.spans); n >= 2 && s.sent-p.spans[n-1].sent < w/SpanGap {
		return
	}
	p.spans = append(p.spans, s)
}

// contact is the contact a sync or write sent at sent proves once fenced
// and confirmed: the send time of the predecessor of the latest request
// answered at least w before; -1 if there is none. Replies come in order,
// so spans are sorted by recv.
func (p *proof) contact(sent, w int64) int64 {
	i := sort.Search(len(p.spans), func(i int) bool { return p.spans[i].recv > sent-w }) - 1
	if i < 1 {
		return -1
	}
	return p.spans[i-1].sent
}
