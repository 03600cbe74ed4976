// Package zkrecipes binds a ZooKeeper client to one session and tells its
// users, early enough to matter, when that session is over. The recipes in
// zklock and fairqueue build on it.
package zkrecipes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// Option configures Connect.
type Option func(*options)

type options struct {
	timeout time.Duration
	logger  *slog.Logger
	auth    []auth
	acl     []zk.ACL
	dialer  zk.Dialer
	loss    float64 // lossFraction, but for tests of the expiry path
	errs    []error
}

type auth struct {
	scheme string
	data   []byte
}

// WithSessionTimeout asks the ensemble for this session timeout (default 10s).
// The server may grant another value (by default it clamps to 2 to 20 times
// its tickTime); the Session uses the granted one.
func WithSessionTimeout(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.errs = append(o.errs, fmt.Errorf("%w: session timeout %v must be positive", ErrInvalidArgument, d))
			return
		}
		o.timeout = d
	}
}

// WithLogger sets where the Session and the recipes log (default: nowhere).
// The go-zookeeper client's own messages go there at debug level.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.logger = l
		}
	}
}

// WithAuth adds credentials to the session, e.g. ("digest", []byte("user:pass")).
// Unless WithACL says otherwise, nodes the recipes create are then readable and
// writable only by the identities the session authenticated as.
func WithAuth(scheme string, data []byte) Option {
	return func(o *options) {
		if scheme == "" {
			o.errs = append(o.errs, fmt.Errorf("%w: auth scheme is empty", ErrInvalidArgument))
			return
		}
		o.auth = append(o.auth, auth{scheme, append([]byte(nil), data...)})
	}
}

// WithACL sets the ACL of the nodes the recipes create on this session.
// Default: world-all, or creator-only ("auth" scheme) when WithAuth is given.
func WithACL(acl []zk.ACL) Option {
	return func(o *options) {
		if len(acl) == 0 {
			o.errs = append(o.errs, fmt.Errorf("%w: empty ACL", ErrInvalidArgument))
			return
		}
		o.acl = append([]zk.ACL(nil), acl...)
	}
}

// WithDialer sets the transport used to reach the servers (proxies, fault
// injection in tests). Default: net.DialTimeout.
func WithDialer(d zk.Dialer) Option {
	return func(o *options) {
		if d == nil {
			o.errs = append(o.errs, fmt.Errorf("%w: nil dialer", ErrInvalidArgument))
			return
		}
		o.dialer = d
	}
}

// lossFraction is how much of the negotiated timeout may pass without proof
// that the server heard from us before the Session gives itself up. The
// server cannot expire the session sooner than a full timeout after that
// proof, so the rest is the head start the Session's users get. A ZooKeeper
// leader election (a second or two) stays well inside it.
const lossFraction = 0.8

// Session is one ZooKeeper session. It never outlives that session: once the
// ensemble expires it, the client loses touch with the ensemble for too long,
// or Close is called, Done is closed, Err says why, and the connection is
// closed so it cannot quietly come back as a different session. Connect a new
// Session to go on.
//
// A short disconnect that the session survives (a server restart, a leader
// election) is not an end: the Session reconnects and keeps its nodes.
//
// A Session is safe for concurrent use by any number of goroutines and
// recipes.
type Session struct {
	loss float64 // lossFraction
	conn *zk.Conn
	id   int64
	log  *slog.Logger
	acl  []zk.ACL
	tr   *transport

	done     chan struct{}
	mu       sync.Mutex
	err      error
	expired  atomic.Bool
	kick     chan struct{} // from the client's event path to the monitor; never blocks
	closeReq chan struct{}
	closing  sync.Once
	wg       sync.WaitGroup

	cleanMu   sync.Mutex
	cleanups  []*cleanup
	cleanerOn bool
}

