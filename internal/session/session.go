// Package session binds a go-zookeeper client to one ZooKeeper session and
// decides, in one place, when that session is over. It is the root
// package's Session with the plumbing the recipes need: the Czxids of the
// nodes they create, and clean-up steps that outlive a caller's context.
package session

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/chroot"
	"github.com/zkrecipes/zkrecipes/internal/telemetry"
	"github.com/zkrecipes/zkrecipes/internal/wire"
)

// Ends are the errors a session ends with, which Err wraps: the root
// package's sentinels (ErrSessionExpired, ErrSessionLost, ErrClosed), made
// there so that its documentation shows them as they are, and named for
// telemetry (telemetry.Named) by their exported names.
type Ends struct{ Expired, Lost, Closed error }

// LossFraction is how much of the negotiated timeout may pass after the
// latest proven contact before the Session gives itself up (see
// contact.go). No leader can expire the session sooner than a full timeout
// after that contact, so the rest is the head start the Session's users
// get. A ZooKeeper leader election (a second or two) stays well inside it.
const LossFraction = 0.8

// Auth is one AddAuth made right after connecting.
type Auth struct {
	Scheme string
	Data   []byte
}

// Config is what Connect needs, checked by the caller.
type Config struct {
	Servers []string
	Timeout time.Duration
	Logger  *slog.Logger
	Auth    []Auth
	ACL     []zk.ACL
	Dialer  zk.Dialer
	Loss    float64 // LossFraction, but for tests of the expiry path
	// Tick, when positive, is an upper bound on the ensemble's tickTime;
	// otherwise the servers are asked (see prober), or half the timeout is
	// assumed.
	Tick time.Duration
	// TLS, when set, makes every connection a TLS client over Dialer (see
	// tlsTransport); nil: plaintext.
	TLS *tls.Config
	// Chroot, when set, is the server's node that the client sees as its
	// root (see package chroot): an absolute path other than "/".
	Chroot string
	// Telemetry records what the session and its recipes do; nil records
	// nothing.
	Telemetry *telemetry.T
	// Ends are the errors the session ends with.
	Ends Ends
}

// Session is one ZooKeeper session; see the root package's Session for its
// contract.
type Session struct {
	loss float64
	ends Ends
	conn *zk.Conn
	id   int64
	log  *slog.Logger
	acl  []zk.ACL
	tr   *wire.Transport
	tel  *telemetry.T

	done     chan struct{}
	mu       sync.Mutex
	err      error
	expired  atomic.Bool
	kick     chan struct{} // from the client's event path to the monitor; never blocks
	closeReq chan struct{}
	closing  sync.Once
	wg       sync.WaitGroup // the monitor and the clean-up steps
	st       states         // the connection's state, and reconnects (state.go)
}

