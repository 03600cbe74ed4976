package zktest

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Freezer is a dialer for zkrecipes.WithDialer (or zk.WithDialer) whose
// connections can be frozen: a network partition between one client and the
// servers, for real. While frozen, what the client writes is dropped, what
// the servers send is read and dropped (read deadlines still apply, as on a
// silent network), and new dials fail. The servers then hear nothing from
// the session and expire it; the client hears nothing and must notice.
type Freezer struct {
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

// ErrFrozen is returned by Dial while frozen.
var ErrFrozen = errors.New("zktest: network frozen")

// Dial has the signature of zk.Dialer.
func (f *Freezer) Dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	if f.frozen.Load() {
		time.Sleep(timeout) // a partitioned dial hangs, then fails
		return nil, ErrFrozen
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	fc := &frozenConn{Conn: c, f: f}
	f.mu.Lock()
	f.conns = append(f.conns, fc)
	f.mu.Unlock()
	return fc, nil
}

// Freeze cuts every connection made through f, now and until Thaw.
func (f *Freezer) Freeze() { f.frozen.Store(true) }

// Thaw lets traffic through again.
func (f *Freezer) Thaw() { f.frozen.Store(false) }

type frozenConn struct {
	net.Conn
	f *Freezer
}

func (c *frozenConn) Write(p []byte) (int, error) {
	if c.f.frozen.Load() {
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *frozenConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if err != nil || !c.f.frozen.Load() {
			return n, err
		}
	}
}
