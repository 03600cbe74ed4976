// Package wire watches the bytes between go-zookeeper and the server, to
// learn what the client keeps to itself:
//
//   - the session id and timeout the server granted in each connect response
//     (the server may negotiate a timeout other than the one asked for);
//   - a lower bound on the last time the server heard from this session,
//     the clock of the session's loss timer;
//   - the zxid in the reply to each create of a recipe node, which is the
//     node's Czxid: the fencing token, learned without another round trip.
//
// The server touches a session whenever a request of it arrives and expires
// it no sooner than one timeout after the last touch. The k-th reply proves
// that k requests were processed, so the server heard from us no earlier than
// the send time of the k-th request still owed a reply: a conservative bound,
// whatever order the replies come in.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// NodePrefix starts the names of the nodes the recipes create. The zxid in
// the reply to a create of such a node is recorded until Created claims it.
const NodePrefix = "_zkr_"

// errMoved says why the transport carries nothing more.
var errMoved = errors.New("the server answered with another session than this client's: its session is over")

// maxCreated bounds the Czxids recorded and not yet claimed. Every recipe
// claims the Czxid of each node it creates as soon as the create returns,
// so the table holds only creates in flight; the bound is a safety net.
const maxCreated = 4096

// Transport is the wire watcher of one Session: every connection its dialer
// makes is watched.
type Transport struct {
	epoch     time.Time
	touch     atomic.Int64 // nanoseconds since epoch: server heard from us at or after this
	sessionID atomic.Int64 // from the latest connect response; 0 once expired
	timeoutMs atomic.Int32 // negotiated, from the latest connect response
	first     atomic.Int64 // the session id of the first connect response
	moved     atomic.Bool  // a connect response named another session: carry nothing more

	createdMu sync.Mutex
	created   map[string]int64 // path of a created recipe node -> its Czxid

	onHandshake   func() // called after each connect response (must not block)
	handshakeWait time.Duration
}

// New returns a Transport. onHandshake is called (on the client's receive
// path: it must not block) after each connect response. handshakeWait
// bounds the wait for a connect response: go-zookeeper waits ten times its
// receive timeout (over a minute for a 10s session), and a server that
// accepts a connection while still starting may never answer it (ZooKeeper
// 3.8 can fail to close it), so the session would expire while the client
// waits.
func New(onHandshake func(), handshakeWait time.Duration) *Transport {
	return &Transport{epoch: time.Now(), created: make(map[string]int64),
		onHandshake: onHandshake, handshakeWait: handshakeWait}
}

// SessionID is the session id of the latest connect response: 0 before the
// first, and 0 once the server answered that the session expired.
func (t *Transport) SessionID() int64 { return t.sessionID.Load() }

// Timeout is the session timeout the server granted in the latest connect
// response.
func (t *Transport) Timeout() time.Duration {
	return time.Duration(t.timeoutMs.Load()) * time.Millisecond
}

// Silence is how long ago the server last provably heard from the session.
func (t *Transport) Silence() time.Duration {
	return time.Duration(t.now() - t.touch.Load())
}

// Created returns, once, the Czxid of a node this session created, read
// from the server's reply to the create; false when not recorded (the
// reply was lost, or the node's name does not start with NodePrefix).
func (t *Transport) Created(path string) (int64, bool) {
	t.createdMu.Lock()
	defer t.createdMu.Unlock()
	z, ok := t.created[path]
	delete(t.created, path)
	return z, ok
}

func (t *Transport) record(path string, zxid int64) {
	t.createdMu.Lock()
	defer t.createdMu.Unlock()
	if len(t.created) < maxCreated {
		t.created[path] = zxid
	}
}

func (t *Transport) now() int64 { return int64(time.Since(t.epoch)) }

func (t *Transport) advance(at int64) {
	for {
		cur := t.touch.Load()
		if at <= cur || t.touch.CompareAndSwap(cur, at) {
			return
		}
	}
}

// Dialer wraps d so every connection it makes is watched.
func (t *Transport) Dialer(d func(network, address string, timeout time.Duration) (net.Conn, error)) func(string, string, time.Duration) (net.Conn, error) {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		if t.moved.Load() {
			return nil, errMoved
		}
		c, err := d(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return &watchedConn{Conn: c, t: t, r: frameParser{replies: true}}, nil
	}
}

type watchedConn struct {
	net.Conn
	t *Transport

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

// Write passes the client's requests on. It refuses them once the server
// has answered a connect with another session than the first (go-zookeeper
// would go on, quietly, as a new session: requests meant for the old one,
// whose ephemeral nodes are gone, would land in the new one). Its errors
// wrap zk.ErrConnectionClosed, which is what go-zookeeper hands the
// request's caller: the request may or may not have been sent.
func (c *watchedConn) Write(p []byte) (int, error) {
	if c.t.moved.Load() {
		return 0, fmt.Errorf("%w: %w", zk.ErrConnectionClosed, errMoved)
	}
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
	n, err := c.Conn.Write(p)
	if err != nil {
		err = fmt.Errorf("%w: %w", zk.ErrConnectionClosed, err)
	}
	return n, err
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
		if first := c.t.first.Load(); first == 0 {
			c.t.first.Store(sid)
		} else if sid != first {
			c.t.moved.Store(true)
		}
		c.t.sessionID.Store(sid)
		if sid != 0 {
			c.t.timeoutMs.Store(timeout)
			c.wmu.Lock()
			c.t.advance(c.connect)
			c.wmu.Unlock()
		}
		if c.t.onHandshake != nil {
			c.t.onHandshake()
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
	if path := string(head[20:]); strings.Contains(path, "/"+NodePrefix) {
		c.t.record(path, int64(binary.BigEndian.Uint64(head[4:12])))
	}
	return 0
}
