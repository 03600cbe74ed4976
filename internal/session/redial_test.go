package session

import (
	"testing"

	"github.com/go-zookeeper/zk"
)

// hosts is a HostProvider over fixed addresses, with the rule of
// go-zookeeper's DNSHostProvider: retryStart once every address has been
// tried since the last success.
type hosts struct {
	addrs      []string
	curr, last int
}

func (h *hosts) Init([]string) error { h.curr, h.last = -1, -1; return nil }
func (h *hosts) Len() int            { return len(h.addrs) }
func (h *hosts) Connected()          { h.last = h.curr }
func (h *hosts) Next() (string, bool) {
	h.curr = (h.curr + 1) % len(h.addrs)
	retry := h.curr == h.last
	if h.last == -1 {
		h.last = 0
	}
	return h.addrs[h.curr], retry
}

var _ zk.HostProvider = (*hosts)(nil)

// After a connection that carried the session drops, the address it was on
// is dialed again at once, even when it is the only one; a failed attempt
// brings the wait back.
func TestRedialAtOnce(t *testing.T) {
	type step struct {
		connected bool // Connected before Next
		server    string
		retry     bool
	}
	for _, c := range []struct {
		name  string
		addrs []string
		steps []step
	}{
		{"one address", []string{"a"}, []step{
			{false, "a", false}, // the first dial
			{true, "a", false},  // the connection dropped: at once
			{false, "a", true},  // that attempt failed: wait
			{false, "a", true},
			{true, "a", false},
		}},
		{"two addresses", []string{"a", "b"}, []step{
			{false, "a", false},
			{true, "b", false},
			{false, "a", true}, // b failed, a is where the round began
			{true, "b", false},
			{true, "a", false},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &redialAtOnce{HostProvider: &hosts{addrs: c.addrs}}
			if err := r.Init(c.addrs); err != nil {
				t.Fatal(err)
			}
			for i, s := range c.steps {
				if s.connected {
					r.Connected()
				}
				server, retry := r.Next()
				if server != s.server || retry != s.retry {
					t.Errorf("step %d: Next() = %s, %t; want %s, %t", i, server, retry, s.server, s.retry)
				}
			}
		})
	}
}
