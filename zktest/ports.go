package zktest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Ports are picked at random below the kernel's ephemeral range, not with
// "listen on :0": a port from the ephemeral range, once its server is killed,
// may be taken as the source port of some outgoing connection, and then
// [Cluster.Restart] could not bind it again.
const lowestPort = 12000

// ports remembers the ports handed out by this process so that two servers
// of this test binary never get the same one. Guarded by portsMu.
var (
	portsMu sync.Mutex
	ports   = map[int]bool{}
)

// errNoFreePort is returned when no free port could be found.
var errNoFreePort = errors.New("zktest: no free TCP port on 127.0.0.1")

// freePorts returns n distinct TCP ports that are free on 127.0.0.1 now and
// were not handed out before by this process.
func freePorts(n int) ([]int, error) {
	hi := ephemeralLow()
	portsMu.Lock()
	defer portsMu.Unlock()
	var got []int
	for tries := 0; len(got) < n; tries++ {
		if tries > 1000 {
			return nil, errNoFreePort
		}
		var p int
		if hi-lowestPort >= 1000 {
			p = lowestPort + rand.IntN(hi-lowestPort)
		} else {
			// Odd ephemeral range: let the kernel choose.
			var err error
			if p, err = kernelPort(); err != nil {
				return nil, err
			}
		}
		if ports[p] || !portFree(p) {
			continue
		}
		ports[p] = true
		got = append(got, p)
	}
	return got, nil
}

// ephemeralLow returns the first port of the kernel's ephemeral range
// (32768 when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return lo
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	return l.Close() == nil
}

func kernelPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errNoFreePort, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
