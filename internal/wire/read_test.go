package wire

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// chunkConn returns its chunks, one per Read, and then err.
type chunkConn struct {
	net.Conn
	chunks [][]byte
	err    error
	reads  int
}

func (c *chunkConn) Read(p []byte) (int, error) {
	c.reads++
	if len(c.chunks) == 0 {
		return 0, c.err
	}
	n := copy(p, c.chunks[0])
	c.chunks = c.chunks[1:]
	if len(c.chunks) == 0 {
		return n, c.err // the last data comes with the error, as a socket may give it
	}
	return n, nil
}

// Read takes from the socket everything that has come and hands it out in
// the small pieces go-zookeeper asks for (a length, then a body): the
// replies are read in order, the create's Czxid recorded, and the error
// that came with the last bytes handed over only after them.
func TestReadBuffersReplies(t *testing.T) {
	path := "/l/" + NodePrefix + "abc-lock-0000000001"
	stream := createdStream(path)
	cut := errors.New("connection reset")
	under := &chunkConn{chunks: [][]byte{stream}, err: cut}
	tr := New(Config{})
	c := &watchedConn{Conn: under, t: tr, r: frameParser{replies: true}, p: newProof(),
		pending: []pending{{xid: 7, op: opCreate, fence: -1, prior: -1}}}

	var got []byte
	for range 2 { // the handshake and the reply, each as go-zookeeper reads it
		head := make([]byte, 4)
		_, err := io.ReadFull(c, head)
		require.NoError(t, err)
		body := make([]byte, binary.BigEndian.Uint32(head))
		_, err = io.ReadFull(c, body)
		require.NoError(t, err)
		got = append(append(got, head...), body...)
	}
	require.Equal(t, stream, got)
	require.Equal(t, 1, under.reads, "all the replies came in one read of the socket")
	require.Equal(t, int64(0x1234), tr.sessionID.Load())
	z, ok := tr.Created(path)
	require.True(t, ok)
	require.Equal(t, int64(0xfeed), z)

	_, err := c.Read(make([]byte, 4))
	require.ErrorIs(t, err, cut, "the error, once the bytes before it were taken")
}
