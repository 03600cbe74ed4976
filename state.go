package zkrecipes

import "github.com/zkrecipes/zkrecipes/internal/session"

// State is where a Session's connection stands, as Curator's and kazoo's
// users know it.
type State int

const (
	// Connected: the client has a connection that carries the session.
	Connected State = iota + 1
	// Suspended: the connection dropped and the client is reconnecting.
	// The session may live on, and with it every lease made on it, or it
	// may be over: that is known only when the client reconnects
	// (Connected) or the Session gives the session up (Lost), which it
	// does before the ensemble can expire it. Work that must not run
	// without the ensemble should pause meanwhile.
	Suspended
	// Lost: the session is over, for good; Err says why. Final.
	Lost
)

func (st State) String() string {
	switch st {
	case Connected:
		return "Connected"
	case Suspended:
		return "Suspended"
	case Lost:
		return "Lost"
	}
	return "State(?)"
}

// StateChange is one change of a Session's State.
type StateChange struct {
	From, To State
	// Err is, when To is Lost, why the session is over: the Session's Err.
	Err error
}

// Reconnected reports whether the change is Suspended -> Connected: the
// client reconnected, and the session lived through the disconnect.
func (c StateChange) Reconnected() bool { return c.From == Suspended && c.To == Connected }

// stateChangesBuffer is the room of a StateChanges channel.
const stateChangesBuffer = 16

// State is the state of the Session's connection now. It is Lost once Err
// is set.
func (s *Session) State() State { return stateOf(s.inner().State()) }

// stateOf is the plumbing's state as the package exports it.
func stateOf(st session.State) State {
	switch st {
	case session.Connected:
		return Connected
	case session.Suspended:
		return Suspended
	}
	return Lost
}

// StateChanges returns a channel that receives the changes of the
// Session's State from now on, in order, and is closed after the change to
// Lost, which is the last. On a Session that is over, it holds that change
// and is closed.
//
// The channel is buffered, and nothing waits for its reader. A reader that
// falls further behind than the buffer misses the oldest changes it has
// not read, never the newest: the last change it receives is the latest,
// and the change to Lost always reaches it, even if it reads nothing until
// the session is over.
//
// Each call returns a channel of its own, which the Session keeps until
// the session is over: call it once per reader. To start from the current
// state without missing a change, call StateChanges, then State.
func (s *Session) StateChanges() <-chan StateChange {
	ch := make(chan StateChange, stateChangesBuffer)
	s.inner().OnStateChange(func(c session.StateChange) {
		offerChange(ch, StateChange{From: stateOf(c.From), To: stateOf(c.To), Err: c.Err})
		if c.To == session.Lost {
			close(ch)
		}
	})
	return ch
}

// offerChange puts c in ch, dropping the oldest change not read yet when
// ch is full. The Session sends the changes one at a time, so once one is
// dropped there is room.
func offerChange(ch chan StateChange, c StateChange) {
	select {
	case ch <- c:
		return
	default:
	}
	select {
	case <-ch:
	default:
	}
	ch <- c
}
