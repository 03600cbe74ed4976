package zklock

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/internal/line"
	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/telemetry"
)

// Election is leader election: ZooKeeper's recipe, in the shape of etcd's
// concurrency.Election. Each campaigner puts an ephemeral sequential node in
// the election's directory; the lowest node leads, with that node's Czxid as
// its term. A campaigner watches only the node just ahead of its own, so a
// change of leader wakes one campaigner, not all of them.
//
// An Election is safe for concurrent use. A Session may campaign more than
// once in one election (several goroutines, say): each Campaign is a
// separate contender and only the lowest leads.
//
// What it guarantees: at most one Leadership of an election is held at any
// time, as far as ZooKeeper knows; a leader whose session is over is told
// (its Lease's Done, Err and Context) before another campaigner can be
// elected, and one whose node another client deletes is told when the next
// campaigner hears of it; terms strictly increase over successive leaders.
// What it cannot guarantee: that a leader that pauses past its session
// timeout stops acting. Fence what a leader writes with its term (Token) or,
// for ZooKeeper itself, with Guard.
type Election struct {
	s    *session.Session
	dir  string
	data []byte
	acl  []zk.ACL
}

// NewElection returns an election on the directory path. It creates nothing
// until the first Campaign: the directory is made then, as a container node
// that the server removes once empty. WithData sets the value a Campaign
// given a nil value stores; WithACL the ACL of the nodes it creates.
func NewElection(s *zkrecipes.Session, path string, opts ...Option) (*Election, error) {
	o, err := newOptions(s, path, opts)
	if err != nil {
		return nil, err
	}
	return &Election{s: o.s, dir: path, data: o.data, acl: o.acl}, nil
}

// Leadership is one term of leadership, won by Campaign. Its Lease ends when
// the leader resigns or loses leadership; Token is the term, strictly
// increasing over the successive leaders of one election.
type Leadership struct {
	*Lease
}

// leader is an election's rule: the lowest leads; a campaigner waits for the
// one just ahead. Unlike a Mutex's, a change to the predecessor's data proves
// nothing (a leader's Proclaim makes one): only its going, when it was the
// only one ahead.
func leader(_ []line.Node, me int) line.Decision {
	if me == 0 {
		return line.Decision{Hold: true}
	}
	return line.Decision{Watch: []int{me - 1}, GoneHolds: me == 1}
}

// Campaign enters the election with value and blocks until this contender
// leads, ctx ends, or the session is over. value (at most
// zkrecipes.MaxDataSize bytes; nil means the election's WithData) is what
// Leader and Observe report for this contender.
//
// Before returning, Campaign checks that the lowest node is ours, owned by
// this Session's ZooKeeper session. It rides out disconnects that the session
// survives. Once the session is over it fails with an error wrapping
// ErrLockLost and the session's error; connect a new Session to campaign
// again. On every error its node is deleted before Campaign returns (or, if
// the server cannot be reached, as soon as it can be while the session
// lives).
func (el *Election) Campaign(ctx context.Context, value []byte) (*Leadership, error) {
	if value == nil {
		value = el.data
	}
	if len(value) > zkrecipes.MaxDataSize {
		return nil, fmt.Errorf("zklock: campaign %s: %w: value has %d bytes, the limit is %d",
			el.dir, zkrecipes.ErrDataTooLarge, len(value), zkrecipes.MaxDataSize)
	}
	h, err := line.Acquire(ctx, el.s, &line.Spec{
		Dir: el.dir, Kind: line.Candidate, Marker: "-elect-", Data: value, ACL: el.acl, Rule: leader,
		ListWithCreate: true, VerifyOwner: true,
		Busy: ErrLocked, Lost: ErrLockLost, Mixed: ErrPathInUse,
		Recipe: telemetry.Election, Span: "zklock.Election.Campaign", Names: errorName,
	}, true)
	if err != nil {
		return nil, fmt.Errorf("zklock: campaign %s: %w", el.dir, err)
	}
	return &Leadership{newLease(el.s, h)}, nil
}

// Proclaim replaces the leader's value without an election. It fails with
// an error wrapping ErrNotLeader once the leadership has ended (resigned or
// lost), and with one wrapping zkrecipes.ErrDataTooLarge, writing nothing,
// when value is larger than zkrecipes.MaxDataSize.
//
// The write is fenced by the node's data version: it cannot land on a node
// someone else changed. It is not sent if ctx has ended. If ctx ends while
// it is in flight, Proclaim returns ctx's cause and the write may land: the
// leadership is kept either way. A write whose connection dropped is sent
// again, once the client has reconnected, if it did not land.
func (l *Leadership) Proclaim(ctx context.Context, value []byte) error {
	if len(value) > zkrecipes.MaxDataSize {
		return fmt.Errorf("zklock: proclaim: %w: value has %d bytes, the limit is %d",
			zkrecipes.ErrDataTooLarge, len(value), zkrecipes.MaxDataSize)
	}
	if value == nil {
		value = []byte{}
	}
	err := l.o.Write(ctx, value)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrReleased), errors.Is(err, ErrLockLost):
		return fmt.Errorf("zklock: proclaim %s: %w: %w", l.path, ErrNotLeader, err)
	default:
		return fmt.Errorf("zklock: proclaim %s: %w", l.path, err)
	}
}

// Resign gives up the leadership: the node is deleted and the next
// campaigner in line is elected. It is released as Lease.Unlock releases:
// nil once the node is confirmed gone, and again if called again; an error
// wrapping ErrLockLost if leadership had already been lost; one wrapping
// ErrSettled after Unlock (and Unlock after Resign wraps ErrSettled too).
// The release is sent and goes on whatever becomes of ctx, even one that
// had ended before the call.
func (l *Leadership) Resign(ctx context.Context) error { return l.release(ctx, "resign") }
