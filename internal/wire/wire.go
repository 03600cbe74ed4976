// Package wire watches the bytes between go-zookeeper and the server, to
// learn what the client keeps to itself:
//
//   - the session id and timeout the server granted in each connect response
//     (the server may negotiate a timeout other than the one asked for);
//   - proof of contact: the latest send time of a request that the
//     ensemble's leader provably heard, the clock of the session's loss
//     timer (see proof.go for which replies prove it);
//   - the zxid in the reply to each create of a recipe node, which is the
//     node's Czxid: the fencing token, learned without another round trip.
//
// It also refuses frames no ZooKeeper server sends: go-zookeeper allocates
// whatever length a frame announces, so a port that answers HTTP would
// cost it a gigabyte per attempt.
package wire

import (
	"context"
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

// errMoved and errAbandoned say why the transport carries nothing more.
var (
	errMoved     = errors.New("the server answered with another session than this client's: its session is over")
	errAbandoned = errors.New("the session was given up: it is left to the ensemble to expire")
)

// maxCreated bounds the Czxids recorded and not yet claimed. Every recipe
// claims the Czxid of each node it creates as soon as the create returns,
// so the table holds only creates in flight; the bound is a safety net.
const maxCreated = 4096

// Probe asks the server at addr for its role and, when it will say, its
// tickTime (0 when unknown). It must return once ctx ends.
type Probe func(ctx context.Context, addr string) (Mode, time.Duration)

// Config is what a Transport needs.
type Config struct {
	// OnHandshake is called (on the client's receive path: it must not
	// block) after each connect response.
	OnHandshake func()
	// HandshakeWait bounds the wait for a connect response: go-zookeeper
	// waits ten times its receive timeout (over a minute for a 10s
	// session), and a server that accepts a connection while still
	// starting may never answer it (ZooKeeper 3.8 can fail to close it), so
	// the session would expire while the client waits. 0: no bound.
	HandshakeWait time.Duration
	// Probe, when set, is run once per connection after its handshake.
	Probe Probe
	// Tick, when positive, is an upper bound on the ensemble's tickTime
	// that the probe's answer does not replace.
	Tick time.Duration
	// Refused, when set, is told why the transport refused a connection
	// to addr (a server that does not speak ZooKeeper's protocol).
	Refused func(addr string, err error)
	// Unanswered, when set, is told why a connection to addr ended before
	// the server answered the connect request (no answer in time, the
	// server closed it).
	Unanswered func(addr string, err error)
}

// Transport is the wire watcher of one Session: every connection its dialer
// makes is watched.
type Transport struct {
	cfg       Config
	epoch     time.Time
	now       func() int64 // nanoseconds since epoch
	proof     atomic.Int64 // the proven contact: no leader expires the session before a timeout after it
	sessionID atomic.Int64 // from the latest connect response; 0 once expired
	timeoutMs atomic.Int32 // negotiated, from the latest connect response
	first     atomic.Int64 // the session id of the first connect response
	moved     atomic.Bool  // a connect response named another session: carry nothing more
	abandoned atomic.Bool  // Abandon was called: carry nothing more
	tick      atomic.Int64 // an upper bound on tickTime (ns); 0: unknown
	conn      atomic.Pointer[watchedConn]

	createdMu sync.Mutex
	created   map[string]int64 // path of a created recipe node -> its Czxid

	probes   sync.WaitGroup
	stop     context.Context
	stopFunc context.CancelFunc
}

// New returns a Transport. Close it when the client is closed.
func New(cfg Config) *Transport {
	t := &Transport{cfg: cfg, epoch: time.Now(), created: make(map[string]int64)}
	t.now = func() int64 { return int64(time.Since(t.epoch)) }
	t.stop, t.stopFunc = context.WithCancel(context.Background())
	t.proof.Store(-1)
	t.tick.Store(int64(cfg.Tick))
	return t
}

// Close stops the probes in flight and waits for them.
func (t *Transport) Close() {
	t.stopFunc()
	t.probes.Wait()
}

// Abandon makes the transport carry nothing more: it dials no connection
// and writes no request, so that closing the client then sends the server
// no closeSession. A session given up must be left to expire: closing it
// would delete its ephemeral nodes at once, handing its locks on while its
// holders are still being told, a fifth of the timeout before the ensemble
// could have expired it.
func (t *Transport) Abandon() { t.abandoned.Store(true) }

// over says why the transport carries nothing more; nil while it carries.
func (t *Transport) over() error {
	switch {
	case t.abandoned.Load():
		return errAbandoned
	case t.moved.Load():
		return errMoved
	}
	return nil
}

// SessionID is the session id of the latest connect response: 0 before the
// first, and 0 once the server answered that the session expired.
func (t *Transport) SessionID() int64 { return t.sessionID.Load() }

// Timeout is the session timeout the server granted in the latest connect
// response.
func (t *Transport) Timeout() time.Duration {
	return time.Duration(t.timeoutMs.Load()) * time.Millisecond
}

// Unproven is how long ago the latest proven contact was sent: no leader
// can expire the session until a full timeout after it.
func (t *Transport) Unproven() time.Duration {
	return time.Duration(t.now() - t.proof.Load())
}

// Tick is the tickTime the proof's window assumes: the configured bound, or
// the server's answer, or half the timeout (ZooKeeper grants no timeout
// below two ticks unless its minSessionTimeout was lowered); and whether it
// was known rather than assumed.
func (t *Transport) Tick() (time.Duration, bool) {
	if d := time.Duration(t.tick.Load()); d > 0 {
		return d, true
	}
	return t.Timeout() / 2, false
}

// Window is the proof's window W for the current tickTime.
func (t *Transport) Window() time.Duration {
	tick, _ := t.Tick()
	return Window(tick)
}

// Mode is the role of the server of the latest connection, as far as known.
func (t *Transport) Mode() Mode {
	if c := t.conn.Load(); c != nil {
		return Mode(c.mode.Load())
	}
	return ModeUnknown
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

// prove records a proven contact at (client time) at.
func (t *Transport) prove(at int64) {
	for {
		cur := t.proof.Load()
		if at <= cur || t.proof.CompareAndSwap(cur, at) {
			return
		}
	}
}

// Dialer wraps d so every connection it makes is watched.
func (t *Transport) Dialer(d func(network, address string, timeout time.Duration) (net.Conn, error)) func(string, string, time.Duration) (net.Conn, error) {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		if err := t.over(); err != nil {
			return nil, err
		}
		c, err := d(network, address, timeout)
		if err != nil {
			return nil, err
		}
		wc := &watchedConn{Conn: c, t: t, addr: address, r: frameParser{replies: true}, p: newProof()}
		wc.modeAt.Store(-1)
		return wc, nil
	}
}

type watchedConn struct {
	net.Conn
	t    *Transport
	addr string

	mode   atomic.Int32 // Mode of the server, once the probe answered
	modeAt atomic.Int64 // when it answered; requests sent after it count by the mode's rule

	wmu     sync.Mutex
	w       frameParser
	pending []pending // requests still owed a reply, oldest first
	p       proof
	connect int64 // send time of the connect request
	cur     pending

	rmu     sync.Mutex
	r       frameParser
	greeted atomic.Bool // the connect response has been read

	// Read's buffer (only go-zookeeper's receive loop reads): what came
	// from the server and the client has not taken, rbuf[rpos:], and the
	// error that came with it.
	rbuf []byte
	rpos int
	rerr error
}

// SetReadDeadline shortens go-zookeeper's deadline for the connect response
// to the transport's HandshakeWait.
func (c *watchedConn) SetReadDeadline(d time.Time) error {
	if w := c.t.cfg.HandshakeWait; w > 0 && !c.greeted.Load() && !d.IsZero() {
		if limit := time.Now().Add(w); d.After(limit) {
			d = limit
		}
	}
	return c.Conn.SetReadDeadline(d)
}

// Write passes the client's requests on. It refuses them once the server
// has answered a connect with another session than the first (go-zookeeper
// would go on, quietly, as a new session: requests meant for the old one,
// whose ephemeral nodes are gone, would land in the new one), and once the
// session is abandoned. Its errors wrap zk.ErrConnectionClosed, which is
// what go-zookeeper hands the request's caller: the request may or may not
// have been sent.
func (c *watchedConn) Write(p []byte) (int, error) {
	if err := c.t.over(); err != nil {
		return 0, fmt.Errorf("%w: %w", zk.ErrConnectionClosed, err)
	}
	c.sending(p, c.t.now())
	n, err := c.Conn.Write(p)
	if err != nil {
		err = fmt.Errorf("%w: %w", zk.ErrConnectionClosed, err)
	}
	return n, err
}

// sending notes the requests in p, about to be written at at.
func (c *watchedConn) sending(p []byte, at int64) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.w.feed(p, func(first bool, head []byte) int {
		if first {
			c.connect = at
			return 0
		}
		c.request(int32(binary.BigEndian.Uint32(head)), int32(binary.BigEndian.Uint32(head[4:])), at)
		return 0
	})
}

