package zktest

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zkrecipes/zkrecipes"
)

// Opcodes of the requests the recipes send, for [Match].Op. They are
// ZooKeeper's wire opcodes (the client's requests and the operations inside
// a multi).
const (
	OpCreate          int32 = 1
	OpDelete          int32 = 2
	OpExists          int32 = 3
	OpGetData         int32 = 4
	OpSetData         int32 = 5
	OpGetChildren     int32 = 8
	OpGetChildren2    int32 = 12 // what go-zookeeper's Children and ChildrenW send
	OpCheck           int32 = 13 // only inside a multi
	OpMulti           int32 = 14
	OpCreateContainer int32 = 19
)

// Wire constants the Dropper needs besides the opcodes above.
const (
	opCreate2     int32 = 15
	opCreateTTL   int32 = 21
	opSetWatches  int32 = 101
	maxFrame            = 16 << 20 // anything longer is not ZooKeeper talking
	gateFallback        = 250 * time.Millisecond
	xidWatchEvent int32 = -1
)

// Mode says how a [Dropper] cuts the connection at the request it was armed
// for.
type Mode int

const (
	// AfterWrite forwards the request to the server, then closes the
	// connection at once, before any reply can be read. The server may or
	// may not apply the request (it usually does: it reads the request
	// before it notices the close). The client's call fails with
	// zk.ErrConnectionClosed.
	AfterWrite Mode = iota + 1

	// LoseReply forwards the request, waits for the server's reply to it,
	// swallows that reply and closes the connection. The request WAS
	// applied, and the client's call fails with zk.ErrConnectionClosed:
	// the reply lost on the way back.
	LoseReply

	// BeforeWrite closes the connection instead of forwarding the request:
	// the request was NOT applied (lost on the way), and the client's call
	// fails with zk.ErrConnectionClosed, as after AfterWrite. The two are
	// what a client cannot tell apart.
	BeforeWrite

	// AfterReply forwards the request, lets the server's reply to it reach
	// the client, and closes the connection right behind it: the call
	// succeeds, and nothing the server sends after that reply reaches the
	// client. Aimed at a read that sets a watch (see Match.Watch), it
	// leaves the client waiting on a watch set on a connection that is
	// gone: the start of an outage (see Pause).
	AfterReply
)

func (m Mode) String() string {
	switch m {
	case AfterWrite:
		return "AfterWrite"
	case LoseReply:
		return "LoseReply"
	case BeforeWrite:
		return "BeforeWrite"
	case AfterReply:
		return "AfterReply"
	}
	return "Mode(?)"
}

// Match picks the request a [Dropper] is armed for.
//
// A plain request matches when its opcode is Op and its path contains Path.
// A multi matches when Op is OpMulti and the path of any of its operations
// contains Path, or when one of its operations has type Op and a path that
// contains Path: so Op: OpDelete hits both a plain delete and a multi that
// deletes, and Op: OpCheck hits the multis that check a version. An empty
// Path matches every path. With Watch set, only a read that sets a watch
// matches (getData, exists or getChildren with its watch flag set).
type Match struct {
	Op    int32
	Path  string
	Watch bool
}

func (m Match) hits(r request) bool {
	if m.Watch && !r.watch {
		return false
	}
	if r.op == m.Op && r.op != OpMulti {
		return r.hasPath && strings.Contains(r.path, m.Path)
	}
	if r.op != OpMulti {
		return false
	}
	for _, sub := range r.ops {
		if (m.Op == OpMulti || sub.op == m.Op) && strings.Contains(sub.path, m.Path) {
			return true
		}
	}
	return false
}

