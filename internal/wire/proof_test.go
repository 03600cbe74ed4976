package wire

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// wireClock drives a watched connection by hand: requests and replies as
// bytes, on a clock the test moves.
type wireClock struct {
	t   *testing.T
	tr  *Transport
	c   *watchedConn
	now time.Duration
	xid int32
}

const testTick = 500 * time.Millisecond

func newWireClock(t *testing.T) *wireClock {
	w := &wireClock{t: t}
	w.tr = New(Config{Tick: testTick})
	w.tr.now = func() int64 { return int64(w.now) }
	w.c = &watchedConn{t: w.tr, r: frameParser{replies: true}, p: newProof()}
	w.c.modeAt.Store(-1)
	// Connect, then the session's first connect response: a new session,
	// proved at the connect request's send time.
	w.c.sending(frame(make([]byte, 44)), int64(w.now))
	w.advance(time.Millisecond)
	require.NoError(t, w.c.received(handshakeFrame(0x42, 2000)))
	return w
}

func (w *wireClock) advance(d time.Duration) { w.now += d }

// send writes a request of op and returns its xid and send time.
func (w *wireClock) send(op int32) (int32, time.Duration) {
	w.xid++
	b := binary.BigEndian.AppendUint32(nil, uint32(w.xid))
	b = binary.BigEndian.AppendUint32(b, uint32(op))
	w.c.sending(frame(append(b, 0, 0, 0, 0)), int64(w.now))
	return w.xid, w.now
}

// reply answers xid with code; for a multi, first is its first result's
// (type, code).
func (w *wireClock) reply(xid, code int32, first ...int32) {
	b := binary.BigEndian.AppendUint32(nil, uint32(xid))
	b = binary.BigEndian.AppendUint64(b, 99)
	b = binary.BigEndian.AppendUint32(b, uint32(code))
	if len(first) == 2 {
		typ, c := first[0], first[1]
		b = binary.BigEndian.AppendUint32(b, uint32(typ))
		b = append(b, 0)
		b = binary.BigEndian.AppendUint32(b, uint32(c))
		if typ == opError {
			b = binary.BigEndian.AppendUint32(b, uint32(c))
		}
	}
	require.NoError(w.t, w.c.received(frame(b)))
}

// call sends a request of op and answers it rtt later with code.
func (w *wireClock) call(op, code int32, first ...int32) time.Duration {
	xid, at := w.send(op)
	w.advance(time.Millisecond)
	w.reply(xid, code, first...)
	return at
}

func (w *wireClock) proof() time.Duration { return time.Duration(w.tr.proof.Load()) }

const (
	opExists = 3
	opPing   = 11
	opCheck  = 13
)

// The chain: j1, j2 answered; a sync sent one window after j2's reply; a
// write sent after the sync's reply and prepared with the session live.
// It proves j1's send time, not before the write's reply.
func TestProofNeedsTheChain(t *testing.T) {
	w := newWireClock(t)
	start := w.proof()
	require.Equal(t, time.Duration(0), start, "a new session is proved at its connect request")

	w.advance(time.Second)
	j1 := w.call(opExists, 0)
	w.call(opExists, 0)
	w.advance(Window(testTick))
	w.call(opSync, 0)
	require.Equal(t, start, w.proof(), "no proof before the write")
	w.call(opMulti, 0, opCheck, 0)
	require.Equal(t, j1, w.proof())
}

// What a follower cut off from the leader goes on answering proves
// nothing: pings, reads, and a sync or a write never answered.
func TestProofIgnoresAFollowersOwnAnswers(t *testing.T) {
	w := newWireClock(t)
	start := w.proof()
	for range 20 {
		w.advance(300 * time.Millisecond)
		w.call(opPing, 0)
		w.call(opExists, 0)
	}
	w.send(opSync) // forwarded to a leader that never hears it
	w.advance(Window(testTick))
	w.send(opMulti)
	require.Equal(t, start, w.proof())
	require.Equal(t, w.now, w.tr.Unproven(), "unproven since the connect")
}

