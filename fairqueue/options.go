package fairqueue

import (
	"fmt"

	"github.com/go-zookeeper/zk"
	"github.com/zkrecipes/zkrecipes"
)

// Option configures a Queue.
type Option func(*options)

type options struct {
	maxAttempts int
	acl         []zk.ACL
	bucketSize  int
	handedOut   func()
	errs        []error
}

// defaultBucketSize bounds the items of one bucket. A bucket's listing is then
// about 16 KiB, and the directory of buckets fills one 1 MiB getChildren reply
// only at some 60,000 buckets: tens of millions of items.
const defaultBucketSize = 1000

// WithMaxAttempts sets how many times an item is delivered before it moves to
// the dead-letter area instead of being delivered again (n >= 1). Default:
// no limit.
func WithMaxAttempts(n int) Option {
	return func(o *options) {
		if n < 1 {
			o.errs = append(o.errs, fmt.Errorf("%w: max attempts %d must be at least 1", zkrecipes.ErrInvalidArgument, n))
			return
		}
		o.maxAttempts = n
	}
}

// WithACL sets the ACL of the nodes the queue creates. Default: the
// Session's ACL.
func WithACL(acl []zk.ACL) Option {
	return func(o *options) {
		if len(acl) == 0 {
			o.errs = append(o.errs, fmt.Errorf("%w: empty ACL", zkrecipes.ErrInvalidArgument))
			return
		}
		o.acl = append([]zk.ACL(nil), acl...)
	}
}

// withBucketSize sets how many items a bucket holds (tests use small ones).
// Every client of one queue should use the same size; a mismatch costs
// balance, not correctness.
func withBucketSize(n int) Option {
	return func(o *options) {
		if n < 1 {
			o.errs = append(o.errs, fmt.Errorf("%w: bucket size %d must be at least 1", zkrecipes.ErrInvalidArgument, n))
			return
		}
		o.bucketSize = n
	}
}

// withHandOutHook has the dispatcher call f once each hand-out multi is
// answered, before it takes the answer in (tests: what it learns meanwhile
// is taken in first).
func withHandOutHook(f func()) Option {
	return func(o *options) { o.handedOut = f }
}