// Dropper is a dialer for zkrecipes.WithDialer (or zk.WithDialer) that cuts
// a client's connection at a chosen request: a connection blip that the
// session survives, aimed exactly. It reads the client's request frames,
// and when a request it was armed for goes by, it cuts the connection the
// way its [Mode] says. The client reconnects through the same Dropper and
// resumes its session: ephemeral nodes and watches survive, and only the
// calls in flight fail, with zk.ErrConnectionClosed. It can also hold a
// request back behind a later one ([Dropper.Hold]): the order a client's
// goroutines may send them in, when the scheduler has its way.
//
// What it guarantees:
//
//   - Each Arm cuts once, at the first request after it that matches, and
//     only there. Fired counts the cuts (and the holds) that happened.
//   - With LoseReply, the request was applied by the server and its reply
//     never reaches the client; nothing the server sends after that reply
//     reaches it either. Everything the server sent before it (replies,
//     watch events) does.
//   - With AfterWrite, the request was handed whole to the connection, and
//     nothing the server sends after that reaches the client.
//   - With BeforeWrite, the request never reaches the server.
//   - With AfterReply, the request's reply reaches the client, and nothing
//     the server sends after it does.
//   - Once a cut has closed it, a connection takes what the client writes
//     and sends it nowhere, as a socket does whose peer just vanished: the
//     requests in flight fail with zk.ErrConnectionClosed, none with an
//     error of the socket.
//   - The session survives: the client reconnects through the same Dropper
//     and resumes it, and its watches are re-set. go-zookeeper waits a
//     second before it dials again once it has tried every address it was
//     given: [Dropper.Connect] (or listing each server twice, see
//     [Dropper.Addrs]) makes it reconnect at once.
//   - After the first connection, each new one holds the server's replies
//     (not the connect response) back until the client has re-sent its
//     watches (setWatches), or for at most 250 ms when it sends none; a cut
//     decided meanwhile closes the connection only then. go-zookeeper
//     v1.0.4 reads its last zxid for that request without synchronizing
//     with its receive loop (go-zookeeper/zk#35); holding the replies back
//     orders the two, so that tests under -race do not fail on the
//     client's own race.
//
// A Dropper's zero value is ready to use, and it is safe for concurrent
// use. One Dropper per Session keeps its aim unambiguous.
type Dropper struct {
	mu     sync.Mutex
	arms   []arm
	fired  int
	dials  int
	paused chan struct{} // while paused (see Pause): closed by Resume
	missed bool          // LoseMissedEvents was called, and not used yet

	churn     Churn // see Churn
	rng       *rand.Rand
	lastChurn time.Time
	churned   int
}

// arm is one Arm or Hold not yet used.
type arm struct {
	match  Match
	mode   Mode          // how to cut, for an Arm
	hold   bool          // a Hold: send it after until
	until  Match         // for a Hold
	limit  time.Duration // for a Hold: send it anyway after this long
	passed bool          // for a Hold: a request that matches until was written since it was made
}

// HoldLimit bounds how long [Dropper.Hold] holds a request back when the
// request it waits for never comes: the held one is then sent all the same.
const HoldLimit = 2 * time.Second

// Arm makes the Dropper cut the connection at the next request that
// matches m, once. Arms (and Holds) add up: each request is checked
// against them in the order they were made, and uses up the first that
// matches.
func (d *Dropper) Arm(m Match, mode Mode) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.arms = append(d.arms, arm{match: m, mode: mode})
}

// Hold makes the Dropper hold the next request that matches m back, and
// send it right after the next request that matches until, once: the
// server then applies and answers them in that order, as if the client had
// sent them so. When a request that matches until is written after the
// Hold is made and before one that matches m, the order is so already: that
// one goes at once. The held request is sent anyway after HoldLimit, and is
// lost with its connection if that is cut first. It counts in Fired once
// sent after until (not when sent after HoldLimit).
func (d *Dropper) Hold(m, until Match) { d.HoldFor(m, until, HoldLimit) }

// HoldFor is Hold with its own limit in place of HoldLimit: the held request
// is sent after limit if the one it waits for has not come by then. A
// short limit suits a client that sends the request it waits for only once
// the held one is answered: the Hold then only delays it.
func (d *Dropper) HoldFor(m, until Match, limit time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.arms = append(d.arms, arm{match: m, hold: true, until: until, limit: limit})
}

// Disarm withdraws the Arms and Holds not used yet, and reports whether
// there were any.
func (d *Dropper) Disarm() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	was := len(d.arms) > 0
	d.arms = nil
	return was
}

// Armed is the number of Arms and Holds not used yet.
func (d *Dropper) Armed() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.arms)
}

// Fired is the number of cuts made, and of held requests sent after the
// one they waited for, so far: a test asserts with it that its fault
// really happened.
func (d *Dropper) Fired() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fired
}

// Addrs lists each of addrs twice, for zkrecipes.Connect with this Dropper:
// go-zookeeper then reconnects at once after a cut instead of waiting a
// second (it waits once it has tried every address in its list).
func (d *Dropper) Addrs(addrs []string) []string {
	out := make([]string, 0, 2*len(addrs))
	out = append(out, addrs...)
	return append(out, addrs...)
}

// Connect opens a Session to addrs through d, as [Connect] does (the test
// fails if there is none within 30 s; it is closed when the test ends),
// listing each address twice (see Addrs).
func (d *Dropper) Connect(t testing.TB, addrs []string, opts ...zkrecipes.Option) *zkrecipes.Session {
	t.Helper()
	return Connect(t, d.Addrs(addrs), append(opts, zkrecipes.WithDialer(d.Dial))...)
}

