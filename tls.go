package zkrecipes

import (
	"crypto/tls"
	"fmt"
)

// WithTLS makes the Session a TLS client of ZooKeeper's secureClientPort:
// give Connect the servers' secure addresses. cfg is cloned when the option
// is applied. The fields that matter most:
//
//   - RootCAs: the CA that signed the servers' certificates (nil: the
//     system's roots).
//   - ServerName: the name the servers' certificates must be valid for.
//     When empty, each server's is the host of its address as given to
//     Connect: a name, or an IP address that the certificate must then list
//     as an IP subject alternative name. Set it when every server presents
//     one certificate for one name.
//   - Certificates (or GetClientCertificate): the client certificate, which
//     a server whose ssl.clientAuth is "need" (ZooKeeper's default) or
//     "want" asks for. The server then also authenticates the session as
//     x509 with the certificate's subject, which ACLs can name:
//     zk.ACL{Perms: zk.PermAll, Scheme: "x509", ID: "CN=app"}.
//
// Go's default versions, TLS 1.2 and 1.3, work with ZooKeeper 3.8's
// defaults (TLS 1.2; TLS 1.3 takes ssl.enabledProtocols and TLS 1.3 cipher
// suites in ssl.ciphersuites on the server). TLS runs over the connections
// of the dialer of [WithDialer] (default: net.DialTimeout), and the
// handshake is part of each dial, with the dial's timeout (go-zookeeper's
// one second) after the connection is made; an attempt that takes longer
// fails and is retried.
//
// A failure that no retry can cure does not leave Connect waiting for its
// context to end: once the latest attempt at every server's address failed
// because this side does not trust the server's certificate (the error
// wraps a *tls.CertificateVerificationError or an x509 error), the server
// refused ours or shares no protocol or cipher suite with us (the server's
// TLS alert, a *net.OpError whose Op is "remote error"), or the address
// does not speak TLS (a plaintext ZooKeeper port, which closes the
// connection and is then found to answer a four-letter word in plaintext),
// Connect returns that error at once. Other failures (nothing listening
// yet, timeouts, resets) are retried until ctx ends, and Connect's error
// then names the latest at each address. Once the Session is
// established, a reconnection that fails is retried like any other, and the
// Session ends by the usual rules.
//
// A nil cfg is an error wrapping [ErrInvalidArgument].
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) {
		if cfg == nil {
			o.errs = append(o.errs, fmt.Errorf("zkrecipes: %w: nil TLS config", ErrInvalidArgument))
			return
		}
		o.tls = cfg.Clone()
	}
}