// Connect dials the ensemble and waits until a session is established, or
// ctx ends.
func Connect(ctx context.Context, cfg Config) (*Session, error) {
	s := &Session{
		loss:     cfg.Loss,
		ends:     cfg.Ends,
		tel:      cfg.Telemetry,
		log:      cfg.Logger,
		acl:      cfg.ACL,
		done:     make(chan struct{}),
		kick:     make(chan struct{}, 1),
		closeReq: make(chan struct{}),
	}
	var hosts zk.HostProvider = zk.NewDNSHostProvider()
	var tt *tlsTransport // nil without TLS
	if cfg.TLS != nil {
		tt = newTLSTransport(cfg.Dialer, cfg.TLS)
		hosts = tt
	}
	// What each address's latest attempt failed with: for Connect's error,
	// and to give up at once when every address refuses.
	tried := newAttempts(s.signal, hosts)
	dial, unanswered := tried.dialer(cfg.Dialer), func(addr string, err error) { tried.failed(addr, err, false) }
	probe := prober{}
	if tt != nil {
		// Under the wire watcher, which must see the plaintext protocol.
		// It records its own failures, the first reads' included.
		tt.tried = tried
		dial, unanswered = tt.dial, nil
		probe = prober{tls: cfg.TLS, serverName: tt.serverName}
	}
	if cfg.Chroot != "" {
		// Under the wire watcher, so that it sees the client's paths (the
		// created paths it records are the ones the client asks for), and
		// over TLS, which carries the server's.
		dial = chroot.Dial(cfg.Chroot, dial)
	}
	s.tr = wire.New(wire.Config{OnHandshake: s.signal, HandshakeWait: max(time.Second, cfg.Timeout/3),
		Probe: probe.probe, Tick: cfg.Tick, Unanswered: unanswered,
		Refused: func(addr string, err error) { tried.failed(addr, err, true) }})
	conn, _, err := zk.Connect(cfg.Servers, cfg.Timeout,
		zk.WithDialer(s.tr.Dialer(dial)),
		zk.WithHostProvider(&redialAtOnce{HostProvider: hosts}),
		zk.WithEventCallback(s.onEvent),
		zk.WithLogger(zkLogger{cfg.Logger}),
		zk.WithLogInfo(false),
	)
	if err != nil {
		s.tr.Close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	s.conn = conn
	fail := func() {
		conn.Close()
		s.tr.Close()
	}

	// Wait for the first session. The event channel of zk.Connect is never
	// read: it drops events when full, so everything comes through onEvent.
	for s.tr.SessionID() == 0 || conn.State() != zk.StateHasSession || !s.st.established() {
		select {
		case <-s.kick:
			// Every address refused in a way no redial cures (no ZooKeeper
			// there, a TLS refusal): say so now rather than when ctx ends.
			if err := tried.refusal(); err != nil {
				fail()
				return nil, fmt.Errorf("connect to %s: %w", strings.Join(cfg.Servers, ","), err)
			}
		case <-ctx.Done():
			fail()
			servers := strings.Join(cfg.Servers, ",")
			if errs := tried.tried(); errs != nil {
				return nil, fmt.Errorf("connect to %s: %w (tried %w)", servers, context.Cause(ctx), errs)
			}
			return nil, fmt.Errorf("connect to %s: %w", servers, context.Cause(ctx))
		}
	}
	s.id = s.tr.SessionID()
	s.log = s.log.With("session", fmt.Sprintf("0x%x", s.id))
	for _, a := range cfg.Auth {
		if err := Call(ctx, func() error { return conn.AddAuth(a.Scheme, a.Data) }); err != nil {
			fail()
			return nil, fmt.Errorf("add %s auth: %w", a.Scheme, err)
		}
	}
	// One round trip before anyone can set a watch: go-zookeeper reads
	// Conn.lastZxid unsynchronized in sendSetWatches right after a
	// connection is made (go-zookeeper/zk#35); a watch set before it has
	// run turns that into a data race with the receive loop. This also
	// proves the connection answers requests.
	rootFound := true
	if err := Call(ctx, func() error { var err error; rootFound, _, err = conn.Exists("/"); return err }); err != nil {
		fail()
		return nil, fmt.Errorf("first request: %w", err)
	}
	s.followState(func(st State) { s.tel.SessionState(st.telemetry()) })
	if !rootFound {
		s.log.Warn("the chroot does not exist: every request fails with NoNode until it is created", "chroot", cfg.Chroot)
	}
	s.wg.Add(1)
	go s.monitor()
	s.log.Debug("session established", "timeout", s.Timeout())
	return s, nil
}

// Conn is the underlying client.
func (s *Session) Conn() *zk.Conn { return s.conn }

// ID is the ZooKeeper session id this Session is bound to.
func (s *Session) ID() int64 { return s.id }

// Timeout is the session timeout the ensemble granted.
func (s *Session) Timeout() time.Duration { return s.tr.Timeout() }

// ACL is the ACL recipes use for the nodes they create on this session.
func (s *Session) ACL() []zk.ACL { return append([]zk.ACL(nil), s.acl...) }

// Telemetry is where the session's recipes record what they do.
func (s *Session) Telemetry() *telemetry.T { return s.tel }

// Log is where the session and its recipes log.
func (s *Session) Log() *slog.Logger { return s.log }

// Created returns, once, the Czxid of a recipe node this session created,
// read from the server's reply to the create; false when not recorded.
// Whoever creates a node with wire.NodePrefix in its name claims it as soon
// as the create returns, whether or not it needs it, so that the record
// does not outlive the create.
func (s *Session) Created(path string) (int64, bool) { return s.tr.Created(path) }

// Done is closed once the session is over for good.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is nil while the session lives; then one of the Ends, possibly
// wrapped with detail.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Connected reports whether the client has a connection right now. A
// Session that is not connected may still be live (suspended).
func (s *Session) Connected() bool {
	return s.conn.State() == zk.StateHasSession && s.Err() == nil
}

// Close ends the session and waits for its goroutines. Idempotent.
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
	s.st.event(ev.State, s.tr.SessionID())
	s.signal()
}

