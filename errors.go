package zkrecipes

import (
	"errors"

	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/telemetry"
)

// Sentinel errors, for errors.Is. Errors returned by this module wrap them with
// the detail (which path, which option) that explains the failure, and the
// name of the package that returned them, once: "zklock: lock /app/l: lock
// lost: session expired".
var (
	// ErrSessionExpired: the ZooKeeper ensemble expired the session (or the
	// client found itself bound to a different session id). Its ephemeral
	// nodes, and so every lock made on it, are gone.
	ErrSessionExpired = errors.New("session expired")

	// ErrSessionLost: the client heard nothing from the ensemble for so long
	// that the session may expire at any moment, and gave it up before the
	// ensemble could hand its locks to anyone else. The session is left to
	// expire, not closed: its ephemeral nodes stay until the ensemble
	// expires it, so that every lease made on it is told first.
	ErrSessionLost = errors.New("session lost")

	// ErrClosed: the session was closed by its owner.
	ErrClosed = errors.New("session closed")

	// ErrInvalidPath: a ZooKeeper path that is empty, relative, ends in '/',
	// holds an empty, "." or ".." element, or a character ZooKeeper refuses.
	ErrInvalidPath = errors.New("invalid path")

	// ErrInvalidArgument: a nil Session, a negative or zero timeout, an empty
	// server list, or another argument that cannot work.
	ErrInvalidArgument = errors.New("invalid argument")

	// ErrDataTooLarge: data that cannot fit in one znode (ZooKeeper's
	// jute.maxbuffer, 1 MiB by default, bounds a whole request).
	ErrDataTooLarge = errors.New("data too large for a znode")
)

// ends are the errors a Session ends with, named in telemetry (error.type)
// as the sentinels they wrap.
func ends() session.Ends {
	return session.Ends{
		Expired: telemetry.Named(ErrSessionExpired, "zkrecipes.ErrSessionExpired"),
		Lost:    telemetry.Named(ErrSessionLost, "zkrecipes.ErrSessionLost"),
		Closed:  telemetry.Named(ErrClosed, "zkrecipes.ErrClosed"),
	}
}

// MaxDataSize is the largest node payload the recipes accept: ZooKeeper's
// default 1 MiB request limit, less room for the path and headers.
const MaxDataSize = 1<<20 - 4<<10

// IsAmbiguous reports whether err leaves a request's outcome unknown: the
// connection dropped or the caller gave up while it was in flight. A write
// that failed so may still be applied, even later; the recipes look for
// its outcome before they act on it, and so should callers of Conn.
func IsAmbiguous(err error) bool { return session.IsAmbiguous(err) }