// request notes a request sent at at (wmu held).
func (c *watchedConn) request(xid, op int32, at int64) {
	if xid == xidAuth {
		return // answered outside the request pipeline
	}
	r := pending{xid: xid, op: op, sent: at, fence: -1, prior: -1}
	if op == opSync || isWrite(op) {
		r.win = int64(c.t.Window())
		r.fence = c.p.contact(at, r.win)
	}
	if isWrite(op) {
		r.prior = c.p.fenced
	}
	c.pending = append(c.pending, r)
}

// Read hands the client what the server sent, from a buffer: go-zookeeper
// reads each reply's length and body apart, two system calls a reply, where
// one read takes every reply that has come. A reply is read (by received)
// when the client takes it, as without the buffer.
func (c *watchedConn) Read(p []byte) (int, error) {
	if c.rpos == len(c.rbuf) {
		err := c.rerr
		c.rerr = nil
		if err == nil {
			if c.rbuf == nil {
				c.rbuf = make([]byte, readBuffer)
			}
			var n int
			n, err = c.Conn.Read(c.rbuf[:cap(c.rbuf)])
			c.rbuf, c.rpos = c.rbuf[:n], 0
			if n > 0 {
				c.rerr = err // after what came with it
				err = nil
			}
		}
		if err != nil {
			if !c.greeted.Load() && c.t.cfg.Unanswered != nil {
				c.t.cfg.Unanswered(c.addr, fmt.Errorf("server %s: no answer to the connect request: %w", c.addr, err))
			}
			return 0, err
		}
	}
	n := copy(p, c.rbuf[c.rpos:])
	c.rpos += n
	if ferr := c.received(p[:n]); ferr != nil {
		c.Conn.Close()
		return 0, ferr
	}
	return n, nil
}

