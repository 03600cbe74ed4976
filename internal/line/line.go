// Package line is the waiting-line engine under every recipe: ZooKeeper's
// lock recipe, written once. A contender joins the line with an
// EPHEMERAL|SEQUENCE node (Join), lists the line in sequence order, asks
// its recipe's Rule whether it holds and, if not, which contenders ahead of
// it to watch, and waits for one of them to change (Wait). Mutex, RWMutex,
// Semaphore, Election and fairqueue's consumers differ only in their Rule.
//
// The engine keeps three rules, so that no recipe has to:
//
//   - a connection error is never an answer: reads are asked again once the
//     client has reconnected, while the session lives;
//   - a request sent may land, whatever became of its context: the clean-up
//     of an abandoned create waits for the create's outcome before it looks;
//   - the session's end is a loss, said once, in the recipe's words.
//
// Once a contender holds, its node passes to the owner package, whose one
// goroutine decides from then on whether the lease has ended.
package line

import (
	"context"
	"errors"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/telemetry"
	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// Spec describes one recipe's contenders in one directory.
type Spec struct {
	Dir    string
	Kind   Kind
	Marker string // between the GUID and the sequence number of our node's name
	Data   []byte
	ACL    []zk.ACL
	Rule   Rule

	// ListWithCreate sends the first listing in the create's round trip;
	// its child watch then stands in for the watch on our own node until
	// something in the directory changes (see Entry.dirEv).
	ListWithCreate bool
	// VerifyOwner checks, before we hold, that our node's ephemeralOwner is
	// our session (Election: a leader must be sure).
	VerifyOwner bool

	// The recipe's own sentinels: Busy when it would have to wait and may
	// not, Lost when our node or our session is gone, Mixed when the
	// directory holds another kind of recipe's contenders.
	Busy, Lost, Mixed error

	// Prepare, when set, runs between Join and Wait (a Semaphore checks
	// its number of permits there, and gives Wait its first listing).
	Prepare func(ctx context.Context, e *Entry) error

	// Recipe and Span name the recipe and the operation for telemetry
	// (telemetry.Mutex, "zklock.Mutex.Lock"); Names its sentinels.
	Recipe, Span string
	Names        telemetry.Names
}

// Held is a contender that holds: what the owner of its lease starts with.
type Held struct {
	Path  string
	Token int64 // our node's Czxid
	// Behind: a contender was behind ours in the last listing.
	Behind bool
	// Waited: we waited in line before we held (a contender ahead of us
	// went away).
	Waited bool
	// DirEv, when not nil, is the directory's child watch, set after our
	// node was created and not fired yet: it stands in for Own.
	DirEv <-chan zk.Event
	// Own is the getData watch on our node, when set.
	Own *znode.Watch
	// Reconnect is the session's NextReconnect taken before DirEv and Own
	// were set: once it is closed, they may have missed a change.
	Reconnect <-chan struct{}
	// Recipe is the Spec's, for the lease's telemetry.
	Recipe string
}

// Acquire joins the line and waits until the rule says we hold (wait), or
// only looks once (!wait: Busy if we would have to wait). On every error our
// node is deleted before Acquire returns (or, if the server cannot be
// reached, as soon as it can be while the session lives).
//
// The wait is timed and traced (Spec.Recipe, Spec.Span): every recipe on
// the engine reports its waits the same way.
func Acquire(ctx context.Context, s *session.Session, spec *Spec, wait bool) (h *Held, err error) {
	ctx, w := s.Telemetry().StartWait(ctx, spec.Span, spec.Recipe, spec.Names)
	defer func() {
		if err != nil && errors.Is(err, spec.Busy) {
			w.End(ctx, telemetry.Busy(err)) // an answer, not a failure
			return
		}
		w.End(ctx, err)
	}()
	e, err := Join(ctx, s, spec)
	if err != nil {
		return nil, err
	}
	if spec.Prepare != nil {
		if err := spec.Prepare(ctx, e); err != nil {
			e.Leave()
			return nil, err
		}
	}
	if h, err = e.Wait(ctx, wait); err != nil {
		e.Leave()
		return nil, err
	}
	return h, nil
}
