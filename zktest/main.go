package zktest

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

// Main runs a test binary's tests and examples: call it from TestMain, as
// os.Exit(zktest.Main(m)).
//
// Examples cannot call [Start]: they find ZooKeeper in ZK_CONNECT, as a
// program of a user's would. Main starts the shared server first (from the
// sources [Start] uses) and puts its address in ZK_CONNECT, so examples and
// tests use the same server. With no server to be had it skips the examples
// (-skip '^Example') and says so, as Start skips tests.
func Main(m *testing.M) int { return MainFrom(m, nil) }

// MainFrom is [Main], with the shared server started as [StartFrom] starts
// it: ZK_CONNECT, else src, else a local installation. Every Start and
// StartFrom of the test binary then returns that server.
func MainFrom(m *testing.M, src Source) int {
	flag.Parse()
	shared.mu.Lock()
	if !shared.started {
		shared.srv, shared.skip, shared.err = startShared(src)
		shared.started = true
	}
	srv, skip, err := shared.srv, shared.skip, shared.err
	shared.mu.Unlock()
	switch {
	case err != nil:
		fmt.Fprintf(os.Stderr, "zktest: %v\n", err)
		return 1
	case skip != "":
		fmt.Fprintf(os.Stderr, "zktest: examples skipped: %s\n", skip)
		pattern := "^Example"
		if cur := flag.Lookup("test.skip").Value.String(); cur != "" {
			pattern += "|" + cur
		}
		if err := flag.Set("test.skip", pattern); err != nil {
			fmt.Fprintf(os.Stderr, "zktest: %v\n", err)
			return 1
		}
	default:
		fmt.Fprintf(os.Stderr, "zktest: shared ZooKeeper %v, ZooKeeper %s (%s)\n", srv.addrs, srv.version, srv.from)
		os.Setenv("ZK_CONNECT", strings.Join(srv.addrs, ","))
	}
	return m.Run()
}
