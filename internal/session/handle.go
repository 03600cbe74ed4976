package session

// Handle carries a *Session inside the root package's Session, which embeds
// it through an unexported alias: the embedded field is unexported, and so
// is Handle's one method, yet the method is promoted, so the root package's
// *Session is a Carrier. Outside this module nothing can call it, and
// nothing of it shows in the root package's documentation.
type Handle struct{ s *Session }

// NewHandle returns a Handle carrying s.
func NewHandle(s *Session) Handle { return Handle{s} }

func (h Handle) session() *Session { return h.s }

// Carrier is what carries a *Session: the root package's Session.
type Carrier interface{ session() *Session }

// Of returns the *Session that c carries: how this module's recipes reach
// the plumbing of the zkrecipes.Session they are given.
func Of(c Carrier) *Session { return c.session() }