// readBuffer is the size of a connection's read buffer.
const readBuffer = 32 << 10

// received reads the replies in p; an error refuses the connection.
func (c *watchedConn) received(p []byte) error {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if err := c.r.feed(p, c.reply); err != nil {
		err = fmt.Errorf("server %s: %w", c.addr, err)
		if c.t.cfg.Refused != nil {
			c.t.cfg.Refused(c.addr, err)
		}
		return err
	}
	return nil
}

func (c *watchedConn) reply(first bool, head []byte) int {
	if first {
		c.handshake(head)
		return 0
	}
	if len(head) > 16 {
		return c.more(head)
	}
	xid := int32(binary.BigEndian.Uint32(head))
	switch xid {
	case xidWatchEvent, xidAuth:
		return 0
	}
	now := c.t.now()
	code := int32(binary.BigEndian.Uint32(head[12:16]))
	c.wmu.Lock()
	defer c.wmu.Unlock()
	r, ok := c.answer(xid)
	if !ok {
		return 0
	}
	c.cur = r
	c.p.answered(span{r.sent, now}, now, int64(c.t.Window()))
	mode, modeAt := Mode(c.mode.Load()), c.modeAt.Load()
	byMode := modeAt >= 0 && r.sent >= modeAt
	if mode == ModeStandalone && byMode {
		c.t.prove(r.sent)
	}
	// A sync answered, or a write (whatever its outcome: the leader
	// proposed it), fences its contact for a later write to confirm, if
	// its window is still long enough (the server's tickTime, learned
	// since, may be longer than was assumed).
	if r.fence >= 0 && r.win >= int64(c.t.Window()) &&
		((r.op == opSync && code == 0) || (isWrite(r.op) && checkedAt(code))) {
		c.p.fenced = max(c.p.fenced, r.fence)
	}
	switch {
	case r.op == opMulti && code == 0:
		return 25 // the first op's result says whether the session was checked
	case isWrite(r.op) && checkedAt(code):
		c.confirmed(r, mode == ModeLeader && byMode)
	}
	if r.op == opCreate && code == 0 {
		return 20 // read the created path too
	}
	return 0
}