// take uses up the first arm that request r matches.
func (d *Dropper) take(r request) (arm, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	taken := -1
	for i, a := range d.arms {
		if a.match.hits(r) {
			taken = i
			break
		}
	}
	if taken < 0 || d.arms[taken].hold || d.arms[taken].mode != BeforeWrite { // r is written
		for i := range d.arms {
			if a := &d.arms[i]; i != taken && a.hold && a.until.hits(r) {
				a.passed = true
			}
		}
	}
	if taken < 0 {
		return arm{}, false
	}
	a := d.arms[taken]
	d.arms = append(d.arms[:taken:taken], d.arms[taken+1:]...)
	return a, true
}

func (d *Dropper) count() {
	d.mu.Lock()
	d.fired++
	d.mu.Unlock()
}

// Dial has the signature of zk.Dialer.
func (d *Dropper) Dial(network, address string, timeout time.Duration) (net.Conn, error) {
	if !d.waitPaused(timeout) {
		return nil, errPaused
	}
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	gated := d.dials > 0
	d.dials++
	d.mu.Unlock()
	dc := &dropConn{Conn: c, d: d, lose: -1, after: -1, closed: make(chan struct{}), gate: make(chan struct{})}
	if !gated {
		dc.release()
	}
	return dc, nil
}

// dropConn is one connection made by a Dropper. Write (go-zookeeper's send
// loop, and its handshake) and Read (its receive loop) each run in one
// goroutine at a time.
//
// A cut has two steps. From the moment it is decided, nothing more that the
// server sends reaches the client. The connection is closed then too, unless
// its gate is still shut: then it is closed once the gate opens. Until
// then the client's writes still go through, so that the watches it re-sends
// on this connection are sent on it, and not left queued for the next one,
// where they would be sent ahead of that connection's own (and open its gate
// before the client has read its last zxid for it).
type dropConn struct {
	net.Conn
	d *Dropper

	closeOnce sync.Once
	closed    chan struct{}
	gateOnce  sync.Once
	gate      chan struct{} // closed when replies may reach the client

	mu    sync.Mutex
	lose  int32 // xid of the reply to swallow; -1 for none
	after int32 // xid of the reply to let through, then cut (AfterReply); -1 for none
	cut   bool  // cut by us: nothing more reaches the client

	wmu     sync.Mutex
	wbuf    []byte // request bytes not yet forwarded: an incomplete frame
	wframes int
	stash   []*stashed // requests held back by Hold
	losing  bool       // this connection's setWatches claim every zxid (LoseMissedEvents)

	rmu     sync.Mutex
	rbuf    []byte // reply bytes not yet parsed into frames
	free    []byte // the connect response, not held by the gate
	held    []byte // whole reply frames, held by the gate
	rframes int
	rerr    error // from the server's side, once free and held are drained
}

func (c *dropConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		close(c.closed)
		err = c.Conn.Close()
	})
	return err
}

// decide decides the cut: from now on nothing reaches the client.
func (c *dropConn) decide() {
	c.mu.Lock()
	c.cut = true
	c.mu.Unlock()
}

// cutHere counts the cut decided, and closes the connection unless the
// gate is shut (release closes it then).
func (c *dropConn) cutHere() {
	c.decide()
	c.d.count()
	select {
	case <-c.gate:
		c.Close()
	default:
	}
}

func (c *dropConn) isCut() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut
}

// release opens the gate, and closes a connection cut while it was shut.
func (c *dropConn) release() {
	c.gateOnce.Do(func() { close(c.gate) })
	if c.isCut() {
		c.Close()
	}
}

// stashed is a request held back by Hold.
type stashed struct {
	frame []byte
	until Match
	timer *time.Timer
}

