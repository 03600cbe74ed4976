package zklock

import (
	"cmp"
	"encoding/binary"
	"fmt"
)

// Fence orders every lease ever granted on one lock path, by any client:
// each lease's Fence is strictly greater than the Fence of every lease
// granted before it. A resource that keeps the highest Fence it has seen
// and refuses requests carrying a lower one (reads too) cannot be acted on
// by a lease that has ended: a holder paused past its loss, or a request
// of an earlier critical section that lands late.
//
// Holding is the lease's Token: the Czxid of the node that holds, strictly
// increasing over the successive holders. Section counts the critical
// sections of one CachedMutex holding, from 1; it is 0 for the lease of a
// Mutex (and of every other recipe), whose holding is one lease. Mutex and
// CachedMutex leases on one path share one order.
type Fence struct {
	Holding int64
	Section uint32
}

// Compare returns -1, 0 or +1 as f is less than, equal to or greater than
// g: by Holding, then by Section.
func (f Fence) Compare(g Fence) int {
	return cmp.Or(cmp.Compare(f.Holding, g.Holding), cmp.Compare(f.Section, g.Section))
}

// Bytes is f as 12 bytes, Holding then Section, big-endian: bytes.Compare
// orders them as Compare orders fences (tokens are never negative), for a
// resource that stores an opaque comparable value.
func (f Fence) Bytes() [12]byte {
	var b [12]byte
	binary.BigEndian.PutUint64(b[:8], uint64(f.Holding))
	binary.BigEndian.PutUint32(b[8:], f.Section)
	return b
}

// FenceFromBytes reads a Fence written by Bytes.
func FenceFromBytes(b [12]byte) Fence {
	return Fence{Holding: int64(binary.BigEndian.Uint64(b[:8])), Section: binary.BigEndian.Uint32(b[8:])}
}

// String is "holding.section", as "4294967312.3".
func (f Fence) String() string { return fmt.Sprintf("%d.%d", f.Holding, f.Section) }