func (s *Session) signal() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// monitor decides when the session is over. Its clock is the proven
// contact (see contact.go): past the deadline after it, the session is
// declared lost before any leader can expire it and give its nodes away;
// a proof cycle is sent whenever the contact grows older than the period.
func (s *Session) monitor() {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	proved := make(chan time.Duration, 1)
	proving := false
	rtt := 10 * time.Millisecond
	var why error
	for why == nil {
		switch sid := s.tr.SessionID(); {
		case s.expired.Load() || sid == 0:
			why = s.ends.Expired
		case sid != s.id:
			why = fmt.Errorf("%w: the client moved to session 0x%x", s.ends.Expired, sid)
		}
		if why != nil {
			break
		}
		timeout := s.Timeout()
		limit := deadline(timeout, s.loss)
		unproven := s.tr.Unproven()
		if unproven >= limit {
			why = s.lossError(unproven)
			break
		}
		wait := limit - unproven
		if !proving {
			if p := period(timeout, s.loss, s.tr.Mode(), s.tr.Window(), rtt); unproven >= p {
				proving = true
				s.wg.Add(1)
				go func() {
					defer s.wg.Done()
					proved <- s.prove()
				}()
			} else {
				wait = min(wait, p-unproven)
			}
		}
		timer.Reset(wait)
		select {
		case <-s.kick:
		case <-timer.C:
		case d := <-proved:
			proving, rtt = false, max(10*time.Millisecond, d)
		case <-s.closeReq:
			why = s.ends.Closed
		}
	}
	if errors.Is(why, s.ends.Lost) {
		// Given up, not closed: a closeSession would delete the session's
		// nodes at once, while its leases' owners are still telling their
		// holders. Left alone, the nodes stay until the ensemble expires
		// the session, a fifth of the timeout from now at the earliest.
		s.tr.Abandon()
	}
	s.finish(why)
	// Closed so that the client can never resume as a different session;
	// every call in flight returns.
	s.conn.Close()
	s.tr.Close()
}

// lossError says why the session was given up, with what the proof needed.
func (s *Session) lossError(unproven time.Duration) error {
	tick, known := s.tr.Tick()
	how := "assumed: half the timeout"
	if known {
		how = "known"
	}
	return fmt.Errorf("%w: no proof of contact with the ensemble's leader for %v (timeout %v; server %s; tickTime %v, %s)",
		s.ends.Lost, unproven.Round(time.Millisecond), s.Timeout(), s.tr.Mode(), tick, how)
}

func (s *Session) finish(why error) {
	s.mu.Lock()
	s.err = why
	s.mu.Unlock()
	s.st.end(why)
	close(s.done)
	switch {
	case errors.Is(why, s.ends.Closed):
		s.tel.SessionEnded("closed")
	case errors.Is(why, s.ends.Lost):
		s.tel.SessionEnded("lost")
	default:
		s.tel.SessionEnded("expired")
	}
	if errors.Is(why, s.ends.Closed) {
		s.log.Debug("session closed")
	} else {
		s.log.Warn("session over", "err", why)
	}
}

// Call runs f, a blocking go-zookeeper call, and returns early with ctx's
// cause if ctx ends first; f then finishes on its own (go-zookeeper answers
// every request, at worst with an error once its connection drops), and
// its results must not be read. A request abandoned this way may still be
// applied: the caller must not act on the assumption that it was not.
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
