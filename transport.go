package zkrecipes

import (
	"encoding/binary"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// transport watches the bytes between go-zookeeper and the server, to learn
// two things the client keeps to itself:
//
//   - the session id and timeout the server granted in each connect response
//     (the server may negotiate a timeout other than the one asked for), and
//   - a lower bound on the last time the server heard from this session.
//
// The server touches a session whenever a request of it arrives and expires
// it no sooner than one timeout after the last touch. The k-th reply proves
// that k requests were processed, so the server heard from us no earlier than
// the send time of the k-th request still owed a reply: a conservative bound,
// whatever order the replies come in.
type transport struct {
	epoch     time.Time
	touch     atomic.Int64 // nanoseconds since epoch: server heard from us at or after this
	sessionID atomic.Int64 // from the latest connect response; 0 once expired
	timeoutMs atomic.Int32 // negotiated, from the latest connect response
	created   sync.Map     // path of a created recipe node -> its Czxid
	createdN  atomic.Int32
	handshake func() // called after each connect response (must not block)

	// handshakeWait bounds the wait for a connect response. go-zookeeper
	// waits ten times its receive timeout (over a minute for a 10s
	// session); a server that accepts the connection while it is still
	// starting may never answer it (ZooKeeper 3.8 can fail to close it),
	// and the session would expire while the client waits.
	handshakeWait time.Duration
}

func newTransport() *transport { return &transport{epoch: time.Now()} }

func (t *transport) now() int64 { return int64(time.Since(t.epoch)) }

// lastTouch is the lower bound on the server's last sight of the session.
func (t *transport) lastTouch() time.Duration { return time.Duration(t.touch.Load()) }

func (t *transport) advance(at int64) {
	for {
		cur := t.touch.Load()
		if at <= cur || t.touch.CompareAndSwap(cur, at) {
			return
		}
	}
}

// dialer wraps d so every connection it makes is watched.
func (t *transport) dialer(d func(network, address string, timeout time.Duration) (net.Conn, error)) func(string, string, time.Duration) (net.Conn, error) {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := d(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return &watchedConn{Conn: c, t: t, r: frameParser{replies: true}}, nil
	}
}

// Request and reply frames are a 4-byte length and a body. A request body
// starts with its xid and opcode; a reply body with its xid, zxid and error.
// The first frame each way is the connect handshake, which has no xid.
const (
	xidWatchEvent = -1
	xidAuth       = -4 // answered outside the request pipeline; not a touch
	opCreate      = 1
)

// NodePrefix starts the names of the nodes the recipes create. The zxid in
// the reply to a create of such a node is recorded: it is the node's Czxid,
// the fencing token, learned without another round trip.
const NodePrefix = "_zkr_"

// maxCreated bounds the Czxids recorded and not yet claimed.
const maxCreated = 4096

type watchedConn struct {
	net.Conn
	t *transport

	wmu     sync.Mutex
	w       frameParser
	sent    []int64 // send times of requests still owed a reply, oldest first
	creates map[int32]struct{}
	connect int64 // send time of the connect request

	rmu     sync.Mutex
	r       frameParser
	greeted atomic.Bool // the connect response has been read
}

// SetReadDeadline shortens go-zookeeper's deadline for the connect response
// to the transport's handshakeWait.
func (c *watchedConn) SetReadDeadline(d time.Time) error {
	if w := c.t.handshakeWait; w > 0 && !c.greeted.Load() && !d.IsZero() {
		if limit := time.Now().Add(w); d.After(limit) {
			d = limit
		}
	}
	return c.Conn.SetReadDeadline(d)
}

func (c *watchedConn) Write(p []byte) (int, error) {
	at := c.t.now()
	c.wmu.Lock()
	c.w.feed(p, func(first bool, head []byte) int {
		if first {
			c.connect = at
			return 0
		}
		xid := int32(binary.BigEndian.Uint32(head))
		if xid != xidAuth {
			c.sent = append(c.sent, at)
		}
		if int32(binary.BigEndian.Uint32(head[4:])) == opCreate {
			if c.creates == nil {
				c.creates = make(map[int32]struct{})
			}
			c.creates[xid] = struct{}{}
		}
		return 0
	})
	c.wmu.Unlock()
	return c.Conn.Write(p)
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.rmu.Lock()
		c.r.feed(p[:n], c.reply)
		c.rmu.Unlock()
	}
	return n, err
}