func (c *dropConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	select {
	case <-c.closed:
		if c.isCut() {
			// As on a real connection that has just died: the write goes
			// into the socket, and no reply ever comes. go-zookeeper then
			// fails the request with zk.ErrConnectionClosed, not with an
			// error of the socket.
			return len(p), nil
		}
		return 0, net.ErrClosed
	default:
	}
	c.wbuf = append(c.wbuf, p...)
	for len(c.wbuf) >= 4 {
		n := int(binary.BigEndian.Uint32(c.wbuf))
		if n > maxFrame || len(c.wbuf) < 4+n {
			break
		}
		frame := c.wbuf[:4+n]
		first := c.wframes == 0
		c.wframes++
		var r request
		var a arm
		if !first {
			r = parseRequest(frame[4:])
			if r.op == opSetWatches {
				c.forgetMissed(frame)
			}
			if !c.isCut() {
				var ok bool
				if a, ok = c.d.take(r); !ok && c.d.churns(r) {
					a = arm{mode: AfterWrite}
				}
			}
		}
		if a.hold && a.passed {
			c.d.count() // sent after until already: as a Hold that waited
			a.hold = false
		}
		if a.hold {
			st := &stashed{frame: append([]byte(nil), frame...), until: a.until}
			st.timer = time.AfterFunc(a.limit, func() { c.unstash(st) })
			c.stash = append(c.stash, st)
			c.wbuf = c.wbuf[4+n:]
			continue
		}
		switch a.mode {
		case BeforeWrite:
			// As AfterWrite, but the frame never reaches the server; what
			// the client writes after it goes nowhere (see above).
			c.cutHere()
			c.wbuf = nil
			return len(p), nil
		case LoseReply:
			c.mu.Lock()
			c.lose = r.xid
			c.mu.Unlock()
		case AfterReply:
			c.mu.Lock()
			c.after = r.xid
			c.mu.Unlock()
		case AfterWrite:
			c.decide() // before the write: its reply must not slip through
		}
		if _, err := c.Conn.Write(frame); err != nil {
			c.wbuf = nil
			if c.isCut() {
				return len(p), nil // closed by our cut meanwhile: as above
			}
			return 0, err
		}
		c.wbuf = c.wbuf[4+n:]
		if a.mode == AfterWrite {
			c.cutHere()
		}
		if r.op == opSetWatches {
			c.release() // the client read its last zxid before sending this
		}
		// Send the requests held back for this one.
		for i := 0; i < len(c.stash); i++ {
			if st := c.stash[i]; !first && st.until.hits(r) {
				st.timer.Stop()
				c.stash = append(c.stash[:i:i], c.stash[i+1:]...)
				i--
				// Counted before it is sent: once sent, its reply may
				// reach a test that then reads Fired.
				c.d.count()
				if _, err := c.Conn.Write(st.frame); err != nil {
					c.wbuf = nil
					if c.isCut() {
						return len(p), nil
					}
					return 0, err
				}
			}
		}
	}
	if len(c.wbuf) == 0 {
		c.wbuf = nil // let a large frame's buffer go
	}
	return len(p), nil
}

// unstash sends a held request whose wait ran out (its limit).
func (c *dropConn) unstash(st *stashed) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for i, x := range c.stash {
		if x == st {
			c.stash = append(c.stash[:i:i], c.stash[i+1:]...)
			c.Conn.Write(st.frame) // a failure is the connection's end: the client sees it
			return
		}
	}
}

func (c *dropConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	var tmp []byte
	for {
		if len(c.free) > 0 {
			n := copy(p, c.free)
			c.free = c.free[n:]
			return n, nil
		}
		if len(c.held) > 0 || c.isCut() {
			select {
			case <-c.gate:
			case <-c.closed:
				select {
				case <-c.gate:
				default:
					return 0, net.ErrClosed // closed by the client
				}
			}
			if len(c.held) == 0 {
				return 0, net.ErrClosed // the cut
			}
			n := copy(p, c.held)
			c.held = c.held[n:]
			return n, nil
		}
		if c.rerr != nil {
			return 0, c.rerr
		}
		if tmp == nil {
			tmp = make([]byte, max(len(p), 4096))
		}
		n, err := c.Conn.Read(tmp)
		c.rbuf = append(c.rbuf, tmp[:n]...)
		c.frames()
		if err != nil {
			c.rerr = err
		}
	}
}

// frames moves the whole reply frames of rbuf on to free or held, and
// swallows the reply it was told to lose, cutting the connection there.
// Once the connection is cut, what comes from the server goes nowhere.
func (c *dropConn) frames() {
	for len(c.rbuf) >= 4 && !c.isCut() {
		n := int(binary.BigEndian.Uint32(c.rbuf))
		if n > maxFrame || len(c.rbuf) < 4+n {
			return
		}
		frame := c.rbuf[:4+n]
		c.rbuf = c.rbuf[4+n:]
		c.rframes++
		if c.rframes == 1 {
			// The connect response. The gate opens when the client re-sends
			// its watches, or after gateFallback if it has none to send.
			c.free = append(c.free, frame...)
			time.AfterFunc(gateFallback, c.release)
			continue
		}
		if n >= 4 {
			xid := int32(binary.BigEndian.Uint32(frame[4:]))
			c.mu.Lock()
			lose := xid != xidWatchEvent && xid == c.lose
			after := xid != xidWatchEvent && xid == c.after
			c.mu.Unlock()
			if lose {
				c.cutHere()
				break
			}
			if after {
				c.held = append(c.held, frame...)
				c.cutHere()
				break
			}
		}
		c.held = append(c.held, frame...)
	}
	if len(c.rbuf) == 0 || c.isCut() {
		c.rbuf = nil
	}
}

