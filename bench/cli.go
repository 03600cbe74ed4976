package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

// ServersFlag defines -zk, the ZooKeeper servers, on the default flag set:
// by default $ZK_CONNECT, as for the tests, else a local server. The
// function it returns gives the list once the flags are parsed.
func ServersFlag() func() []string {
	addr := os.Getenv("ZK_CONNECT")
	if addr == "" {
		addr = "127.0.0.1:2181"
	}
	flag.StringVar(&addr, "zk", addr, "ZooKeeper servers, comma-separated host:port (default: $ZK_CONNECT, else 127.0.0.1:2181)")
	return func() []string { return strings.Split(addr, ",") }
}

// ParseCounts parses the value of flag -name, a comma-separated list of
// positive counts; noun says what one count is in the error.
func ParseCounts(s, name, noun string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-%s: bad %s %q", name, noun, f)
		}
		out = append(out, n)
	}
	return out, nil
}

// Main ends command name's main once its flags are checked: a usage error
// exits with status 2; otherwise run gets a context that SIGINT and SIGTERM
// cancel, so that an interrupted run still deletes its nodes, and its
// error exits with status 1.
func Main(name string, usage error, run func(context.Context) error) {
	if usage != nil {
		fmt.Fprintln(os.Stderr, name+":", usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
