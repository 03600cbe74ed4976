package wire

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// The frame parser sees the stream in whatever pieces the network gives:
// here, every split of a handshake and a create reply.
func TestFrameParserAnyChunking(t *testing.T) {
	frame := func(body []byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
	}
	hs := binary.BigEndian.AppendUint32(nil, 0)    // protocol version
	hs = binary.BigEndian.AppendUint32(hs, 4000)   // timeout
	hs = binary.BigEndian.AppendUint64(hs, 0x1234) // session id
	hs = binary.BigEndian.AppendUint32(hs, 16)     // password length
	hs = append(hs, make([]byte, 16)...)           // password
	path := "/l/" + NodePrefix + "abc-lock-0000000001"
	rep := binary.BigEndian.AppendUint32(nil, 7)     // xid
	rep = binary.BigEndian.AppendUint64(rep, 0xfeed) // zxid
	rep = binary.BigEndian.AppendUint32(rep, 0)      // err
	rep = binary.BigEndian.AppendUint32(rep, uint32(len(path)))
	rep = append(rep, path...)
	stream := append(frame(hs), frame(rep)...)

	for cut := 1; cut < len(stream); cut++ {
		tr := New(nil, 0)
		c := &watchedConn{t: tr, r: frameParser{replies: true}, creates: map[int32]struct{}{7: {}}, sent: []int64{1}}
		c.r.feed(stream[:cut], c.reply)
		c.r.feed(stream[cut:], c.reply)
		require.Equal(t, int64(0x1234), tr.SessionID(), "cut %d", cut)
		require.Equal(t, int32(4000), tr.timeoutMs.Load(), "cut %d", cut)
		z, ok := tr.Created(path)
		require.True(t, ok, "cut %d", cut)
		require.Equal(t, int64(0xfeed), z, "cut %d", cut)
		_, ok = tr.Created(path)
		require.False(t, ok, "cut %d: claimed twice", cut)
	}
}
