package zktest

import (
	"encoding/binary"
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// A request is counted before the server can have it: a test that sees the
// reply, or what the server did for it, then finds it counted. net.Pipe's
// Write returns only once the peer has read every byte, so the count is
// read while the request's last byte is still unread; it fails on a
// Counter that counts after the write.
func TestCounterCountsBeforeTheWrite(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	c := &Counter{}
	cc := &countedConn{Conn: client, c: c}

	handshake := binary.BigEndian.AppendUint32(nil, 4)
	handshake = append(handshake, 0, 0, 0, 0)
	request := binary.BigEndian.AppendUint32(nil, 8)
	request = binary.BigEndian.AppendUint32(request, 1)                // xid
	request = binary.BigEndian.AppendUint32(request, uint32(OpExists)) // opcode

	written := make(chan error, 1)
	go func() {
		_, err := cc.Write(append(handshake, request...))
		written <- err
	}()
	all := len(handshake) + len(request)
	_, err := io.ReadFull(server, make([]byte, all-1))
	require.NoError(t, err)
	require.Equal(t, int64(1), c.Requests(OpExists), "the request, its last byte not yet read")
	require.Equal(t, int64(1), c.Requests(), "the handshake is not counted")
	_, err = io.ReadFull(server, make([]byte, 1))
	require.NoError(t, err)
	require.NoError(t, <-written)
	require.Equal(t, int64(1), c.Requests(OpExists))
}
