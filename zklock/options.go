package zklock

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/internal/session"
)

// Option configures a recipe.
type Option func(*options)

type options struct {
	s    *session.Session
	dir  string
	data []byte
	acl  []zk.ACL
	errs []error

	// A CachedMutex's (cached.go); cachedOnly names those given.
	fresh, idle time.Duration
	cachedOnly  []string
}

// WithData stores b in the contender's node, for whoever lists the
// contenders (host, pid, what it is doing). At most zkrecipes.MaxDataSize.
func WithData(b []byte) Option {
	return func(o *options) {
		if len(b) > zkrecipes.MaxDataSize {
			o.errs = append(o.errs, fmt.Errorf("%w: WithData has %d bytes, the limit is %d",
				zkrecipes.ErrDataTooLarge, len(b), zkrecipes.MaxDataSize))
			return
		}
		o.data = append([]byte(nil), b...)
	}
}

// WithACL sets the ACL of the nodes the recipe creates (the lock's directory
// and each contender's node). Default: the Session's ACL.
func WithACL(acl []zk.ACL) Option {
	return func(o *options) {
		if len(acl) == 0 {
			o.errs = append(o.errs, fmt.Errorf("%w: empty ACL", zkrecipes.ErrInvalidArgument))
			return
		}
		o.acl = append([]zk.ACL(nil), acl...)
	}
}

// newOptions checks what every recipe constructor but NewCachedMutex is
// given.
func newOptions(s *zkrecipes.Session, path string, opts []Option) (options, error) {
	o, err := newAnyOptions(s, path, opts)
	if err == nil && len(o.cachedOnly) > 0 {
		err = fmt.Errorf("zklock: %w: %s applies to a CachedMutex only", zkrecipes.ErrInvalidArgument, strings.Join(o.cachedOnly, ", "))
	}
	return o, err
}

// newAnyOptions checks what every recipe constructor is given.
func newAnyOptions(s *zkrecipes.Session, path string, opts []Option) (options, error) {
	o := options{fresh: DefaultFreshness, idle: DefaultIdleRelease}
	if s == nil {
		return o, fmt.Errorf("zklock: %w: nil Session", zkrecipes.ErrInvalidArgument)
	}
	o.s, o.dir = session.Of(s), path
	if err := o.s.Err(); err != nil {
		return o, fmt.Errorf("zklock: session is over: %w", err)
	}
	if err := zkrecipes.ValidatePath(path); err != nil {
		return o, fmt.Errorf("zklock: %w", err)
	}
	for _, opt := range opts {
		opt(&o)
	}
	if err := errors.Join(o.errs...); err != nil {
		return o, fmt.Errorf("zklock: %w", err)
	}
	if o.acl == nil {
		o.acl = o.s.ACL()
	}
	if o.data == nil {
		o.data = []byte{}
	}
	return o, nil
}