// request is what the Dropper reads of a request frame.
type request struct {
	xid     int32
	op      int32
	path    string
	hasPath bool
	watch   bool    // a read that sets a watch
	ops     []subOp // a multi's operations
}

type subOp struct {
	op   int32
	path string
}

// pathOps are the opcodes whose request body starts with a path.
var pathOps = map[int32]bool{
	OpCreate: true, OpDelete: true, OpExists: true, OpGetData: true, OpSetData: true,
	6 /* getACL */ : true, 7 /* setACL */ : true, OpGetChildren: true, 9 /* sync */ : true,
	OpGetChildren2: true, OpCheck: true, opCreate2: true, 17 /* checkWatches */ : true,
	18 /* removeWatches */ : true, OpCreateContainer: true, 20 /* deleteContainer */ : true,
	opCreateTTL: true,
}

// watchOps are the reads whose path is followed by a watch flag.
var watchOps = map[int32]bool{OpExists: true, OpGetData: true, OpGetChildren: true, OpGetChildren2: true}

// parseRequest reads a request body (the frame without its length).
// Whatever it cannot read it leaves out.
func parseRequest(b []byte) request {
	var r request
	if len(b) < 8 {
		return r
	}
	r.xid = int32(binary.BigEndian.Uint32(b))
	r.op = int32(binary.BigEndian.Uint32(b[4:]))
	body := b[8:]
	switch {
	case r.op == OpMulti:
		r.ops = parseMulti(body)
	case pathOps[r.op]:
		var rest []byte
		r.path, rest, r.hasPath = readString(body)
		if watchOps[r.op] && r.hasPath && len(rest) > 0 {
			r.watch = rest[0] != 0
		}
	}
	return r
}

// parseMulti reads a multi's operations: each a header {type int32, done
// bool, err int32} and a body that starts with the path; a done header ends
// the list.
func parseMulti(b []byte) []subOp {
	var ops []subOp
	for len(b) >= 9 {
		typ := int32(binary.BigEndian.Uint32(b))
		done := b[4] != 0
		b = b[9:]
		if done || typ == -1 {
			break
		}
		path, rest, ok := readString(b)
		if !ok {
			break
		}
		ops = append(ops, subOp{typ, path})
		switch typ {
		case OpCreate, opCreate2, OpCreateContainer, opCreateTTL:
			// data, ACL, flags (and a TTL)
			if _, rest, ok = readString(rest); !ok {
				return ops
			}
			if rest, ok = skipACL(rest); !ok || len(rest) < 4 {
				return ops
			}
			rest = rest[4:]
			if typ == opCreateTTL {
				if len(rest) < 8 {
					return ops
				}
				rest = rest[8:]
			}
		case OpSetData:
			// data, version
			if _, rest, ok = readString(rest); !ok || len(rest) < 4 {
				return ops
			}
			rest = rest[4:]
		case OpDelete, OpCheck:
			// version
			if len(rest) < 4 {
				return ops
			}
			rest = rest[4:]
		default:
			return ops // a body we cannot skip
		}
		b = rest
	}
	return ops
}

// readString reads a jute string or buffer: an int32 length (-1: null) and
// the bytes.
func readString(b []byte) (string, []byte, bool) {
	if len(b) < 4 {
		return "", b, false
	}
	n := int(int32(binary.BigEndian.Uint32(b)))
	b = b[4:]
	if n < 0 {
		return "", b, true
	}
	if len(b) < n {
		return "", b, false
	}
	return string(b[:n]), b[n:], true
}

// skipACL skips a jute vector of ACLs: {perms int32, scheme string, id string}.
func skipACL(b []byte) ([]byte, bool) {
	if len(b) < 4 {
		return b, false
	}
	n := int(int32(binary.BigEndian.Uint32(b)))
	b = b[4:]
	for range max(n, 0) {
		if len(b) < 4 {
			return b, false
		}
		var ok bool
		if _, b, ok = readString(b[4:]); !ok {
			return b, false
		}
		if _, b, ok = readString(b); !ok {
			return b, false
		}
	}
	return b, true
}