// answer takes the pending request xid: replies come in the order the
// requests were sent (skipping any the server never answers).
func (c *watchedConn) answer(xid int32) (pending, bool) {
	for i, r := range c.pending {
		if r.xid == xid {
			c.pending = c.pending[i+1:]
			return r, true
		}
	}
	return pending{}, false
}

// confirmed: write r was prepared by the leader with the session live.
func (c *watchedConn) confirmed(r pending, leader bool) {
	if r.prior >= 0 {
		c.t.prove(r.prior)
	}
	if leader {
		c.t.prove(r.sent)
	}
}

// more reads past a reply's header: a multi's first result, or a create's
// path.
func (c *watchedConn) more(head []byte) int {
	c.wmu.Lock()
	r := c.cur
	if r.op == opMulti && len(head) == 25 {
		// MultiHeader: type, done, err. The first op was prepared with the
		// session checked unless it failed before that.
		typ := int32(binary.BigEndian.Uint32(head[16:20]))
		done := head[20] != 0
		code := int32(binary.BigEndian.Uint32(head[21:25]))
		if !done && (typ != opError || checkedAt(code)) {
			c.confirmed(r, Mode(c.mode.Load()) == ModeLeader && c.modeAt.Load() >= 0 && r.sent >= c.modeAt.Load())
		}
		c.wmu.Unlock()
		return 0
	}
	c.wmu.Unlock()
	if r.op == opCreate {
		return c.created(head)
	}
	return 0
}

// handshake reads a connect response: protocolVersion, timeout, sessionId.
func (c *watchedConn) handshake(head []byte) {
	c.greeted.Store(true)
	timeout := int32(binary.BigEndian.Uint32(head[4:8]))
	sid := int64(binary.BigEndian.Uint64(head[8:16]))
	fresh := false
	if first := c.t.first.Load(); first == 0 {
		c.t.first.Store(sid)
		fresh = sid != 0
	} else if sid != first {
		c.t.moved.Store(true)
	}
	c.t.sessionID.Store(sid)
	if sid != 0 {
		c.t.timeoutMs.Store(timeout)
		if fresh {
			// A new session: its creation was a quorum transaction that the
			// leader prepared, touching the session, after the connect
			// request was sent.
			c.wmu.Lock()
			c.t.prove(c.connect)
			c.wmu.Unlock()
		}
		c.t.conn.Store(c)
		c.probe()
	}
	if c.t.cfg.OnHandshake != nil {
		c.t.cfg.OnHandshake()
	}
}

// probe asks, off the receive path, what the server is.
func (c *watchedConn) probe() {
	if c.t.cfg.Probe == nil || c.t.stop.Err() != nil {
		return
	}
	addr := c.Conn.RemoteAddr().String()
	c.t.probes.Add(1)
	go func() {
		defer c.t.probes.Done()
		mode, tick := c.t.cfg.Probe(c.t.stop, addr)
		if tick > 0 && c.t.cfg.Tick <= 0 {
			c.t.tick.Store(int64(tick))
		}
		c.modeAt.Store(c.t.now())
		c.mode.Store(int32(mode))
	}()
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
