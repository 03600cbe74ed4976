package session

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"
)

// lookupTimeout bounds the name lookups of hostProvider.Init, as
// go-zookeeper's DNSHostProvider does.
const lookupTimeout = 3 * time.Second

// tlsTransport is the TLS layer of a Session, under the wire watcher (which
// must see the plaintext protocol). It is also go-zookeeper's HostProvider,
// so that it knows the name each resolved address was given by.
//
// go-zookeeper redials forever whatever the failure. A failure that no redial
// can cure (the server's certificate is not trusted, the server refused
// ours, the two sides share no protocol) is recorded per address, and once
// the latest attempt at every address failed so, Connect gives up with it
// (see refusal) instead of waiting for its context to end.
type tlsTransport struct {
	base  zk.Dialer
	cfg   *tls.Config
	tried *attempts // every failure, for Connect: see refusal

	mu    sync.Mutex
	addrs []string          // resolved "ip:port", shuffled
	names map[string]string // resolved address -> host as given
	curr  int
	last  int
}

func newTLSTransport(base zk.Dialer, cfg *tls.Config) *tlsTransport {
	return &tlsTransport{base: base, cfg: cfg, names: make(map[string]string)}
}

// Init resolves the servers like go-zookeeper's DNSHostProvider and
// remembers the host name each address came from.
func (t *tlsTransport) Init(servers []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	var addrs []string
	names := make(map[string]string)
	for _, server := range servers {
		host, port, err := net.SplitHostPort(server)
		if err != nil {
			return err
		}
		ips, err := net.DefaultResolver.LookupHost(ctx, host)
		if err != nil {
			return err
		}
		for _, ip := range ips {
			a := net.JoinHostPort(ip, port)
			if _, dup := names[a]; !dup {
				names[a] = host
				addrs = append(addrs, a)
			}
		}
	}
	if len(addrs) == 0 {
		return fmt.Errorf("no hosts found for addresses %q", servers)
	}
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	t.mu.Lock()
	defer t.mu.Unlock()
	t.addrs, t.names, t.curr, t.last = addrs, names, -1, -1
	return nil
}

// Len is the number of addresses.
func (t *tlsTransport) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.addrs)
}

// Next returns the next address; retryStart is true once every address has
// been tried since the last connection.
func (t *tlsTransport) Next() (server string, retryStart bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.curr = (t.curr + 1) % len(t.addrs)
	retryStart = t.curr == t.last
	if t.last == -1 {
		t.last = 0
	}
	return t.addrs[t.curr], retryStart
}

// Connected notes a successful connection.
func (t *tlsTransport) Connected() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last = t.curr
}

// dial connects with the base dialer within timeout, then does the TLS
// handshake within timeout: go-zookeeper's one second is short for both
// over a long round trip (TLS 1.2 takes two more).
func (t *tlsTransport) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	raw, err := t.base(network, address, timeout)
	if err != nil {
		t.failed(address, err)
		return nil, err
	}
	cfg := t.cfg
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		cfg.ServerName = t.serverName(address)
	}
	c := tls.Client(raw, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := c.HandshakeContext(ctx); err != nil {
		_ = raw.Close()
		switch {
		case ctx.Err() != nil:
			err = fmt.Errorf("TLS handshake with %s not done within %v", address, timeout)
		case (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) && speaksPlaintext(address, timeout):
			// A plaintext port closes the connection on the handshake's
			// first bytes: say so, rather than "EOF".
			err = fmt.Errorf("TLS handshake with %s: %w", address, errPlaintext)
		default:
			err = fmt.Errorf("TLS handshake with %s: %w", address, err)
		}
		t.failed(address, err)
		return nil, err
	}
	return &tlsConn{Conn: c, t: t, addr: address}, nil
}

// serverName is the host the address was given as (it may be an IP).
func (t *tlsTransport) serverName(address string) string {
	t.mu.Lock()
	name, ok := t.names[address]
	t.mu.Unlock()
	if !ok {
		name, _, _ = net.SplitHostPort(address)
	}
	return name
}

// failed records the failure of an attempt at address.
func (t *tlsTransport) failed(address string, err error) {
	t.tried.failed(address, err, tlsRefusal(err))
}

// accepted records that the server at address answered over TLS.
func (t *tlsTransport) accepted(address string) { t.tried.accepted(address) }

// errPlaintext: a TLS handshake met a port that speaks ZooKeeper in
// plaintext.
var errPlaintext = errors.New("the server closed the connection, and answers ZooKeeper in plaintext there: a clientPort, where TLS needs the servers' secureClientPort")

// speaksPlaintext reports whether the server at addr answers a
// four-letter word in plaintext, as a ZooKeeper client port does (even one
// whose whitelist refuses the word says so).
func speaksPlaintext(addr string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), max(timeout, time.Second))
	defer cancel()
	answer, _ := prober{}.ask(ctx, addr, "srvr")
	return strings.Contains(answer, "Zookeeper version") || strings.Contains(answer, "whitelist")
}

// tlsRefusal reports whether err is a TLS failure that redialing cannot
// cure: a certificate this side does not accept, an alert from the server
// (it refused our certificate, or found no protocol or cipher suite in
// common), or a server that does not speak TLS at all. Network errors
// (nothing listening yet, timeouts, resets, EOF) are not, but for a reset
// or EOF from a port that speaks plaintext ZooKeeper (errPlaintext).
func tlsRefusal(err error) bool {
	if _, ok := as[*tls.CertificateVerificationError](err); ok {
		return true
	}
	if _, ok := as[x509.UnknownAuthorityError](err); ok {
		return true
	}
	if _, ok := as[x509.CertificateInvalidError](err); ok {
		return true
	}
	if _, ok := as[x509.HostnameError](err); ok {
		return true
	}
	if _, ok := as[tls.RecordHeaderError](err); ok {
		return true
	}
	// crypto/tls reports an alert the server sent as a "remote error", and
	// one it sent itself because the handshake cannot go on as a "local
	// error".
	if op, ok := as[*net.OpError](err); ok && (op.Op == "remote error" || op.Op == "local error") {
		return true
	}
	return errors.Is(err, errPlaintext)
}

// as is errors.As with the target's type as a parameter, as errors.AsType
// does from Go 1.26 on (the module supports Go 1.25).
func as[T error](err error) (T, bool) {
	var target T
	ok := errors.As(err, &target)
	return target, ok
}

// tlsConn is a connection whose handshake is done. With TLS 1.3 the server
// checks the client's certificate after the client has finished its
// handshake, so a refusal arrives with the first read: until data has been
// read, a read error is recorded like a handshake failure.
type tlsConn struct {
	*tls.Conn
	t      *tlsTransport
	addr   string
	proven atomic.Bool // the server sent data
}

func (c *tlsConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.proven.Load() {
		switch {
		case n > 0:
			c.proven.Store(true)
			c.t.accepted(c.addr)
		case err != nil:
			c.t.failed(c.addr, fmt.Errorf("TLS with %s: %w", c.addr, err))
		}
	}
	return n, err
}
