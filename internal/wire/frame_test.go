package wire

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

func frame(body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// handshakeFrame is a connect response granting session sid a timeout of
// ms milliseconds.
func handshakeFrame(sid int64, ms int32) []byte {
	hs := binary.BigEndian.AppendUint32(nil, 0)         // protocol version
	hs = binary.BigEndian.AppendUint32(hs, uint32(ms))  // timeout
	hs = binary.BigEndian.AppendUint64(hs, uint64(sid)) // session id
	hs = binary.BigEndian.AppendUint32(hs, 16)          // password length
	return frame(append(hs, make([]byte, 16)...))       // password
}

// createdStream is what a server sends a new session (0x1234) that
// created path: the connect response, then the reply to the create (xid 7,
// zxid 0xfeed).
func createdStream(path string) []byte {
	rep := binary.BigEndian.AppendUint32(nil, 7)     // xid
	rep = binary.BigEndian.AppendUint64(rep, 0xfeed) // zxid
	rep = binary.BigEndian.AppendUint32(rep, 0)      // err
	rep = binary.BigEndian.AppendUint32(rep, uint32(len(path)))
	rep = append(rep, path...)
	return append(handshakeFrame(0x1234, 4000), frame(rep)...)
}

// The frame parser sees the stream in whatever pieces the network gives:
// here, every split of a handshake and a create reply.
func TestFrameParserAnyChunking(t *testing.T) {
	path := "/l/" + NodePrefix + "abc-lock-0000000001"
	stream := createdStream(path)

	for cut := 1; cut < len(stream); cut++ {
		tr := New(Config{})
		c := &watchedConn{t: tr, r: frameParser{replies: true}, p: newProof(),
			pending: []pending{{xid: 7, op: opCreate, fence: -1, prior: -1}}}
		require.NoError(t, c.r.feed(stream[:cut], c.reply))
		require.NoError(t, c.r.feed(stream[cut:], c.reply))
		require.Equal(t, int64(0x1234), tr.SessionID(), "cut %d", cut)
		require.Equal(t, int32(4000), tr.timeoutMs.Load(), "cut %d", cut)
		z, ok := tr.Created(path)
		require.True(t, ok, "cut %d", cut)
		require.Equal(t, int64(0xfeed), z, "cut %d", cut)
		_, ok = tr.Created(path)
		require.False(t, ok, "cut %d: claimed twice", cut)
	}
}

// A port that answers something other than ZooKeeper's protocol (an HTTP
// admin port) announces a frame go-zookeeper would allocate a gigabyte
// for: it is refused before the client reads it, with an error that says
// why.
func TestFrameParserRefusesImpossibleFrames(t *testing.T) {
	p := frameParser{replies: true}
	err := p.feed([]byte("HTTP/1.1 400 Bad Request\r\n"), func(bool, []byte) int { return 0 })
	require.ErrorContains(t, err, "not a ZooKeeper server")
	require.ErrorContains(t, err, `"HTTP"`)

	p = frameParser{replies: true}
	require.NoError(t, p.feed(handshakeFrame(1, 4000), func(bool, []byte) int { return 0 }))
	err = p.feed(binary.BigEndian.AppendUint32(nil, 1<<30), func(bool, []byte) int { return 0 })
	require.ErrorContains(t, err, "more than any reply")

	// Requests are the client's own: never refused.
	p = frameParser{}
	require.NoError(t, p.feed(binary.BigEndian.AppendUint32(nil, 1<<30), func(bool, []byte) int { return 0 }))
}
