package fairqueue_test

import (
	"encoding/binary"
	"net"
	"strings"
	"sync"
	"time"
)

// wire records the multis a client sends through its Dial (a zk.Dialer):
// the ops of each (type and path) and whether the server refused it. The
// server logs a refused multi as it does one applied: a claim that loses a
// race costs a write.
type wire struct {
	next   func(network, address string, timeout time.Duration) (net.Conn, error) // nil: net.DialTimeout
	mu     sync.Mutex
	multis []*sentMulti
}

type sentMulti struct {
	ops    []wireOp
	failed bool
	done   bool
}

type wireOp struct {
	op   int32
	path string
}

func (w *wire) Dial(network, address string, timeout time.Duration) (net.Conn, error) {
	dial := w.next
	if dial == nil {
		dial = net.DialTimeout
	}
	c, err := dial(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return &wireConn{Conn: c, w: w, pending: map[int32]*sentMulti{}}, nil
}

// count returns how many answered multis f accepts.
func (w *wire) count(f func(m *sentMulti) bool) int {
	return w.countSent(func(m *sentMulti) bool { return m.done && f(m) })
}

// countSent returns how many multis sent (answered or not) f accepts.
func (w *wire) countSent(f func(m *sentMulti) bool) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, m := range w.multis {
		if f(m) {
			n++
		}
	}
	return n
}

// has reports whether the multi has an op of type op whose path contains
// path.
func (m *sentMulti) has(op int32, path string) bool {
	for _, o := range m.ops {
		if o.op == op && strings.Contains(o.path, path) {
			return true
		}
	}
	return false
}

type wireConn struct {
	net.Conn
	w          *wire
	mu         sync.Mutex
	pending    map[int32]*sentMulti
	out, in    []byte
	sent, read bool // past the connect handshake
}

func (c *wireConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.out = append(c.out, p...)
	for len(c.out) >= 4 && len(c.out) >= 4+int(binary.BigEndian.Uint32(c.out)) {
		n := int(binary.BigEndian.Uint32(c.out))
		body := c.out[4 : 4+n]
		if c.sent && len(body) >= 8 && int32(binary.BigEndian.Uint32(body[4:])) == 14 {
			m := &sentMulti{ops: readMultiOps(body[8:])}
			c.pending[int32(binary.BigEndian.Uint32(body))] = m
			c.w.mu.Lock()
			c.w.multis = append(c.w.multis, m)
			c.w.mu.Unlock()
		}
		c.sent = true
		c.out = c.out[4+n:]
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *wireConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.in = append(c.in, p[:n]...)
	for len(c.in) >= 4 && len(c.in) >= 4+int(binary.BigEndian.Uint32(c.in)) {
		size := int(binary.BigEndian.Uint32(c.in))
		body := c.in[4 : 4+size]
		if c.read && len(body) >= 16 {
			if m := c.pending[int32(binary.BigEndian.Uint32(body))]; m != nil {
				delete(c.pending, int32(binary.BigEndian.Uint32(body)))
				// The reply header's error, or a failed multi's first result
				// (every op answered with an error result, type -1).
				failed := binary.BigEndian.Uint32(body[12:]) != 0 ||
					len(body) >= 20 && int32(binary.BigEndian.Uint32(body[16:])) == -1
				c.w.mu.Lock()
				m.failed, m.done = failed, true
				c.w.mu.Unlock()
			}
		}
		c.read = true
		c.in = c.in[4+size:]
	}
	c.mu.Unlock()
	return n, err
}

// readMultiOps reads a multi's ops: a header {type, done, err} each, then a
// body that starts with the path.
func readMultiOps(b []byte) []wireOp {
	var ops []wireOp
	for len(b) >= 9 {
		typ, done := int32(binary.BigEndian.Uint32(b)), b[4] != 0
		b = b[9:]
		if done || typ == -1 || len(b) < 4 {
			break
		}
		n := int(int32(binary.BigEndian.Uint32(b)))
		if n < 0 || len(b) < 4+n {
			break
		}
		ops = append(ops, wireOp{typ, string(b[4 : 4+n])})
		b = b[4+n:]
		switch typ {
		case 1, 19: // create: data, ACLs, flags
			if len(b) < 4 {
				return ops
			}
			d := int(int32(binary.BigEndian.Uint32(b)))
			b = b[4+max(d, 0):]
			if len(b) < 4 {
				return ops
			}
			acls := int(int32(binary.BigEndian.Uint32(b)))
			b = b[4:]
			for range max(acls, 0) {
				b = b[4:]     // perms
				for range 2 { // scheme, id
					l := int(int32(binary.BigEndian.Uint32(b)))
					b = b[4+max(l, 0):]
				}
			}
			b = b[4:] // flags
		case 5: // setData: data, version
			d := int(int32(binary.BigEndian.Uint32(b)))
			b = b[4+max(d, 0)+4:]
		case 2, 13: // delete, check: version
			b = b[4:]
		default:
			return ops
		}
	}
	return ops
}
