package zklock

import "github.com/zkrecipes/zkrecipes/internal/line"

// Kind is the kind of recipe whose contenders a directory holds, as the
// names of their nodes tell it.
type Kind string

// The kinds.
const (
	// KindNone: no contender's node is there.
	KindNone Kind = ""
	// KindLock: a Mutex's or an RWMutex's line, shared with the locks of
	// other clients that follow the same protocol (Curator's
	// InterProcessMutex and InterProcessReadWriteLock, kazoo's Lock,
	// ReadLock and WriteLock, go-zookeeper's zk.Lock).
	KindLock Kind = "lock"
	// KindSemaphore: a Semaphore's line.
	KindSemaphore Kind = "semaphore"
	// KindElection: an Election's candidates.
	KindElection Kind = "election"
)

// KindOf tells from the names of a directory's children, as listed, whose
// contenders they are. A Semaphore and an Election keep their directory to
// themselves, so that one node of theirs makes it theirs; a lock's line
// admits any client's lock nodes. Names that are no recipe's contender's
// are passed over.
func KindOf(children []string) Kind {
	kinds := make(map[line.Kind]bool)
	for _, name := range children {
		if n, ok := line.ParseName(name); ok {
			kinds[n.Kind] = true
		}
	}
	switch {
	case kinds[line.Candidate]:
		return KindElection
	case kinds[line.Permit]:
		return KindSemaphore
	case kinds[line.Exclusive] || kinds[line.Shared]:
		return KindLock
	}
	return KindNone
}