func (c *watchedConn) reply(first bool, head []byte) int {
	if first {
		c.greeted.Store(true)
		// connect response: protocolVersion, timeout, sessionId, ...
		timeout := int32(binary.BigEndian.Uint32(head[4:8]))
		sid := int64(binary.BigEndian.Uint64(head[8:16]))
		c.t.sessionID.Store(sid)
		if sid != 0 {
			c.t.timeoutMs.Store(timeout)
			c.wmu.Lock()
			c.t.advance(c.connect)
			c.wmu.Unlock()
		}
		if c.t.handshake != nil {
			c.t.handshake()
		}
		return 0
	}
	xid := int32(binary.BigEndian.Uint32(head))
	if len(head) > 16 {
		return c.created(head)
	}
	switch xid {
	case xidWatchEvent, xidAuth:
		return 0
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if len(c.sent) > 0 {
		c.t.advance(c.sent[0])
		c.sent = c.sent[1:]
	}
	if _, ok := c.creates[xid]; ok {
		delete(c.creates, xid)
		if binary.BigEndian.Uint32(head[12:16]) == 0 { // no error: read the path too
			return 20
		}
	}
	return 0
}

// created reads the reply to a create: header, then the created path.
func (c *watchedConn) created(head []byte) int {
	n := int(int32(binary.BigEndian.Uint32(head[16:20])))
	if n <= 0 || n > 1024 {
		return 0
	}
	if len(head) < 20+n {
		return 20 + n
	}
	path := string(head[20:])
	if strings.Contains(path, "/"+NodePrefix) && c.t.createdN.Load() < maxCreated {
		c.t.createdN.Add(1)
		c.t.created.Store(path, int64(binary.BigEndian.Uint64(head[4:12])))
	}
	return 0
}

// frameParser splits a byte stream into frames and hands on the first bytes
// of each body: 16 of the first frame (the handshake), 8 of later requests,
// 16 of later replies. on may ask for more of the same body by returning a
// larger count, or 0 for no more.
type frameParser struct {
	replies bool
	frames  int
	lenBuf  [4]byte
	lenN    int
	body    int // body bytes still to come in the current frame
	head    []byte
	need    int
}

func (f *frameParser) feed(p []byte, on func(first bool, head []byte) int) {
	for len(p) > 0 {
		if f.body == 0 {
			k := copy(f.lenBuf[f.lenN:], p)
			f.lenN += k
			p = p[k:]
			if f.lenN < 4 {
				return
			}
			f.lenN = 0
			f.body = int(binary.BigEndian.Uint32(f.lenBuf[:]))
			f.head = f.head[:0]
			f.need = 8
			if f.frames == 0 || f.replies {
				f.need = 16
			}
			if f.body == 0 {
				f.frames++
				continue
			}
		}
		k := min(len(p), f.body)
		if len(f.head) < f.need {
			take := min(k, f.need-len(f.head))
			f.head = append(f.head, p[:take]...)
			for f.need > 0 && len(f.head) == f.need {
				f.need = on(f.frames == 0, f.head)
				if f.need > len(f.head) {
					more := min(k-take, f.need-len(f.head))
					f.head = append(f.head, p[take:take+more]...)
					take += more
				}
			}
		}
		f.body -= k
		p = p[k:]
		if f.body == 0 {
			f.frames++
		}
	}
}

// lastTouchAge is how long ago the last proven contact was.
func (t *transport) lastTouchAge() time.Duration {
	return time.Duration(t.now()) - t.lastTouch()
}
