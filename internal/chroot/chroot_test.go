package chroot

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// pipeConn is the server's end as bytes: what the client wrote, and what
// the server answers.
type pipeConn struct {
	net.Conn
	sent    bytes.Buffer
	replies *bytes.Reader
}

func (p *pipeConn) Write(b []byte) (int, error) { return p.sent.Write(b) }
func (p *pipeConn) Read(b []byte) (int, error)  { return p.replies.Read(b) }

func frame(parts ...[]byte) []byte {
	body := bytes.Join(parts, nil)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

func i32(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }
func i64(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }
func str(s string) []byte {
	return appendString(nil, []byte(s))
}
func multiHead(typ int32, done bool) []byte {
	d := byte(0)
	if done {
		d = 1
	}
	return append(append(i32(typ), d), i32(-1)...)
}

var stat = make([]byte, statLen)

// The requests of a session, as the client writes them and as the server
// must get them under the root "/app".
func requests() (client, server []byte) {
	acl := bytes.Join([][]byte{i32(1), i32(31), str("world"), str("anyone")}, nil)
	connect := frame(make([]byte, 44))
	pairs := [][2][]byte{
		{connect, connect},
		{frame(i32(1), i32(opCreate), str("/a/b"), str("data"), acl, i32(2)),
			frame(i32(1), i32(opCreate), str("/app/a/b"), str("data"), acl, i32(2))},
		{frame(i32(2), i32(opExists), str("/"), []byte{1}),
			frame(i32(2), i32(opExists), str("/app"), []byte{1})},
		{frame(i32(3), i32(opMulti),
			multiHead(opCreateTTL, false), str("/t"), str(""), acl, i32(5), i64(1000),
			multiHead(opSetData, false), str("/s"), str("d"), i32(-1),
			multiHead(opCheck, false), str("/c"), i32(3),
			multiHead(opDelete, false), str("/d"), i32(0),
			multiHead(-1, true)),
			frame(i32(3), i32(opMulti),
				multiHead(opCreateTTL, false), str("/app/t"), str(""), acl, i32(5), i64(1000),
				multiHead(opSetData, false), str("/app/s"), str("d"), i32(-1),
				multiHead(opCheck, false), str("/app/c"), i32(3),
				multiHead(opDelete, false), str("/app/d"), i32(0),
				multiHead(-1, true))},
		{frame(i32(4), i32(opSetWatches), i64(77), i32(1), str("/x"), i32(0), i32(2), str("/"), str("/y/z")),
			frame(i32(4), i32(opSetWatches), i64(77), i32(1), str("/app/x"), i32(0), i32(2), str("/app"), str("/app/y/z"))},
		{frame(i32(-2), i32(opPing)), frame(i32(-2), i32(opPing))},
		{frame(i32(5), i32(opSync), str("/q")), frame(i32(5), i32(opSync), str("/app/q"))},
	}
	for _, p := range pairs {
		client, server = append(client, p[0]...), append(server, p[1]...)
	}
	return client, server
}

// Requests are rooted however the client's writes split them.
func TestRequestsRootedAnyChunking(t *testing.T) {
	client, want := requests()
	for _, size := range []int{1, 3, 7, 64, len(client)} {
		pc := &pipeConn{}
		c := &conn{Conn: pc, root: "/app", expect: map[int32]int32{}}
		for b := client; len(b) > 0; {
			n := min(size, len(b))
			k, err := c.Write(b[:n])
			require.NoError(t, err)
			require.Equal(t, n, k)
			b = b[n:]
		}
		require.Equal(t, want, pc.sent.Bytes(), "writes of %d bytes", size)
		require.Equal(t, map[int32]int32{1: opCreate, 3: opMulti, 5: opSync}, c.expect)
	}
}

// A request this layer cannot read is not sent: rather no request than one
// outside the root.
func TestUnknownRequestRefused(t *testing.T) {
	pc := &pipeConn{}
	c := &conn{Conn: pc, root: "/app", expect: map[int32]int32{}, wframes: 1}
	_, err := c.Write(frame(i32(1), i32(999), str("/x")))
	require.ErrorContains(t, err, "opcode 999")
	_, err = c.Write(frame(i32(2), i32(opMulti), multiHead(99, false), str("/x"), i32(0), multiHead(-1, true)))
	require.ErrorContains(t, err, "multi")
	require.Zero(t, pc.sent.Len())
}

// Replies lose the root from their paths, however the client's reads
// split them; replies without paths go through as they are.
func TestRepliesUnrootedAnyChunking(t *testing.T) {
	hdr := func(xid int32, errc int32) []byte { return bytes.Join([][]byte{i32(xid), i64(9), i32(errc)}, nil) }
	handshake := frame(make([]byte, 36))
	pairs := [][2][]byte{
		{handshake, handshake},
		{frame(hdr(1, 0), str("/app/a/b0000000001")), frame(hdr(1, 0), str("/a/b0000000001"))},
		{frame(hdr(2, 0), i32(1), stat), frame(hdr(2, 0), i32(1), stat)}, // exists: no path
		{frame(hdr(-1, 0), i32(3), i32(3), str("/app/x")), frame(hdr(-1, 0), i32(3), i32(3), str("/x"))},
		{frame(hdr(-1, 0), i32(4), i32(3), str("/app")), frame(hdr(-1, 0), i32(4), i32(3), str("/"))},
		{frame(hdr(-1, 0), i32(-1), i32(3), str("")), frame(hdr(-1, 0), i32(-1), i32(3), str(""))},
		{frame(hdr(3, 0),
			multiHead(opCreate2, false), str("/app/t"), stat,
			multiHead(opSetData, false), stat,
			multiHead(opCheck, false),
			multiHead(opError, false), i32(-101),
			multiHead(opCreate, false), str("/app/u"),
			multiHead(-1, true)),
			frame(hdr(3, 0),
				multiHead(opCreate2, false), str("/t"), stat,
				multiHead(opSetData, false), stat,
				multiHead(opCheck, false),
				multiHead(opError, false), i32(-101),
				multiHead(opCreate, false), str("/u"),
				multiHead(-1, true))},
		{frame(hdr(5, -101)), frame(hdr(5, -101))},
		{frame(hdr(6, 0), str("/app/zz")), frame(hdr(6, 0), str("/app/zz"))}, // not a request that was rooted
	}
	var server, want []byte
	for _, p := range pairs {
		server, want = append(server, p[0]...), append(want, p[1]...)
	}
	for _, size := range []int{1, 3, 16, 4096} {
		c := &conn{Conn: &pipeConn{replies: bytes.NewReader(server)}, root: "/app",
			expect: map[int32]int32{1: opCreate, 3: opMulti, 5: opSync}}
		var got []byte
		buf := make([]byte, size)
		for {
			n, err := c.Read(buf)
			got = append(got, buf[:n]...)
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
		}
		require.Equal(t, want, got, "reads of %d bytes", size)
		require.Empty(t, c.expect, "every reply taken")
	}
}
