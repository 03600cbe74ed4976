package zktest_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes/zktest"
)

// An isolated leader loses its followers: the other two elect a leader and
// take writes while it cannot serve; once healed it follows and has the
// writes it missed.
func TestIsolateLeaderThenHeal(t *testing.T) {
	noLeaks(t)
	c := zktest.StartLinkedCluster(t, 3)
	old := c.WaitForLeader()
	c.Isolate(old)
	require.Equal(t, []int{old}, c.Isolated())

	others := slices.DeleteFunc([]int{0, 1, 2}, func(i int) bool { return i == old })
	var addrs []string
	for _, i := range others {
		addrs = append(addrs, c.Addr(i))
	}
	conn := connect(t, addrs, 10*time.Second)
	path := "/isolated-" + time.Now().Format("150405.000000")
	retry(t, "create on the majority side", func() (string, error) {
		return conn.Create(path, []byte("x"), 0, zk.WorldACL(zk.PermAll))
	})
	leader := retry(t, "a leader on the majority side", func() (int, error) {
		l := c.Leader()
		if l < 0 || l == old {
			return 0, errNotYet
		}
		return l, nil
	})
	require.NotEqual(t, old, leader)
	// Cut off from both, the old leader serves no one (it would, were any
	// election connection getting through).
	retry(t, "the isolated server stops serving", func() (string, error) {
		out, err := zktest.FourLetter(c.Addr(old), "srvr")
		if err == nil && !strings.Contains(out, "not currently serving") {
			return "", errNotYet
		}
		return out, nil
	})

	c.Heal()
	require.Empty(t, c.Isolated())
	require.NotEqual(t, -1, c.WaitForLeader())
	alone := connect(t, []string{c.Addr(old)}, 10*time.Second)
	retry(t, "read the missed write on the healed server", func() ([]byte, error) {
		if _, err := alone.Sync(path); err != nil {
			return nil, err
		}
		b, _, err := alone.Get(path)
		return b, err
	})
}

var errNotYet = zk.ErrNoServer