// Connect dials the ensemble and waits until a session is established, or ctx
// ends. servers are "host:port" addresses.
func Connect(ctx context.Context, servers []string, opts ...Option) (*Session, error) {
	o := options{timeout: 10 * time.Second, logger: slog.New(slog.DiscardHandler), dialer: net.DialTimeout, loss: lossFraction}
	for _, opt := range opts {
		opt(&o)
	}
	if len(servers) == 0 {
		o.errs = append(o.errs, fmt.Errorf("%w: no ZooKeeper servers given", ErrInvalidArgument))
	}
	for _, s := range servers {
		if strings.TrimSpace(s) == "" {
			o.errs = append(o.errs, fmt.Errorf("%w: empty server address", ErrInvalidArgument))
		}
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

	s := &Session{
		loss:     o.loss,
		log:      o.logger,
		acl:      o.acl,
		tr:       newTransport(),
		done:     make(chan struct{}),
		kick:     make(chan struct{}, 1),
		closeReq: make(chan struct{}),
	}
	s.tr.handshake = s.signal
	s.tr.handshakeWait = max(time.Second, o.timeout/3)
	conn, _, err := zk.Connect(servers, o.timeout,
		zk.WithDialer(s.tr.dialer(o.dialer)),
		zk.WithEventCallback(s.onEvent),
		zk.WithLogger(zkLogger{o.logger}),
		zk.WithLogInfo(false),
	)
	if err != nil {
		return nil, fmt.Errorf("zkrecipes: connect: %w", err)
	}
	s.conn = conn

	// Wait for the first session. The event channel of zk.Connect is never
	// read: it drops events when full, so everything comes through onEvent.
	for s.tr.sessionID.Load() == 0 || conn.State() != zk.StateHasSession {
		select {
		case <-s.kick:
		case <-ctx.Done():
			conn.Close()
			return nil, fmt.Errorf("zkrecipes: connect to %s: %w", strings.Join(servers, ","), context.Cause(ctx))
		}
	}
	s.id = s.tr.sessionID.Load()
	s.log = s.log.With("session", fmt.Sprintf("0x%x", s.id))
	for _, a := range o.auth {
		if err := Call(ctx, func() error { return conn.AddAuth(a.scheme, a.data) }); err != nil {
			conn.Close()
			return nil, fmt.Errorf("zkrecipes: add %s auth: %w", a.scheme, err)
		}
	}
	// One round trip before anyone can set a watch: go-zookeeper reads
	// Conn.lastZxid unsynchronized in sendSetWatches right after a
	// connection is made (go-zookeeper/zk#35); a watch set before it has
	// run turns that into a data race with the receive loop. This also
	// proves the connection answers requests.
	if err := Call(ctx, func() error { _, _, err := conn.Exists("/"); return err }); err != nil {
		conn.Close()
		return nil, fmt.Errorf("zkrecipes: first request: %w", err)
	}
	s.wg.Add(1)
	go s.monitor()
	s.log.Debug("session established", "timeout", s.Timeout())
	return s, nil
}

// Conn returns the underlying client, for plain reads and writes. Do not
// Close it: close the Session.
func (s *Session) Conn() *zk.Conn { return s.conn }

// ID is the ZooKeeper session id this Session is bound to.
func (s *Session) ID() int64 { return s.id }

// Timeout is the session timeout the ensemble granted.
func (s *Session) Timeout() time.Duration {
	return time.Duration(s.tr.timeoutMs.Load()) * time.Millisecond
}

// ACL is the ACL recipes use for the nodes they create on this session.
func (s *Session) ACL() []zk.ACL { return append([]zk.ACL(nil), s.acl...) }

// CreatedZxid returns the Czxid of a node this session created, read from the
// server's reply to the create, for nodes whose name starts with NodePrefix.
// It can be claimed once; false when not recorded (then ask the server).
func (s *Session) CreatedZxid(path string) (int64, bool) {
	v, ok := s.tr.created.LoadAndDelete(path)
	if !ok {
		return 0, false
	}
	s.tr.createdN.Add(-1)
	return v.(int64), true
}

// Logger is the session's logger, for recipes built on it.
func (s *Session) Logger() *slog.Logger { return s.log }

// Done is closed once the session is over for good.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is nil while the session lives; then ErrSessionExpired, ErrSessionLost
// or ErrClosed (possibly wrapped with detail).
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Connected reports whether the client is connected right now. A Session
// that is not connected may still be live (suspended): see Done.
func (s *Session) Connected() bool {
	return s.conn.State() == zk.StateHasSession && s.Err() == nil
}

// Close ends the session: the ensemble deletes its ephemeral nodes at once (if
// it can be reached), every lease made on it ends, and Close waits for the
// Session's own goroutines to stop. It is idempotent.
func (s *Session) Close() error {
	s.closing.Do(func() { close(s.closeReq) })
	s.wg.Wait()
	return nil
}

// onEvent runs on the client's event path: it records and signals, and never
// blocks.
func (s *Session) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	if ev.State == zk.StateExpired {
		s.expired.Store(true)
	}
	s.signal()
}

func (s *Session) signal() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// monitor decides when the session is over. Its clock is the transport's
// proof of contact: with none for lossFraction of the timeout, the session is
// declared lost before the ensemble can expire it and give its nodes away.
func (s *Session) monitor() {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var why error
	for why == nil {
		switch sid := s.tr.sessionID.Load(); {
		case s.expired.Load() || sid == 0:
			why = ErrSessionExpired
		case sid != s.id:
			why = fmt.Errorf("%w: the client moved to session 0x%x", ErrSessionExpired, sid)
		}
		if why != nil {
			break
		}
		limit := time.Duration(float64(s.Timeout()) * s.loss)
		silent := s.tr.lastTouchAge()
		if silent >= limit {
			why = fmt.Errorf("%w: no reply proving contact for %v (timeout %v)", ErrSessionLost, silent.Round(time.Millisecond), s.Timeout())
			break
		}
		timer.Reset(limit - silent)
		select {
		case <-s.kick:
		case <-timer.C:
		case <-s.closeReq:
			why = ErrClosed
		}
	}
	s.finish(why)
	s.conn.Close()
}

func (s *Session) finish(why error) {
	s.mu.Lock()
	s.err = why
	s.mu.Unlock()
	close(s.done)
	if errors.Is(why, ErrClosed) {
		s.log.Debug("session closed")
	} else {
		s.log.Warn("session over", "err", why)
	}
}

// Call runs f, a blocking go-zookeeper call, and returns early with ctx's
// cause if ctx ends first. The call then finishes on its own: go-zookeeper
// answers every request, with an error at worst once its connection drops.
// A write abandoned this way may still be applied: see IsAmbiguous. After an
// early return f is still running, so the caller must not read what f
// writes unless Call returned nil.
func Call(ctx context.Context, f func() error) error {
	if ctx.Done() == nil {
		return f()
	}
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// zkLogger sends go-zookeeper's messages to slog at debug level.
type zkLogger struct{ l *slog.Logger }

func (z zkLogger) Printf(format string, args ...any) {
	z.l.Debug("zk: " + fmt.Sprintf(format, args...))
}
