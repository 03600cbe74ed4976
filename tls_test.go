package zkrecipes_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// prompt bounds how long a Connect that no retry can help may take: a
// handful of one-second connection attempts at worst, far less than the
// generous context the tests give it.
const prompt = 10 * time.Second

// TestTLS runs against a ZooKeeper 3.8 whose secureClientPort needs a
// client certificate and offers TLS 1.2 and 1.3 (ZooKeeper's default is 1.2
// only; 1.3 also takes TLS 1.3 cipher suites).
func TestTLS(t *testing.T) {
	files := zktest.TLSFiles(t)
	srv := zktest.StartPrivate(t,
		zktest.WithTLS(files, "need"),
		zktest.WithConfig("ssl.protocol", "TLSv1.3"),
		zktest.WithConfig("ssl.enabledProtocols", "TLSv1.3,TLSv1.2"),
		zktest.WithConfig("ssl.ciphersuites", "TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384,"+
			"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"),
	)
	zktest.CheckGoroutines(t)
	addr := srv.SecureAddr()
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	// A cold JVM's first handshakes may take longer than the one second
	// go-zookeeper allows a dial, and be retried: warm it up, so that the
	// times measured below are the client's.
	require.NoError(t, connect(t, []string{addr}, zkrecipes.WithTLS(files.ClientConfig())).Close())

	versions := []struct {
		name string
		v    uint16
	}{{"TLS1.2", tls.VersionTLS12}, {"TLS1.3", tls.VersionTLS13}}

	for _, ver := range versions {
		// A Session over TLS works end to end, and the wire watcher,
		// above TLS, still reads the protocol: the granted timeout, the
		// session id, the fencing token of a create.
		t.Run("EndToEnd/"+ver.name, func(t *testing.T) {
			cfg := files.ClientConfig()
			cfg.MinVersion, cfg.MaxVersion = ver.v, ver.v
			var seen tls.ConnectionState
			cfg.VerifyConnection = func(cs tls.ConnectionState) error { seen = cs; return nil }
			// A name, not an IP: the certificate is checked for it.
			s := connect(t, []string{"localhost:" + port}, zkrecipes.WithTLS(cfg),
				zkrecipes.WithSessionTimeout(500*time.Millisecond))
			assert.Equal(t, ver.v, seen.Version)
			assert.Equal(t, "localhost", seen.ServerName, "ServerName defaults to the host as given")
			require.Equal(t, time.Second, s.Timeout(), "the server grants 1s at least")
			require.NotZero(t, s.ID())
			require.Equal(t, s.ID(), s.Conn().SessionID())

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			path := zktest.Path(t, "/tls")
			m, err := zklock.NewMutex(s, path)
			require.NoError(t, err)
			l, err := m.Lock(ctx)
			require.NoError(t, err)
			require.Positive(t, l.Token())
			other, err := zklock.NewMutex(connect(t, []string{addr}, zkrecipes.WithTLS(files.ClientConfig())), path)
			require.NoError(t, err)
			_, err = other.TryLock(ctx)
			require.ErrorIs(t, err, zklock.ErrLocked)
			require.NoError(t, l.Unlock(ctx))
			l2, err := other.TryLock(ctx)
			require.NoError(t, err)
			require.Greater(t, l2.Token(), l.Token())
			require.NoError(t, l2.Unlock(ctx))

			// The server authenticated the session by its certificate:
			// an x509 ACL naming its subject lets it in.
			acl := zk.ACL{Perms: zk.PermAll, Scheme: "x509", ID: "CN=zktest client"}
			_, err = s.Conn().Create(path+"-x509", []byte("x"), 0, []zk.ACL{acl})
			require.NoError(t, err)
			data, _, err := s.Conn().Get(path + "-x509")
			require.NoError(t, err)
			require.Equal(t, "x", string(data))
			require.NoError(t, s.Conn().Delete(path+"-x509", -1))
		})
	}

	// refused connects with cfg and returns its error, which must come
	// promptly, not when the context ends.
	refused := func(t *testing.T, servers []string, cfg *tls.Config) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		begin := time.Now()
		s, err := zkrecipes.Connect(ctx, servers, zkrecipes.WithTLS(cfg))
		took := time.Since(begin)
		if s != nil {
			s.Close()
		}
		require.Error(t, err)
		t.Logf("after %v: %v", took.Round(time.Millisecond), err)
		require.NotErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, took, prompt)
		return err
	}

	t.Run("UnknownCA", func(t *testing.T) {
		cfg := files.ClientConfig()
		cfg.RootCAs = x509.NewCertPool() // trusts nobody
		err := refused(t, []string{addr}, cfg)
		var unknown x509.UnknownAuthorityError
		require.ErrorAs(t, err, &unknown)
		var verify *tls.CertificateVerificationError
		require.ErrorAs(t, err, &verify)
	})

	t.Run("WrongName", func(t *testing.T) {
		cfg := files.ClientConfig()
		cfg.ServerName = "zookeeper.example.com"
		err := refused(t, []string{addr}, cfg)
		var hostname x509.HostnameError
		require.ErrorAs(t, err, &hostname)
	})

	// Connect gives up once every server has refused; a server that cannot
	// be reached (yet) is waited for. The second server here is the same
	// one reached through a dialer, or nothing at all.
	twoServers := func(second string) ([]string, zkrecipes.Option) {
		alias := "127.0.0.2:" + port
		return []string{addr, alias}, zkrecipes.WithDialer(func(network, a string, timeout time.Duration) (net.Conn, error) {
			if a == alias {
				a = second
			}
			return net.DialTimeout(network, a, timeout)
		})
	}
	t.Run("UnknownCA/EveryServer", func(t *testing.T) {
		cfg := files.ClientConfig()
		cfg.RootCAs = x509.NewCertPool()
		cfg.ServerName = "localhost" // for 127.0.0.2 too: only the CA is wrong
		servers, dialer := twoServers(addr)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		begin := time.Now()
		_, err := zkrecipes.Connect(ctx, servers, zkrecipes.WithTLS(cfg), dialer)
		t.Logf("after %v: %v", time.Since(begin).Round(time.Millisecond), err)
		require.Less(t, time.Since(begin), prompt)
		var unknown x509.UnknownAuthorityError
		require.ErrorAs(t, err, &unknown)
		require.Contains(t, err.Error(), "all 2 addresses")
	})
	t.Run("UnknownCA/OneServerDown", func(t *testing.T) {
		cfg := files.ClientConfig()
		cfg.RootCAs = x509.NewCertPool()
		servers, dialer := twoServers("127.0.0.1:1") // nothing listens there
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := zkrecipes.Connect(ctx, servers, zkrecipes.WithTLS(cfg), dialer)
		t.Log(err)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Contains(t, err.Error(), "tried ")
		require.ErrorIs(t, err, syscall.ECONNREFUSED, "the down server's failure is named too")
	})

	// The server refuses a client without a certificate. With TLS 1.2 it
	// says so in the handshake; with TLS 1.3 only after the client has
	// finished its part, in answer to the first read.
	for _, ver := range versions {
		t.Run("NoClientCert/"+ver.name, func(t *testing.T) {
			cfg := files.ClientConfig()
			cfg.Certificates = nil
			cfg.MinVersion, cfg.MaxVersion = ver.v, ver.v
			err := refused(t, []string{addr}, cfg)
			var op *net.OpError
			require.ErrorAs(t, err, &op, "want the server's TLS alert")
			require.Equal(t, "remote error", op.Op)
			require.Contains(t, err.Error(), "certificate")
		})
	}

	// A plaintext port just closes the connection; it answers a
	// four-letter word in plaintext, so no retry can help: Connect says so
	// at once.
	t.Run("PlaintextPort", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		begin := time.Now()
		_, err := zkrecipes.Connect(ctx, srv.Addrs(), zkrecipes.WithTLS(files.ClientConfig()))
		t.Logf("after %v: %v", time.Since(begin).Round(time.Millisecond), err)
		require.Less(t, time.Since(begin), prompt)
		require.NotErrorIs(t, err, context.DeadlineExceeded)
		require.True(t, strings.Contains(err.Error(), "TLS handshake with "+srv.Addr()+": the server closed the connection, and answers ZooKeeper in plaintext"), "%v", err)
	})
}

func TestWithTLSNil(t *testing.T) {
	_, err := zkrecipes.Connect(context.Background(), []string{"127.0.0.1:1"}, zkrecipes.WithTLS(nil))
	require.ErrorIs(t, err, zkrecipes.ErrInvalidArgument)
	require.Contains(t, err.Error(), "nil TLS config")
}
