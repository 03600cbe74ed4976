package line

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/zkrecipes/zkrecipes/internal/wire"
)

// Kind is what a contender's node says it waits for, read from its name.
type Kind uint8

// The kinds. Exclusive and Shared are one family: a Mutex, an RWMutex and
// the other clients' locks may share a directory and exclude each other.
// The other kinds each keep a directory to themselves.
const (
	Exclusive Kind = iota + 1 // a Mutex's or a writer's node
	Shared                    // a reader's node
	Permit                    // a Semaphore's node
	Candidate                 // an Election's node
	Consumer                  // a fairqueue consumer's place in line
)

func (k Kind) family() Kind {
	if k == Shared {
		return Exclusive
	}
	return k
}

// Node names. Ours are "_zkr_<guid><marker><seq>", where the GUID lets us
// find our node after a create whose reply was lost. The other markers are
// those of other clients, so that a Go service shares one lock path with
// Java and Python ones:
//
//	Curator InterProcessMutex        _c_<uuid>-lock-0000000007
//	Curator InterProcessReadWriteLock _c_<uuid>-__READ__0000000007, __WRIT__
//	go-zookeeper zk.Lock             _c_<hex>-lock-0000000007
//	kazoo Lock, WriteLock            <uuid>__lock__0000000007
//	kazoo ReadLock                   <uuid>__rlock__0000000007
//
// This module's own: "-lock-" a Mutex's (a CachedMutex's ends
// "-cached-lock-", which other clients read as "-lock-"), "-write-" and "-read-" an
// RWMutex's writers and readers, "-sem-", "-elect-" and "-take-" a
// Semaphore's, an Election's and a fairqueue consumer's.
//
// The sequence suffix is a signed 32-bit counter ZooKeeper prints with
// "%010d"; it wraps to negative numbers, which sort first, in every client.
var markers = []struct {
	marker string
	kind   Kind
}{
	{"-lock-", Exclusive}, {"__lock__", Exclusive}, {"-write-", Exclusive}, {"__WRIT__", Exclusive},
	{"-read-", Shared}, {"__rlock__", Shared}, {"__READ__", Shared},
	{"-sem-", Permit}, {"-elect-", Candidate}, {"-take-", Consumer},
}

// Node is one contender in a line.
type Node struct {
	Name string
	Seq  int32
	Kind Kind
}

// Ours reports whether the node was made by this module, and so follows
// its release protocol (a release mark written as the node is deleted).
func (n Node) Ours() bool { return strings.HasPrefix(n.Name, wire.NodePrefix) }

// ParseName reads a contender's node name, "<anything><marker><seq>"
// where seq is "%010d" of a signed 32-bit number; false for anything else.
// It is on every listing's path, so it reads the name by hand: a regular
// expression anchored at the end is tried at every offset.
func ParseName(name string) (Node, bool) {
	i := len(name)
	for i > 0 && name[i-1] >= '0' && name[i-1] <= '9' {
		i--
	}
	digits := len(name) - i
	// A negative number: a sign before 9 or 10 digits, after the marker.
	if (digits == 9 || digits == 10) && i > 0 && name[i-1] == '-' {
		if n, ok := node(name, i-1); ok {
			return n, true
		}
	}
	if digits < 10 {
		return Node{}, false
	}
	return node(name, len(name)-10)
}

// node reads name as a marker ending at name[:at] and a sequence number
// from name[at:].
func node(name string, at int) (Node, bool) {
	for _, m := range markers {
		if !strings.HasSuffix(name[:at], m.marker) {
			continue
		}
		seq, err := strconv.ParseInt(name[at:], 10, 32)
		if err != nil {
			return Node{}, false
		}
		return Node{Name: name, Seq: int32(seq), Kind: m.kind}, true
	}
	return Node{}, false
}

// Parse picks the contenders out of a directory listing and sorts them by
// sequence number: the order of the line. Names of no contender are left
// out. foreign is the first contender of a family other than kind's, if
// any: the directory is used by another kind of recipe.
func Parse(children []string, kind Kind) (line []Node, foreign string) {
	line = make([]Node, 0, len(children))
	for _, name := range children {
		n, ok := ParseName(name)
		if !ok {
			continue
		}
		if n.Kind.family() != kind.family() {
			if foreign == "" {
				foreign = name
			}
			continue
		}
		line = append(line, n)
	}
	slices.SortFunc(line, func(a, b Node) int {
		return cmp.Or(cmp.Compare(a.Seq, b.Seq), strings.Compare(a.Name, b.Name))
	})
	return line, foreign
}

// Index is the place of the node called name in line, or -1.
func Index(line []Node, name string) int {
	return slices.IndexFunc(line, func(n Node) bool { return n.Name == name })
}
