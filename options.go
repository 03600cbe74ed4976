package zkrecipes

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-zookeeper/zk"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/zkrecipes/zkrecipes/internal/session"
)

// Option configures Connect.
type Option func(*options)

type options struct {
	timeout time.Duration
	logger  *slog.Logger
	auth    []session.Auth
	acl     []zk.ACL
	dialer  zk.Dialer
	tls     *tls.Config // see WithTLS
	meters  metric.MeterProvider
	tracers trace.TracerProvider
	loss    float64 // session.LossFraction, but for tests of the expiry path
	tick    time.Duration
	pending time.Duration // see WithPendingMaxAge; 0: telemetry.DefaultPendingMaxAge
	chroot  string        // "" for none
	errs    []error
}

// WithSessionTimeout asks the ensemble for this session timeout (default 10s).
// The server may grant another value (by default it clamps to 2 to 20 times
// its tickTime); the Session uses the granted one.
func WithSessionTimeout(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.errs = append(o.errs, fmt.Errorf("zkrecipes: %w: session timeout %v must be positive", ErrInvalidArgument, d))
			return
		}
		o.timeout = d
	}
}

// WithTickTime tells the Session an upper bound on the ensemble's tickTime
// (zoo.cfg's tickTime; ZooKeeper's default is 2s). The Session needs it to
// prove, through a follower, that the ensemble's leader heard from it: the
// proof waits for one of the leader's pings, which come every half tick.
// Without it, each server is asked with the "conf" four-letter word, which
// servers answer only when it is whitelisted (4lw.commands.whitelist), and
// failing that half the session timeout is assumed: true while the
// ensemble's minSessionTimeout is its default of two ticks. A bound that is
// too low makes the loss reported too late; one too high costs only more
// frequent proofs.
func WithTickTime(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.errs = append(o.errs, fmt.Errorf("zkrecipes: %w: tickTime %v must be positive", ErrInvalidArgument, d))
			return
		}
		o.tick = d
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
			o.errs = append(o.errs, fmt.Errorf("zkrecipes: %w: auth scheme is empty", ErrInvalidArgument))
			return
		}
		o.auth = append(o.auth, session.Auth{Scheme: scheme, Data: append([]byte(nil), data...)})
	}
}

// WithACL sets the ACL of the nodes the recipes create on this session.
// Default: world-all, or creator-only ("auth" scheme) when WithAuth is given.
func WithACL(acl []zk.ACL) Option {
	return func(o *options) {
		if len(acl) == 0 {
			o.errs = append(o.errs, fmt.Errorf("zkrecipes: %w: empty ACL", ErrInvalidArgument))
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
			o.errs = append(o.errs, fmt.Errorf("zkrecipes: %w: nil dialer", ErrInvalidArgument))
			return
		}
		o.dialer = d
	}
}

// WithMeterProvider sets where the Session and the recipes on it record
// their metrics (OpenTelemetry; default: otel.GetMeterProvider(), which
// records nothing until the program installs an SDK). The instruments, named
// by OpenTelemetry's semantic conventions (docs/telemetry.md has the table, with
// every attribute's values):
//
//	zkrecipes.session.count              UpDownCounter  {session}  zkrecipes.session.state: connected, suspended
//	zkrecipes.session.ended              Counter        {session}  zkrecipes.reason: expired, lost, closed
//	zkrecipes.session.replaced           Counter        {session}  (Supervise)
//	zkrecipes.lock.wait.duration         Histogram      s          zkrecipes.recipe, zkrecipes.outcome, error.type
//	zkrecipes.lock.wait.active           UpDownCounter  {wait}     zkrecipes.recipe
//	zkrecipes.lock.lease.duration        Histogram      s          zkrecipes.recipe
//	zkrecipes.lock.lease.active          UpDownCounter  {lease}    zkrecipes.recipe
//	zkrecipes.lock.lease.lost            Counter        {lease}    zkrecipes.recipe, zkrecipes.reason
//	zkrecipes.queue.item.put             Counter        {item}
//	zkrecipes.queue.item.dead_lettered   Counter        {item}
//	zkrecipes.queue.item.pending         UpDownCounter  {item}     (asynchronous)
//	zkrecipes.queue.job.acked            Counter        {job}
//	zkrecipes.queue.job.nacked           Counter        {job}
//	zkrecipes.queue.job.redelivered      Counter        {job}
//	zkrecipes.queue.job.active           UpDownCounter  {job}
//	zkrecipes.queue.take.wait.duration   Histogram      s          zkrecipes.outcome, error.type
//	zkrecipes.queue.take.wait.active     UpDownCounter  {wait}
//
// No attribute carries a path or an item id. The instrumentation scope is
// the module's path, with the module's version from the binary's build
// information.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) {
		if mp == nil {
			o.errs = append(o.errs, fmt.Errorf("zkrecipes: %w: nil MeterProvider", ErrInvalidArgument))
			return
		}
		o.meters = mp
	}
}

// WithTracerProvider sets where the recipes on the Session record their
// spans (OpenTelemetry; default: otel.GetTracerProvider()): one around each
// Lock, RLock, Acquire, Campaign and Take, of kind INTERNAL, with an event
// when it had to wait in line; a failed one has the status Error and an
// error.type attribute.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) {
		if tp == nil {
			o.errs = append(o.errs, fmt.Errorf("zkrecipes: %w: nil TracerProvider", ErrInvalidArgument))
			return
		}
		o.tracers = tp
	}
}

// WithPendingMaxAge bounds how old the count of a queue's pending items
// that zkrecipes.queue.item.pending reports may be (default 15s): a
// collection that finds it older reads it again, which lists the queue's
// items on the ensemble. A shorter age shows changes sooner, at the cost of
// a listing per queue and collection.
func WithPendingMaxAge(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.errs = append(o.errs, fmt.Errorf("zkrecipes: %w: pending max age %v must be positive", ErrInvalidArgument, d))
			return
		}
		o.pending = d
	}
}

// WithChroot runs the Session in the subtree at path, as the Java client
// does with "host:port/app" (which Connect takes too): every path the
// Session, the recipes on it and Conn use is read under path, so "/locks/a"
// is the server's "/app/locks/a", and nothing is created outside of it.
// The node at path must exist: until it does, every request fails with
// zk.ErrNoNode (Connect logs a warning). "/" is no chroot.
func WithChroot(path string) Option {
	return func(o *options) {
		if path == "/" {
			return
		}
		if err := ValidatePath(path); err != nil {
			o.errs = append(o.errs, fmt.Errorf("zkrecipes: %w: chroot: %w", ErrInvalidArgument, err))
			return
		}
		o.chroot = path
	}
}
