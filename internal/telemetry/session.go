package telemetry

import "context"

// SessionState counts the session as being in state from now on:
// "connected", "suspended", or "" once it is over (counted no more). The
// count of its former state goes down by one, with the attributes it went
// up with.
func (t *T) SessionState(state string) {
	if t == nil {
		return
	}
	t.stateMu.Lock()
	defer t.stateMu.Unlock()
	if state == t.state || t.over {
		return
	}
	ctx := context.Background()
	if t.state != "" {
		t.sessions.Add(ctx, -1, t.attrs(keyState.String(t.state)))
	}
	if state != "" {
		t.sessions.Add(ctx, 1, t.attrs(keyState.String(state)))
	}
	t.state = state
}

// SessionEnded records the session's end, reason expired, lost or closed:
// it is counted no more as live, its end is counted, and the queues it
// observed are observed no more.
func (t *T) SessionEnded(reason string) {
	if t == nil {
		return
	}
	t.SessionState("")
	t.stateMu.Lock()
	t.over = true
	t.stateMu.Unlock()
	t.sessionEnded.Add(context.Background(), 1, t.attrs(keyReason.String(reason)))
	t.pending.close()
}

// Reconnected counts a session that ended and that Supervise replaced
// with a new one.
func (t *T) Reconnected() {
	if t != nil {
		t.sessionReplaced.Add(context.Background(), 1)
	}
}
