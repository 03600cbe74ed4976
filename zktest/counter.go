package zktest

import (
	"encoding/binary"
	"net"
	"strings"
	"sync"
	"time"
)

// More opcodes, for [Counter.Requests].
const (
	OpSync int32 = 9
	OpPing int32 = 11
)

// Counter is a dialer for zkrecipes.WithDialer (or zk.WithDialer) that
// counts, on every connection it makes, the requests the client writes, by
// opcode, and the watch notifications the servers send: what a recipe
// costs, read on the wire rather than inferred. The connect handshake is
// not counted. Its zero value is ready to use, and it is safe for
// concurrent use.
type Counter struct {
	// Path, when set, limits the count to the requests whose path (or,
	// for a multi, one of whose operations' paths) contains it: a
	// recipe's own, apart from what the session sends on its own.
	Path string

	mu     sync.Mutex
	ops    map[int32]int64
	events []string // the path of each notification, in order
}

// Dial has the signature of zk.Dialer.
func (c *Counter) Dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	conn, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: conn, c: c}, nil
}

// Requests is how many requests with one of ops were written so far
// (counted as the client hands them to the connection); with
// no ops, every request but pings (which the client sends on its own
// while idle) and the re-sent watches and auth of a reconnect.
func (c *Counter) Requests(ops ...int32) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	if len(ops) == 0 {
		for op, k := range c.ops {
			if op != OpPing && op != opSetWatches && op != opAuth {
				n += k
			}
		}
		return n
	}
	for _, op := range ops {
		n += c.ops[op]
	}
	return n
}

// ByOp is a copy of the requests written so far, by opcode.
func (c *Counter) ByOp() map[int32]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[int32]int64, len(c.ops))
	for op, k := range c.ops {
		m[op] = k
	}
	return m
}

// Notifications is how many watch notifications the servers sent so far.
func (c *Counter) Notifications() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(len(c.events))
}

// NotificationsOn is how many of them were about the node at path.
func (c *Counter) NotificationsOn(path string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, p := range c.events {
		if p == path {
			n++
		}
	}
	return n
}

// onPath reports whether r's path, or the path of one of its multi's
// operations, contains p.
func onPath(r request, p string) bool {
	if r.hasPath && strings.Contains(r.path, p) {
		return true
	}
	for _, sub := range r.ops {
		if strings.Contains(sub.path, p) {
			return true
		}
	}
	return false
}

// opAuth is the opcode of addAuth.
const opAuth int32 = 100

// countedConn splits both directions into frames: a 4-byte length, then a
// body whose first bytes are, after the handshake, a request's xid and
// opcode, or a reply's xid (-1 for a notification).
type countedConn struct {
	net.Conn
	c    *Counter
	w, r frameSplit
}

// Write counts the requests in p before it writes them: a request counted
// after its write could still be uncounted when its reply, or what the
// server did for it, is seen (a test that reads the count then would miss
// it). A write that fails part way counts its requests all the same; its
// connection is done.
func (cc *countedConn) Write(p []byte) (int, error) {
	if cc.c.Path != "" {
		cc.w.keep = maxKeep
	}
	cc.w.feed(p, func(first bool, head []byte) {
		if !first && len(head) >= 8 {
			if cc.c.Path != "" && !onPath(parseRequest(head), cc.c.Path) {
				return
			}
			op := int32(binary.BigEndian.Uint32(head[4:]))
			cc.c.mu.Lock()
			if cc.c.ops == nil {
				cc.c.ops = map[int32]int64{}
			}
			cc.c.ops[op]++
			cc.c.mu.Unlock()
		}
	})
	return cc.Conn.Write(p)
}

func (cc *countedConn) Read(p []byte) (int, error) {
	n, err := cc.Conn.Read(p)
	cc.r.keep = maxKeep
	cc.r.feed(p[:n], func(first bool, head []byte) {
		if !first && len(head) >= 4 && int32(binary.BigEndian.Uint32(head)) == xidWatchEvent {
			// Reply header (xid, zxid, err), then the event: type, state,
			// path.
			path := ""
			if len(head) >= 24 {
				path, _, _ = readString(head[24:])
			}
			cc.c.mu.Lock()
			cc.c.events = append(cc.c.events, path)
			cc.c.mu.Unlock()
		}
	})
	return n, err
}

// frameSplit hands on the first bytes of each frame's body (8, or keep
// when set; fewer when the body is shorter), once the frame is whole;
// first marks the handshake. One direction of one connection, fed in
// order.
type frameSplit struct {
	keep   int
	frames int
	lenBuf [4]byte
	lenN   int
	left   int // body bytes still to come
	head   []byte
}

// maxKeep is what a Counter with a Path reads of a request: enough for the
// paths of a recipe's multi.
const maxKeep = 4096

func (f *frameSplit) feed(p []byte, on func(first bool, head []byte)) {
	for len(p) > 0 {
		if f.lenN < 4 {
			k := copy(f.lenBuf[f.lenN:], p)
			f.lenN += k
			p = p[k:]
			if f.lenN < 4 {
				return
			}
			f.left = int(binary.BigEndian.Uint32(f.lenBuf[:]))
			f.head = f.head[:0]
		} else {
			k := min(len(p), f.left)
			if room := max(f.keep, 8) - len(f.head); room > 0 {
				f.head = append(f.head, p[:min(k, room)]...)
			}
			p, f.left = p[k:], f.left-k
		}
		if f.left == 0 {
			on(f.frames == 0, f.head)
			f.frames++
			f.lenN = 0
		}
	}
}
