package session

import (
	"sync"

	"github.com/go-zookeeper/zk"
)

// State is where a Session's connection stands; the root package exports
// it.
type State int

const (
	// Connected: the client has a connection that carries the session.
	Connected State = iota + 1
	// Suspended: the connection dropped; the session may live on.
	Suspended
	// Lost: the session is over (the Session's Err says why). Final.
	Lost
)

// StateChange is one change of State.
type StateChange struct {
	From, To State
	Err      error // with To == Lost, the Session's Err
}

// states follows the Session's connection from the client's session
// events, and tells of reconnects and of every change of State.
type states struct {
	mu    sync.Mutex
	first int64 // session id of the first connection to carry a session; 0 before it
	now   State // 0 until the first session
	final *StateChange
	next  chan struct{} // closed at the next reconnect, then replaced
	subs  []func(StateChange)
}

// NextReconnect returns a channel closed when the client next reconnects
// with the session: from then on a watch set before may have missed a
// change. go-zookeeper re-sets its watches on a new connection, but with
// the last zxid it read at that moment, which can be newer than the last
// change it saw (a reply to a request queued during the disconnect can
// advance it first), and the server then fires none of them for the
// changes made while it was away. Whoever waits on a watch takes this
// channel before the read that sets the watch, and reads again when it is
// closed, rather than trusting the re-set watch.
//
// It is not closed when the session ends: Done is.
func (s *Session) NextReconnect() <-chan struct{} {
	st := &s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.next == nil {
		st.next = make(chan struct{})
	}
	return st.next
}

// State is the connection's state now: Lost as soon as Err is set.
func (s *Session) State() State {
	if s.Err() != nil {
		return Lost
	}
	st := &s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.final != nil {
		return Lost
	}
	return st.now
}

// OnStateChange calls f with every change of State from now on, in order,
// the last one being the change to Lost; at once with that change if the
// session is over already. f runs on the client's event path, with the
// Session's state locked: it must not block, nor call the Session.
func (s *Session) OnStateChange(f func(StateChange)) {
	st := &s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.final != nil {
		f(*st.final)
		return
	}
	st.subs = append(st.subs, f)
}

// followState calls f with the State now and then with every change, in
// order, the last being Lost (see OnStateChange for what f may do).
func (s *Session) followState(f func(State)) {
	st := &s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.final != nil {
		f(Lost)
		return
	}
	f(st.now)
	st.subs = append(st.subs, func(c StateChange) { f(c.To) })
}

// telemetry is the state's name in the session count: "" once Lost (a
// lost session is counted no more).
func (st State) telemetry() string {
	switch st {
	case Connected:
		return "connected"
	case Suspended:
		return "suspended"
	}
	return ""
}

// established reports whether the first session has been recorded: Connect
// returns only then, so that State is Connected from the start.
func (st *states) established() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.now != 0
}

// event records a session event of the client: sid is the session id of
// the latest connect response.
func (st *states) event(state zk.State, sid int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.final != nil {
		return
	}
	switch state {
	case zk.StateHasSession:
		switch {
		case st.first == 0:
			st.first, st.now = sid, Connected
			return
		case sid != st.first:
			return // another session: the monitor ends this one
		}
		if st.next != nil {
			close(st.next)
			st.next = nil
		}
		st.set(Connected, nil)
	case zk.StateDisconnected:
		if st.now == Connected {
			st.set(Suspended, nil)
		}
	}
}

// end records the end of the session, the last change.
func (st *states) end(why error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.final == nil {
		st.set(Lost, why)
		st.subs = nil
	}
}

func (st *states) set(to State, why error) {
	if to == st.now {
		return
	}
	c := StateChange{From: st.now, To: to, Err: why}
	st.now = to
	if to == Lost {
		st.final = &c
	}
	for _, f := range st.subs {
		f(c)
	}
}
