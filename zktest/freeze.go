package zktest

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Freezer is a dialer for zkrecipes.WithDialer (or zk.WithDialer) whose
// connections can be frozen: a network partition between one client and the
// servers, for real. While frozen, what the client writes is dropped, what
// the servers send is read and dropped (read deadlines still apply, as on a
// silent network), and new dials fail. The servers then hear nothing from
// the session and expire it; the client hears nothing and must notice.
//
// Stall is the other way to stop traffic: nothing is dropped, everything
// waits, as for a client process stopped with SIGSTOP.
type Freezer struct {
	mu     sync.Mutex
	state  freezeState
	thawed chan struct{} // closed by Thaw; what waits on the network waits on it
}

type freezeState int

const (
	flowing freezeState = iota
	frozen
	stalled
)

// ErrFrozen is returned by Dial while frozen.
var ErrFrozen = errors.New("zktest: network frozen")

// Dial has the signature of zk.Dialer.
func (f *Freezer) Dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	switch st, thawed := f.now(); st {
	case frozen:
		// A partitioned dial hangs, then fails; Thaw ends the hang at
		// once, so that a test that thaws leaves no dial behind.
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-t.C:
		case <-thawed:
		}
		return nil, ErrFrozen
	case stalled:
		<-thawed
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &frozenConn{Conn: c, f: f}, nil
}

// Freeze cuts every connection made through f, now and until Thaw.
func (f *Freezer) Freeze() { f.set(frozen) }

// Stall stops every connection made through f, now and until Thaw, without
// losing a byte: what the client writes waits to be sent, what the servers
// send waits (in the kernel) to be read, and new dials wait. Thaw then lets
// all of it through at once: the network side of a client process stopped
// with SIGSTOP and continued, whose session the ensemble may have expired
// meanwhile (the client then reads what the server sent before it closed
// the connection).
func (f *Freezer) Stall() { f.set(stalled) }

// Thaw lets traffic through again: it ends a freeze or a stall, and fails
// at once a dial that hangs on the frozen network.
func (f *Freezer) Thaw() { f.set(flowing) }

func (f *Freezer) set(st freezeState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == flowing && st != flowing {
		f.thawed = make(chan struct{})
	}
	if f.state != flowing && st == flowing {
		close(f.thawed)
	}
	f.state = st
}

// now returns the state, and the channel Thaw closes.
func (f *Freezer) now() (freezeState, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state, f.thawed
}

type frozenConn struct {
	net.Conn
	f *Freezer
}

func (c *frozenConn) Write(p []byte) (int, error) {
	switch st, thawed := c.f.now(); st {
	case frozen:
		return len(p), nil
	case stalled:
		<-thawed
		// What arrived meanwhile is read first (a write to a connection
		// the server closed fails, and go-zookeeper then closes it
		// unread), and the write goes whatever deadline was set: a
		// process that wakes acts before its timers tell it so.
		time.Sleep(stallGrace)
		if err := c.Conn.SetWriteDeadline(time.Now().Add(stallGrace)); err != nil {
			return 0, err
		}
	}
	return c.Conn.Write(p)
}

func (c *frozenConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		switch st, thawed := c.f.now(); st {
		case frozen:
			if err == nil {
				continue // dropped
			}
		case stalled:
			<-thawed // what was read waits with the rest
			if n == 0 && isTimeout(err) {
				// The deadline passed while stalled. A stopped process
				// that wakes reads first what reached its socket
				// meanwhile: look once more, briefly, before saying so.
				if c.Conn.SetReadDeadline(time.Now().Add(stallGrace)) == nil {
					if m, rerr := c.Conn.Read(p); m > 0 || !isTimeout(rerr) {
						return m, rerr
					}
				}
			}
		}
		return n, err
	}
}

// stallGrace is how long a read that timed out during a stall looks for
// what arrived meanwhile, once thawed, and how long a write held by the
// stall may take: data in the socket's buffers moves at once.
const stallGrace = 20 * time.Millisecond

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
