package session

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// attempts records, per address, the latest failed attempt to connect, and
// whether it failed in a way that no redial cures (a peer that is not
// ZooKeeper, a TLS refusal). go-zookeeper redials whatever the failure and
// keeps the failure to itself (it logs it), so without this a Connect
// could say only that its context ended, not what was tried and why each
// address failed; and it would wait for its context to end when every
// address is known to refuse.
type attempts struct {
	notify func()                 // wakes Connect on a refusal; never blocks
	hosts  interface{ Len() int } // the addresses go-zookeeper tries in turn

	mu      sync.Mutex
	order   []string         // addresses, in the order they first failed
	latest  map[string]error // address -> failure of its latest attempt
	refused map[string]bool  // address -> that failure is one no redial cures
}

func newAttempts(notify func(), hosts interface{ Len() int }) *attempts {
	return &attempts{notify: notify, hosts: hosts, latest: make(map[string]error), refused: make(map[string]bool)}
}

// failed records the failure of an attempt at addr; refused: no redial can
// cure it.
func (a *attempts) failed(addr string, err error, refused bool) {
	a.mu.Lock()
	if _, seen := a.latest[addr]; !seen {
		a.order = append(a.order, addr)
	}
	a.latest[addr] = err
	if refused {
		a.refused[addr] = true
	} else {
		delete(a.refused, addr)
	}
	a.mu.Unlock()
	if refused {
		a.notify()
	}
}

// accepted records that the server at addr answered after all.
func (a *attempts) accepted(addr string) {
	a.mu.Lock()
	delete(a.refused, addr)
	a.mu.Unlock()
}

// refusal returns, once the latest attempt at every address failed in a
// way no redial can cure, those failures; nil otherwise.
func (a *attempts) refusal() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.hosts.Len()
	if n == 0 || len(a.refused) < n {
		return nil
	}
	if n == 1 {
		return a.latest[a.order[len(a.order)-1]]
	}
	return &tried{prefix: "all " + strconv.Itoa(n) + " addresses refused: ", errs: a.list()}
}

// tried returns the latest failure at each address tried, nil when there
// was none.
func (a *attempts) tried() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.order) == 0 {
		return nil
	}
	return &tried{errs: a.list()}
}

// list is the latest failure at each address, in order (mu held).
func (a *attempts) list() []error {
	errs := make([]error, 0, len(a.order))
	for _, addr := range a.order {
		errs = append(errs, a.latest[addr])
	}
	return errs
}

// dialer wraps d so that its failures are recorded.
func (a *attempts) dialer(d zk.Dialer) zk.Dialer {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := d(network, address, timeout)
		if err != nil {
			a.failed(address, err, false)
		}
		return c, err
	}
}

// tried is the failures of several addresses, each naming its address;
// errors.Is and errors.As see each.
type tried struct {
	prefix string
	errs   []error
}

func (t *tried) Error() string {
	var b strings.Builder
	b.WriteString(t.prefix)
	for i, err := range t.errs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(err.Error())
	}
	return b.String()
}

func (t *tried) Unwrap() []error { return t.errs }
