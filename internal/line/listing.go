package line

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"github.com/zkrecipes/zkrecipes/internal/session"
	"github.com/zkrecipes/zkrecipes/internal/wire"
)

// Listing returns the listing of the directory taken with our create, if
// it came back holding our node, once: for a recipe that waits in its own
// way rather than with Wait.
func (e *Entry) Listing() []string {
	l := e.first
	e.first = nil
	return l
}

// Alone reports whether the listing taken with our create, while Wait has
// not used it yet, shows our node alone in the line: Wait will find that we
// hold, with no one behind us. False when there is no such listing.
func (e *Entry) Alone() bool {
	return e.first != nil && Alone(e.first, e.spec.Kind, e.name)
}

// Alone reports whether the listing children shows the node called name
// alone in a line of kind's family, with no contender of another.
func Alone(children []string, kind Kind, name string) bool {
	l, foreign := Parse(children, kind)
	return foreign == "" && len(l) == 1 && l[0].Name == name
}

// NewPrefix returns a fresh name prefix for a node of spec's, as Join makes
// one: for a recipe that creates its node in a multi of its own, and finds
// it with Find after a reply lost.
func NewPrefix(spec *Spec) (string, error) {
	var guid [16]byte
	if _, err := rand.Read(guid[:]); err != nil {
		return "", err
	}
	return wire.NodePrefix + hex.EncodeToString(guid[:]) + spec.Marker, nil
}

// Find looks in dir for our node whose name starts with prefix, after a
// create whose reply was lost (see findOwn).
func Find(ctx context.Context, s *session.Session, dir, prefix string) (string, bool, error) {
	return findOwn(ctx, s, dir, prefix)
}
