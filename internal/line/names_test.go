package line

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseName(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
		seq  int32
		kind Kind
		ours bool
	}{
		{"_zkr_0123abcd-lock-0000000007", true, 7, Exclusive, true},
		{"_zkr_0123abcd-write-0000000007", true, 7, Exclusive, true},
		{"_zkr_0123abcd-read-0000000008", true, 8, Shared, true},
		{"_zkr_0123abcd-sem-2147483647", true, 2147483647, Permit, true},
		{"_zkr_0123abcd-elect-0000000001", true, 1, Candidate, true},
		{"_zkr_0123abcd-take-0000000001", true, 1, Consumer, true},
		// Sequence numbers are signed and wrap: ZooKeeper prints them %010d.
		{"_zkr_0123abcd-lock--2147483648", true, -2147483648, Exclusive, true},
		{"_zkr_0123abcd-lock--000000001", true, -1, Exclusive, true},
		// Other clients.
		{"_c_9f5e1c2a-8b5a-4c3e-9f00-123456789abc-lock-0000000003", true, 3, Exclusive, false}, // Curator
		{"_c_1a2b3c-lock-0000000004", true, 4, Exclusive, false},                               // go-zookeeper
		{"9f5e1c2a8b5a4c3e__lock__0000000005", true, 5, Exclusive, false},                      // kazoo Lock, WriteLock
		{"9f5e1c2a8b5a4c3e__rlock__0000000006", true, 6, Shared, false},                        // kazoo ReadLock
		{"_c_9f5e-__READ__0000000009", true, 9, Shared, false},                                 // Curator read lock
		{"_c_9f5e-__WRIT__0000000010", true, 10, Exclusive, false},                             // Curator write lock
		// Not contenders.
		{"lock-0000000001", false, 0, 0, false},
		{"_zkr_0123-lock-123", false, 0, 0, false},
		{"_zkr_0123-lock-99999999999", false, 0, 0, false},
		{"_c_9f5e-latch-0000000001", false, 0, 0, false},
		{"items", false, 0, 0, false},
	} {
		n, ok := ParseName(c.name)
		require.Equal(t, c.ok, ok, c.name)
		if ok {
			assert.Equal(t, Node{Name: c.name, Seq: c.seq, Kind: c.kind}, n, c.name)
			assert.Equal(t, c.ours, n.Ours(), c.name)
		}
	}
}

func TestParseOrdersAndRefusesOtherFamilies(t *testing.T) {
	children := []string{
		"_zkr_b-lock-0000000003",
		"junk",
		"_c_x-lock-0000000001",
		"_zkr_a-read-0000000002",
		"_zkr_c-write--2147483647", // wrapped: first in every client's order
		"k__lock__0000000004",
	}
	l, foreign := Parse(children, Exclusive)
	require.Empty(t, foreign, "a Mutex and an RWMutex are one family")
	var names []string
	for _, n := range l {
		names = append(names, n.Name)
	}
	require.Equal(t, []string{
		"_zkr_c-write--2147483647", "_c_x-lock-0000000001", "_zkr_a-read-0000000002",
		"_zkr_b-lock-0000000003", "k__lock__0000000004",
	}, names)
	require.Equal(t, 3, Index(l, "_zkr_b-lock-0000000003"))
	require.Equal(t, -1, Index(l, "junk"))

	l, _ = Parse(children, Shared)
	require.Len(t, l, 5, "a reader sees the same line")

	for _, c := range []struct {
		kind    Kind
		child   string
		foreign bool
	}{
		{Exclusive, "_zkr_s-sem-0000000009", true},
		{Exclusive, "_zkr_e-elect-0000000009", true},
		{Permit, "_zkr_l-lock-0000000009", true},
		{Permit, "_zkr_s-sem-0000000009", false},
		{Candidate, "k__lock__0000000009", true},
		{Consumer, "_zkr_t-take-0000000009", false},
		{Candidate, "_zkr_t-take-0000000009", true},
	} {
		_, foreign := Parse([]string{c.child}, c.kind)
		assert.Equal(t, c.foreign, foreign != "", "%v in a line of kind %d", c.child, c.kind)
	}
}

func BenchmarkParse(b *testing.B) {
	var children []string
	for i := range 32 {
		children = append(children, fmt.Sprintf("_zkr_%032x-lock-%010d", i, i))
	}
	for b.Loop() {
		Parse(children, Exclusive)
	}
}
