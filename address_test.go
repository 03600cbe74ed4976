package zkrecipes_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
)

// Connect reads its servers as the Java client reads a connect string.
func TestParseServers(t *testing.T) {
	for _, tc := range []struct {
		in     []string
		addrs  []string
		chroot string
	}{
		{[]string{"localhost"}, []string{"localhost:2181"}, ""},
		{[]string{"zk1:2182", "zk2"}, []string{"zk1:2182", "zk2:2181"}, ""},
		{[]string{"zk1:2181,zk2:2182/app"}, []string{"zk1:2181", "zk2:2182"}, "/app"},
		{[]string{"zk1:2181", " zk2:2182/app/sub"}, []string{"zk1:2181", "zk2:2182"}, "/app/sub"},
		{[]string{"zk1/"}, []string{"zk1:2181"}, ""},
		{[]string{"[::1]:2183", "[fe80::1%eth0]"}, []string{"[::1]:2183", "[fe80::1%eth0]:2181"}, ""},
		{[]string{"10.0.0.1"}, []string{"10.0.0.1:2181"}, ""},
	} {
		addrs, chroot, errs := zkrecipes.ParseServers(tc.in)
		require.Empty(t, errs, "%q", tc.in)
		require.Equal(t, tc.addrs, addrs, "%q", tc.in)
		require.Equal(t, tc.chroot, chroot, "%q", tc.in)
	}
}

// A server address that cannot work fails Connect at once, with an error
// for errors.Is(err, ErrInvalidArgument) that names it, rather than after
// its context (go-zookeeper would try "host:2181/app" as a port until
// then). The context here has a minute: an error that is not
// ErrInvalidArgument is a Connect that waited for it.
func TestConnectRejectsBadAddresses(t *testing.T) {
	for _, tc := range []struct {
		servers []string
		names   string // in the error
	}{
		{nil, "no ZooKeeper servers"},
		{[]string{""}, "empty server address"},
		{[]string{"zk1:2181,,zk2:2181"}, "empty server address"},
		{[]string{"127.0.0.1:abc"}, `"127.0.0.1:abc"`},
		{[]string{"127.0.0.1:0"}, `"127.0.0.1:0"`},
		{[]string{"127.0.0.1:65536"}, `"127.0.0.1:65536"`},
		{[]string{"127.0.0.1:"}, `"127.0.0.1:"`},
		{[]string{":2181"}, "no host"},
		{[]string{"::1"}, "brackets"},
		{[]string{"[::1"}, "']'"},
		{[]string{"[zk1]:2181"}, "not an IPv6 address"},
		{[]string{"zk://zk1:2181"}, "a URL"},
		{[]string{"zk1:2181/app", "zk2:2181"}, "may only follow the last address"},
		{[]string{"zk1:2181/app/"}, "chroot"},
		{[]string{"zk1:2181/app//x"}, "chroot"},
		{[]string{"/app"}, "no host before the chroot"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := zkrecipes.Connect(ctx, tc.servers)
		cancel()
		require.ErrorIs(t, err, zkrecipes.ErrInvalidArgument, "%q", tc.servers)
		require.ErrorContains(t, err, tc.names, "%q", tc.servers)
	}
}

// WithChroot takes a path; with a chroot in the servers' addresses too,
// the two must be the same.
func TestWithChrootChecks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, opt := range []zkrecipes.Option{zkrecipes.WithChroot("app"), zkrecipes.WithChroot(""), zkrecipes.WithChroot("/app/")} {
		_, err := zkrecipes.Connect(ctx, []string{"127.0.0.1:2181"}, opt)
		require.ErrorIs(t, err, zkrecipes.ErrInvalidArgument)
		require.ErrorIs(t, err, zkrecipes.ErrInvalidPath)
	}
	_, err := zkrecipes.Connect(ctx, []string{"127.0.0.1:2181/a"}, zkrecipes.WithChroot("/b"))
	require.ErrorIs(t, err, zkrecipes.ErrInvalidArgument)
	require.ErrorContains(t, err, `"/a"`)
	require.ErrorContains(t, err, `"/b"`)
	require.False(t, errors.Is(err, context.DeadlineExceeded))
}
