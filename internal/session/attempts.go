package session

import (
	"net"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// attempts records the latest failed connection attempt. go-zookeeper
// redials whatever the failure and keeps the failure to itself (it logs
// it), so without this a Connect whose context ends first could say only
// that the context ended, not why no connection was made: nothing listens
// there, a TLS handshake failed, and so on.
type attempts struct {
	mu   sync.Mutex
	last error
}

// failed records the failure of an attempt.
func (a *attempts) failed(err error) {
	a.mu.Lock()
	a.last = err
	a.mu.Unlock()
}

// latest is the latest failure recorded; nil when there was none.
func (a *attempts) latest() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

// dialer wraps d so that its failures are recorded.
func (a *attempts) dialer(d zk.Dialer) zk.Dialer {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := d(network, address, timeout)
		if err != nil {
			a.failed(err)
		}
		return c, err
	}
}
