package telemetry

import (
	"context"
	"errors"

	"github.com/go-zookeeper/zk"
)

// The error.type of a failed wait is the Go name of the sentinel error that
// says why, as a caller would test it with errors.Is: the "canonical class
// name identifying the type" of the conventions, for a language whose error
// classes are sentinel values. The values, documented in docs/telemetry.md:
//
//   - context.Canceled, context.DeadlineExceeded: the caller's context
//     ended (outcome canceled);
//   - the module's sentinels: zkrecipes.ErrSessionExpired,
//     zkrecipes.ErrSessionLost, zkrecipes.ErrClosed, zklock.ErrLockLost
//     (our node vanished, or was written, while we waited),
//     zklock.ErrPathInUse, zklock.ErrPermitsMismatch, ...;
//   - go-zookeeper's: zk.ErrNoAuth, zk.ErrInvalidACL, ...;
//   - _OTHER for any other error.
//
// Where an error wraps several, the innermost named one wins: "lock lost:
// session expired" is zkrecipes.ErrSessionExpired, the cause, where the
// wrapper says only that the wait failed.

// other is the conventions' value for an error of no known class.
const other = "_OTHER"

// Named returns err, a sentinel, with name as its error.type: its text is
// err's, and errors.Is finds err through it. A package whose sentinels are
// plain errors.New values (as its documentation shows them) names them
// so where it makes its errors, or with a Names function given to
// StartWait.
func Named(err error, name string) error { return &named{err: err, name: name} }

type named struct {
	err  error
	name string
}

func (n *named) Error() string     { return n.err.Error() }
func (n *named) Unwrap() error     { return n.err }
func (n *named) ErrorType() string { return n.name }

// Names names a package's sentinels: the name of e itself, "" for an error
// it does not know.
type Names func(e error) string

// Busy marks err as the answer of a wait that was told not to wait (TryLock,
// TryAcquire) and would have had to: the wait's outcome is busy, an answer
// rather than a failure, with no error.type and no Error status.
func Busy(err error) error { return &busy{err} }

type busy struct{ err error }

func (b *busy) Error() string { return b.err.Error() }
func (b *busy) Unwrap() error { return b.err }

// zkName is the name of one of go-zookeeper's sentinels, "" for any other
// error.
func zkName(e error) string {
	switch e {
	case zk.ErrNoNode:
		return "zk.ErrNoNode"
	case zk.ErrNodeExists:
		return "zk.ErrNodeExists"
	case zk.ErrNoAuth:
		return "zk.ErrNoAuth"
	case zk.ErrAuthFailed:
		return "zk.ErrAuthFailed"
	case zk.ErrInvalidACL:
		return "zk.ErrInvalidACL"
	case zk.ErrBadVersion:
		return "zk.ErrBadVersion"
	case zk.ErrNotEmpty:
		return "zk.ErrNotEmpty"
	case zk.ErrNoChildrenForEphemerals:
		return "zk.ErrNoChildrenForEphemerals"
	case zk.ErrInvalidFlags:
		return "zk.ErrInvalidFlags"
	case zk.ErrBadArguments:
		return "zk.ErrBadArguments"
	case zk.ErrInvalidPath:
		return "zk.ErrInvalidPath"
	case zk.ErrAPIError:
		return "zk.ErrAPIError"
	case zk.ErrUnknown:
		return "zk.ErrUnknown"
	case zk.ErrSessionExpired:
		return "zk.ErrSessionExpired"
	case zk.ErrSessionMoved:
		return "zk.ErrSessionMoved"
	case zk.ErrConnectionClosed:
		return "zk.ErrConnectionClosed"
	case zk.ErrClosing:
		return "zk.ErrClosing"
	case zk.ErrNoServer:
		return "zk.ErrNoServer"
	}
	return ""
}

// ErrorType is the error.type of err (not nil): see above. names, when
// given, name the sentinels of the recipe that returned err.
func ErrorType(err error, names ...Names) string {
	name := other
	var walk func(error)
	walk = func(e error) {
		if n := nameOf(e, names...); n != "" {
			name = n // a later one is further in: the cause
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			if w := u.Unwrap(); w != nil {
				walk(w)
			}
		case interface{ Unwrap() []error }:
			for _, w := range u.Unwrap() {
				walk(w)
			}
		}
	}
	walk(err)
	return name
}

// nameOf is the name of e itself, without looking into what it wraps; ""
// when it has none.
func nameOf(e error, names ...Names) string {
	if t, ok := e.(interface{ ErrorType() string }); ok {
		return t.ErrorType()
	}
	for _, n := range names {
		if name := n(e); name != "" {
			return name
		}
	}
	switch e {
	case context.Canceled:
		return "context.Canceled"
	case context.DeadlineExceeded:
		return "context.DeadlineExceeded"
	}
	return zkName(e)
}

// outcome says how a wait ended: acquired, busy, canceled (ctx ended) or
// error; and its error.type, "" unless it failed.
func outcome(ctx context.Context, err error, names ...Names) (outcome, errorType string) {
	var b *busy
	switch {
	case err == nil:
		return "acquired", ""
	case errors.As(err, &b):
		return "busy", ""
	case ctx.Err() != nil:
		return "canceled", nameOf(ctx.Err())
	default:
		return "error", ErrorType(err, names...)
	}
}