func TestProofRules(t *testing.T) {
	for _, tc := range []struct {
		name  string
		chain func(w *wireClock) (want time.Duration)
	}{
		{"sync inside the window proves nothing", func(w *wireClock) time.Duration {
			w.call(opExists, 0)
			w.call(opExists, 0)
			w.advance(Window(testTick) - 2*time.Millisecond)
			w.call(opSync, 0)
			w.call(opMulti, 0, opCheck, 0)
			return 0
		}},
		{"a write sent before the sync's reply proves nothing", func(w *wireClock) time.Duration {
			w.call(opExists, 0)
			w.call(opExists, 0)
			w.advance(Window(testTick))
			sync, _ := w.send(opSync)
			multi, _ := w.send(opMulti)
			w.reply(sync, 0)
			w.reply(multi, 0, opCheck, 0)
			return 0
		}},
		{"a write refused for the session proves nothing", func(w *wireClock) time.Duration {
			w.call(opExists, 0)
			w.call(opExists, 0)
			w.advance(Window(testTick))
			w.call(opSync, 0)
			w.call(opSetData, -112) // session expired
			w.call(opMulti, 0, opError, -112)
			return 0
		}},
		{"a failed write the leader checked the session for proves", func(w *wireClock) time.Duration {
			j1 := w.call(opExists, 0)
			w.call(opExists, 0)
			w.advance(Window(testTick))
			w.call(opSync, 0)
			w.call(opCreate, -110) // node exists
			return j1
		}},
		{"a multi failing after its first op proves", func(w *wireClock) time.Duration {
			j1 := w.call(opExists, 0)
			w.call(opExists, 0)
			w.advance(Window(testTick))
			w.call(opMulti, 0, opError, 0) // a write fences as a sync does
			w.call(opMulti, 0, opError, 0)
			return j1
		}},
		{"an empty multi proves nothing", func(w *wireClock) time.Duration {
			w.call(opExists, 0)
			w.call(opExists, 0)
			w.advance(Window(testTick))
			w.call(opSync, 0)
			xid, _ := w.send(opMulti)
			b := binary.BigEndian.AppendUint32(nil, uint32(xid))
			b = binary.BigEndian.AppendUint64(b, 99)
			b = binary.BigEndian.AppendUint32(b, 0)
			typ := int32(opError)
			b = binary.BigEndian.AppendUint32(b, uint32(typ))
			b = append(b, 1) // done
			b = binary.BigEndian.AppendUint32(b, ^uint32(0))
			require.NoError(w.t, w.c.received(frame(b)))
			return 0
		}},
		{"the lone first request is not credited", func(w *wireClock) time.Duration {
			w.c.p.spans = nil // a new connection
			w.call(opExists, 0)
			w.advance(Window(testTick))
			w.call(opSync, 0)
			w.call(opMulti, 0, opCheck, 0)
			return 0
		}},
		{"a standalone server: any reply after its answer proves", func(w *wireClock) time.Duration {
			w.call(opPing, 0) // before the probe's answer: nothing
			w.c.modeAt.Store(int64(w.now))
			w.c.mode.Store(int32(ModeStandalone))
			w.advance(time.Millisecond)
			return w.call(opPing, 0)
		}},
		{"a leader: its reads prove nothing", func(w *wireClock) time.Duration {
			w.c.modeAt.Store(int64(w.now))
			w.c.mode.Store(int32(ModeLeader))
			w.advance(time.Millisecond)
			w.call(opExists, 0)
			w.call(opPing, 0)
			return 0
		}},
		{"a leader: a write it committed proves its send time", func(w *wireClock) time.Duration {
			w.c.modeAt.Store(int64(w.now))
			w.c.mode.Store(int32(ModeLeader))
			w.advance(time.Millisecond)
			w.call(opExists, 0)
			return w.call(opMulti, 0, opCheck, 0)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWireClock(t)
			w.advance(time.Second)
			require.Equal(t, tc.chain(w), w.proof())
		})
	}
}

// A reconnect proves nothing by itself, and a connect response naming
// another session stops the transport.
func TestProofReconnect(t *testing.T) {
	w := newWireClock(t)
	reconnect := func(sid int64) {
		w.advance(time.Second)
		c := &watchedConn{t: w.tr, r: frameParser{replies: true}, p: newProof()}
		c.modeAt.Store(-1)
		c.sending(frame(make([]byte, 44)), int64(w.now))
		require.NoError(t, c.received(handshakeFrame(sid, 2000)))
	}
	reconnect(0x42)
	require.Equal(t, time.Duration(0), w.proof())
	require.False(t, w.tr.moved.Load())
	reconnect(0x43)
	require.True(t, w.tr.moved.Load())
}

// A window found with a tickTime assumed too short (the server's answer
// came later and says longer) fences nothing.
func TestProofWindowMustStillHold(t *testing.T) {
	w := newWireClock(t)
	w.advance(time.Second)
	w.call(opExists, 0)
	w.call(opExists, 0)
	w.advance(Window(testTick))
	sync, _ := w.send(opSync)
	w.tr.tick.Store(int64(4 * testTick)) // the probe says: a longer tick
	w.advance(time.Millisecond)
	w.reply(sync, 0)
	w.call(opMulti, 0, opCheck, 0)
	require.Equal(t, time.Duration(0), w.proof())
}

// A busy connection keeps a few hundred answered requests per window, and
// its chains still credit a contact about one window old.
func TestProofBusyConnectionKeepsFewSpans(t *testing.T) {
	w := newWireClock(t)
	win := Window(testTick)
	for range 20000 {
		w.advance(100 * time.Microsecond)
		w.call(opExists, 0)
	}
	require.LessOrEqual(t, len(w.c.p.spans), 2*SpanGap+3)
	w.call(opSync, 0)
	at := w.now
	w.call(opMulti, 0, opCheck, 0)
	require.Greater(t, w.proof(), at-win-10*time.Millisecond, "the contact credited is about a window old")
}
