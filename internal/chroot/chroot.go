// Package chroot runs a client in a subtree of the server's tree, the way
// the Java client runs one given "host:port/app": every path in a request
// gets the root in front of it, and the root comes off every path in a
// reply and in a watch event. The client above (go-zookeeper, the wire
// watcher, the recipes, and whoever uses Session.Conn) sees the subtree as
// the whole tree, and nothing it sends reaches outside of it.
//
// It works on the bytes of the connection, beneath the wire watcher, which
// so sees the same frames the client does: consistent lengths, xids,
// opcodes and errors, and the client's paths. The server's root node must
// exist, as with the Java client: until it does, every request fails with
// NoNode.
package chroot

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Dialer is go-zookeeper's zk.Dialer.
type Dialer = func(network, address string, timeout time.Duration) (net.Conn, error)

// Dial wraps d so that every connection it makes runs in root, an absolute
// path other than "/" that the caller has checked.
func Dial(root string, d Dialer) Dialer {
	r := rooted(root)
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := d(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return &conn{Conn: c, root: r, expect: make(map[int32]int32)}, nil
	}
}

// maxRewrite bounds the replies this layer reads whole to rewrite: the
// wire watcher refuses longer ones (no server sends them), which it can
// only do if they come through unread.
const maxRewrite = 256 << 20

// conn is one connection in root. go-zookeeper writes from one goroutine
// at a time and reads from another.
type conn struct {
	net.Conn
	root rooted

	wmu     sync.Mutex
	wbuf    []byte // an incomplete request frame
	wframes int

	emu    sync.Mutex
	expect map[int32]int32 // xid -> opcode, of requests whose reply holds a path

	rmu     sync.Mutex
	rframes int
	out     []byte // reply bytes ready for the client
	pass    int    // bytes of the current reply frame that go through unread
}

// Write rewrites the paths of the client's requests. It takes whole frames
// (an incomplete one waits for the rest), and sends a request it cannot
// rewrite nowhere: that one fails, rather than reaching outside the root.
func (c *conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf = append(c.wbuf, p...)
	var out []byte
	for len(c.wbuf) >= 4 {
		n := int(binary.BigEndian.Uint32(c.wbuf))
		if len(c.wbuf) < 4+n {
			break
		}
		frame := c.wbuf[:4+n]
		if c.wframes == 0 {
			out = append(out, frame...) // the connect request: no path
		} else {
			body, err := c.root.request(frame[4:])
			if err != nil {
				c.wbuf = nil
				return 0, err
			}
			if xid, op := header(body); replyHasPath(op) {
				c.emu.Lock()
				c.expect[xid] = op
				c.emu.Unlock()
			}
			out = binary.BigEndian.AppendUint32(out, uint32(len(body)))
			out = append(out, body...)
		}
		c.wframes++
		c.wbuf = c.wbuf[4+n:]
	}
	if len(c.wbuf) == 0 {
		c.wbuf = nil
	}
	if len(out) > 0 {
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Read hands the server's replies on, with the root taken off the paths in
// watch events and in the replies to creates, syncs and multis. Every other
// frame goes through as it comes.
func (c *conn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if len(p) == 0 {
		return 0, nil
	}
	for len(c.out) == 0 && c.pass == 0 {
		if err := c.next(); err != nil {
			return 0, err
		}
	}
	if len(c.out) > 0 {
		n := copy(p, c.out)
		c.out = c.out[n:]
		return n, nil
	}
	n, err := c.Conn.Read(p[:min(len(p), c.pass)])
	c.pass -= n
	return n, err
}

// next reads the start of the next reply frame, and the whole frame when it
// holds a path.
func (c *conn) next() error {
	var head [4 + replyHeader]byte
	if _, err := io.ReadFull(c.Conn, head[:4]); err != nil {
		return err
	}
	n := int(binary.BigEndian.Uint32(head[:4]))
	first := c.rframes == 0
	c.rframes++
	if first || n < replyHeader || n > maxRewrite {
		// The connect response, or a frame the wire watcher refuses.
		c.out, c.pass = append(c.out[:0], head[:4]...), n
		return nil
	}
	if _, err := io.ReadFull(c.Conn, head[4:]); err != nil {
		return err
	}
	xid := int32(binary.BigEndian.Uint32(head[4:]))
	op, ok := int32(opWatchEvent), xid == xidWatchEvent
	if !ok {
		c.emu.Lock()
		op, ok = c.expect[xid]
		delete(c.expect, xid)
		c.emu.Unlock()
	}
	if !ok || n == replyHeader {
		c.out, c.pass = append(c.out[:0], head[:]...), n-replyHeader
		return nil
	}
	body := make([]byte, n-replyHeader)
	if _, err := io.ReadFull(c.Conn, body); err != nil {
		return err
	}
	body = c.root.reply(op, body)
	c.out = binary.BigEndian.AppendUint32(c.out[:0], uint32(replyHeader+len(body)))
	c.out = append(c.out, head[4:]...)
	c.out = append(c.out, body...)
	return nil
}

// header reads a request body's xid and opcode.
func header(body []byte) (xid, op int32) {
	if len(body) < 8 {
		return 0, 0
	}
	return int32(binary.BigEndian.Uint32(body)), int32(binary.BigEndian.Uint32(body[4:]))
}

// errRequest is a request this layer cannot rewrite.
func errRequest(op int32, why string) error {
	return fmt.Errorf("chroot: request of opcode %d not sent: %s", op, why)
}
