package session

import (
	"sync"

	"github.com/go-zookeeper/zk"
)

// redialAtOnce is go-zookeeper's HostProvider with one change: the first
// address it gives after a connection that carried the session goes
// without retryStart. go-zookeeper waits a second before it dials an
// address reported with retryStart, and fails the requests queued for the
// next connection (with ErrNoServer, asked again by the recipes); its
// providers report it once every address has been tried since the last
// success, counting the address of that success as tried. With one
// address (a standalone server, or one name for an ensemble), every drop
// of a working connection then cost a second of silence before the client
// even dialed: under connection churn a lock stood still for seconds. The
// wait is right after an attempt fails, so it comes back on the second
// attempt after a drop: a server that is down is not dialed in a loop.
type redialAtOnce struct {
	zk.HostProvider

	mu    sync.Mutex
	fresh bool // Connected since the last Next
}

func (r *redialAtOnce) Connected() {
	r.HostProvider.Connected()
	r.mu.Lock()
	r.fresh = true
	r.mu.Unlock()
}

func (r *redialAtOnce) Next() (string, bool) {
	server, retryStart := r.HostProvider.Next()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fresh {
		r.fresh = false
		return server, false
	}
	return server, retryStart
}
