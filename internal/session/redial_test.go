package session

import (
	"testing"

	"github.com/go-zookeeper/zk"
)

// After a connection that carried the session drops, the address it was on
// is dialed again at once, even when it is the only one; a failed attempt
// brings go-zookeeper's wait back, as does a round of failed attempts over
// several addresses.
func TestRedialAtOnce(t *testing.T) {
	type step struct {
		connected bool // Connected before Next
		retry     bool // what Next must say
	}
	for _, c := range []struct {
		name  string
		addrs []string
		steps []step
	}{
		{"one address", []string{"127.0.0.1:1"}, []step{
			{false, false}, // the first dial
			{true, false},  // the connection dropped: at once (go-zookeeper's provider: wait)
			{false, true},  // that attempt failed: wait
			{false, true},
			{true, false},
		}},
		{"two addresses", []string{"127.0.0.1:1", "127.0.0.1:2"}, []step{
			{false, false},
			{true, false},
			{false, true}, // the other failed, and the round is back where it began
			{true, false},
			{true, false},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &redialAtOnce{HostProvider: zk.NewDNSHostProvider()}
			if err := r.Init(c.addrs); err != nil {
				t.Fatal(err)
			}
			for i, s := range c.steps {
				if s.connected {
					r.Connected()
				}
				if _, retry := r.Next(); retry != s.retry {
					t.Errorf("step %d: Next() says retryStart %t, want %t", i, retry, s.retry)
				}
			}
		})
	}
}
