package queue

import (
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Requests counts the requests that consumers send through its Dial (a
// zk.Dialer): reads and writes, and among the writes those the server
// refused (a multi or a write whose reply says it failed: a lost race, a
// version that moved on, a node gone). The server logs a refused write as
// it does one that lands (a proposal, a log append, a commit), so a
// refused write costs the server as much as any other.
//
// It reads the client's side of the protocol only: request frames for the
// opcode, reply frames for the xid, the error and a multi's first result.
type Requests struct {
	refused, reads, writes atomic.Int64
}

// Counts are the requests a Requests counted.
type Counts struct {
	Reads, Writes int64 // every request but pings and watches re-set; a multi is one write
	Refused       int64 // the writes the server refused
}

// Counts returns what was counted so far.
func (c *Requests) Counts() Counts {
	return Counts{Reads: c.reads.Load(), Writes: c.writes.Load(), Refused: c.refused.Load()}
}

func (a Counts) minus(b Counts) Counts {
	return Counts{Reads: a.Reads - b.Reads, Writes: a.Writes - b.Writes, Refused: a.Refused - b.Refused}
}

// DialProducer connects a producer: nothing it sends is counted (the
// producers of the implementations differ in how they batch, which the
// items/s say; the counts are of what consuming costs).
func (c *Requests) DialProducer(network, address string, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout(network, address, timeout)
}

// Dial connects as net.DialTimeout does, through a counting conn.
func (c *Requests) Dial(network, address string, timeout time.Duration) (net.Conn, error) {
	conn, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return &countConn{Conn: conn, c: c, pending: map[int32]bool{}}, nil
}

// The reads and the writes among ZooKeeper's opcodes.
var (
	readOps  = map[int32]bool{3: true, 4: true, 8: true, 9: true, 12: true} // exists, getData, getChildren, sync, getChildren2
	writeOps = map[int32]bool{1: true, 2: true, 5: true, 13: true, 14: true, 15: true, 19: true, 20: true}
)

// countConn follows one connection's frames both ways.
type countConn struct {
	net.Conn
	c *Requests

	mu      sync.Mutex
	pending map[int32]bool // xids of writes sent and not answered
	out, in frames
}

func (cc *countConn) Write(p []byte) (int, error) {
	cc.mu.Lock()
	cc.out.feed(p, 1<<20, func(first bool, body []byte) {
		if first || len(body) < 8 {
			return // the connect request
		}
		xid := int32(binary.BigEndian.Uint32(body))
		op := int32(binary.BigEndian.Uint32(body[4:]))
		switch {
		case readOps[op]:
			cc.c.reads.Add(1)
		case writeOps[op]:
			cc.c.writes.Add(1)
			cc.pending[xid] = true
		}
	})
	cc.mu.Unlock()
	return cc.Conn.Write(p)
}

func (cc *countConn) Read(p []byte) (int, error) {
	n, err := cc.Conn.Read(p)
	cc.mu.Lock()
	cc.in.feed(p[:n], 16+4, func(first bool, head []byte) {
		if first || len(head) < 16 {
			return // the connect response
		}
		xid := int32(binary.BigEndian.Uint32(head))
		if !cc.pending[xid] {
			return
		}
		delete(cc.pending, xid)
		// The reply header's error, or the first result of the multi: a
		// failed multi answers every op with an error result (type -1).
		if binary.BigEndian.Uint32(head[12:]) != 0 || len(head) >= 20 && int32(binary.BigEndian.Uint32(head[16:])) == -1 {
			cc.c.refused.Add(1)
		}
	})
	cc.mu.Unlock()
	return n, err
}

// frames splits a byte stream into frames (a 4-byte length, then the
// body) and hands on the first bytes of each body, up to keep.
type frames struct {
	n      int
	lenBuf [4]byte
	lenN   int
	left   int // body bytes still to come
	head   []byte
}

func (f *frames) feed(p []byte, keep int, on func(first bool, head []byte)) {
	for len(p) > 0 {
		if f.left == 0 {
			k := copy(f.lenBuf[f.lenN:], p)
			f.lenN += k
			p = p[k:]
			if f.lenN < 4 {
				return
			}
			f.lenN = 0
			f.left = int(binary.BigEndian.Uint32(f.lenBuf[:]))
			f.head = f.head[:0]
			if f.left == 0 {
				on(f.n == 0, nil)
				f.n++
			}
			continue
		}
		k := min(len(p), f.left)
		if room := keep - len(f.head); room > 0 {
			f.head = append(f.head, p[:min(k, room)]...)
		}
		p, f.left = p[k:], f.left-k
		if f.left == 0 {
			on(f.n == 0, f.head)
			f.n++
		}
	}
}

// during counts the requests of the window w: it takes the counts at its
// start and at its end, and the function it returns (called once w is
// over) gives what was counted in between.
func (c *Requests) during(w window) func() Counts {
	var mu sync.Mutex
	var c0, c1 Counts
	t0 := time.AfterFunc(time.Until(w.start), func() {
		mu.Lock()
		defer mu.Unlock()
		c0 = c.Counts()
	})
	t1 := time.AfterFunc(time.Until(w.end), func() {
		mu.Lock()
		defer mu.Unlock()
		c1 = c.Counts()
	})
	return func() Counts {
		// Both fired by now (w is over); stopping is for a round that
		// failed early.
		t0.Stop()
		t1.Stop()
		mu.Lock()
		defer mu.Unlock()
		if c1 == (Counts{}) {
			return Counts{}
		}
		return c1.minus(c0)
	}
}
