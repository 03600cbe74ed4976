package zkrecipes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/go-zookeeper/zk"
	"go.opentelemetry.io/otel"

	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/telemetry"
)

// Session is one ZooKeeper session. It never outlives that session: once the
// ensemble expires it, the client loses touch with the ensemble for too long,
// or Close is called, Done is closed, Err says why, and the connection is
// closed so it cannot quietly come back as a different session. Connect a new
// Session to go on.
//
// A short disconnect that the session survives (a server restart, a leader
// election) is not an end: the Session reconnects and keeps its nodes, and
// the recipes on it carry on.
//
// How early: the Session declares itself lost once 80% of the negotiated
// timeout has passed since the latest request that the ensemble's leader,
// the one server that expires sessions, provably heard. A reply from the
// server the client is connected to is not such a proof when that server
// is a follower: cut off from the leader, a follower goes on answering
// pings and reads on its own. Proof needs a chain of replies that passed
// through the leader (a read, one leader ping later a sync, then a write);
// a busy session's own traffic makes them, an idle one sends one every
// second or few (docs/loss-bound.md). So its users are
// told at least a fifth of the timeout before any leader can expire it and
// hand its locks to anyone else, whichever server it is connected to.
//
// A Session is safe for concurrent use by any number of goroutines and
// recipes.
type Session struct {
	handle // the plumbing, for this module's recipes (session.Of)
}

// handle is unexported, so that the embedded field is too.
type handle = session.Handle

// Connect dials the ensemble and waits until a session is established, or ctx
// ends.
//
// servers are read as the Java client reads a connect string: each is
// "host", "host:port" or "[v6addr]:port" (2181 when no port is given), or
// several of these joined by commas, and the last may be followed by a
// chroot, "zk1:2181,zk2:2181/app", as WithChroot. An address that cannot
// be read fails Connect at once, with an error wrapping ErrInvalidArgument
// that names it. Servers that cannot be reached are tried again while ctx
// lives (they may be starting); if it ends first, the error wraps its cause
// and the failure of the latest attempt at each address tried ("connect to
// 127.0.0.1:1: context deadline exceeded (tried dial tcp 127.0.0.1:1:
// connect: connection refused)"). A peer that answers, but not as a
// ZooKeeper server (another protocol; a plaintext port to WithTLS), will
// not become one: once the latest attempt at every address failed so (or
// as WithTLS tells), Connect returns at once, naming each.
func Connect(ctx context.Context, servers []string, opts ...Option) (*Session, error) {
	o := options{timeout: 10 * time.Second, logger: slog.New(slog.DiscardHandler), dialer: net.DialTimeout, loss: session.LossFraction}
	for _, opt := range opts {
		opt(&o)
	}
	addrs, root, errs := parseServers(servers)
	o.errs = append(o.errs, errs...)
	switch {
	case o.chroot == "":
		o.chroot = root
	case root != "" && root != o.chroot:
		o.errs = append(o.errs, fmt.Errorf("zkrecipes: %w: chroot %q in the servers' addresses and %q from WithChroot differ", ErrInvalidArgument, root, o.chroot))
	}
	if err := errors.Join(o.errs...); err != nil {
		return nil, err
	}
	if o.acl == nil {
		o.acl = zk.WorldACL(zk.PermAll)
		if len(o.auth) > 0 {
			o.acl = zk.AuthACL(zk.PermAll)
		}
	}
	if o.meters == nil {
		o.meters = otel.GetMeterProvider()
	}
	if o.tracers == nil {
		o.tracers = otel.GetTracerProvider()
	}
	s, err := session.Connect(ctx, session.Config{
		Servers: addrs, Chroot: o.chroot, Timeout: o.timeout, Logger: o.logger,
		Auth: o.auth, ACL: o.acl, Dialer: o.dialer, Loss: o.loss, Tick: o.tick, TLS: o.tls,
		Telemetry: telemetry.New(telemetry.Config{Meters: o.meters, Tracers: o.tracers, PendingMaxAge: o.pending}),
		Ends:      ends(),
	})
	if err != nil {
		return nil, fmt.Errorf("zkrecipes: %w", err)
	}
	return &Session{session.NewHandle(s)}, nil
}

// Conn returns the underlying client, for plain reads and writes. Do not
// Close it: close the Session. A write through it that fails with an error
// for which IsAmbiguous is true may still be applied.
func (s *Session) Conn() *zk.Conn { return s.inner().Conn() }

// ID is the ZooKeeper session id this Session is bound to.
func (s *Session) ID() int64 { return s.inner().ID() }

// Timeout is the session timeout the ensemble granted.
func (s *Session) Timeout() time.Duration { return s.inner().Timeout() }

// Done is closed once the session is over for good.
func (s *Session) Done() <-chan struct{} { return s.inner().Done() }

// Err is nil while the session lives; then ErrSessionExpired, ErrSessionLost
// or ErrClosed (possibly wrapped with detail).
func (s *Session) Err() error { return s.inner().Err() }

// Close ends the session: the ensemble deletes its ephemeral nodes at once (if
// it can be reached), every lease made on it ends, and Close waits for the
// Session's own goroutines to stop. It is idempotent.
func (s *Session) Close() error { return s.inner().Close() }

// Remaining says how long the Session may still be counted on, by this
// host's monotonic clock: lost is the time from now until it gives itself
// up (Done closed, Err ErrSessionLost) unless contact with the ensemble is
// proven meanwhile, and expiry the time until the earliest moment any
// leader could expire the session and hand its ephemeral nodes, and so its
// locks, to another client. Each proof of contact moves both later; while
// none comes they count down, past zero, also once the session is over.
//
// Whatever acts for a holder outside this process (a command run under a
// lock, a machine it drives) must have stopped before expiry: from then on
// the lock may be another's. Lease.Done is closed at lost, a fifth of the
// session timeout before expiry (less a margin for clock drift).
func (s *Session) Remaining() (lost, expiry time.Duration) { return s.inner().Remaining() }

// inner is the session's plumbing.
func (s *Session) inner() *session.Session { return session.Of(s) }
