package fairqueue

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// An inbox reads back as written: a ticket's offers together, its name
// written once, payloads (any bytes) where carried, a TryTake told empty.
func TestInboxRoundTrip(t *testing.T) {
	t1 := ticketBase(kindWork, consumerName(0x1234, "00c0ffee"), "0badf00d", 3) + "0000000007"
	t2 := ticketBase(kindTry, consumerName(0x1234, "00c0ffee"), "12345678", 1) + "0000000008"
	t3 := ticketBase(kindTake, consumerName(0x1234, "00c0ffee"), "87654321", 1) + "0000000009"
	os := []offer{
		{ticket: t1, bucket: 2, name: itemBase("") + "0000000041", version: 0, data: []byte("a payload\n1 2 3 -1\n"), carried: true},
		{ticket: t1, bucket: 2, name: itemBase("k1") + "0000000042", version: 3},
		{ticket: t1, bucket: 3, name: itemBase("") + "0000000000", data: []byte{}, carried: true},
		{ticket: t2},
		{ticket: t3, bucket: 3, name: itemBase("") + "0000000001", version: 1, data: []byte("."), carried: true},
	}
	b := encodeInbox(os)
	require.Equal(t, os, parseInbox(b))
	require.Equal(t, 1, bytes.Count(b, []byte(t1)), "the ticket of several offers is written once: %q", b)
	// The bytes themselves: consumers and dispatchers of other builds
	// read them.
	require.Equal(t, t1+" b0000000002/"+itemBase("")+"0000000041 0 19\na payload\n1 2 3 -1\n"+
		". b0000000002/"+itemBase("k1")+"0000000042 3 -1\n"+
		". b0000000003/"+itemBase("")+"0000000000 0 0\n"+
		t2+" -\n"+
		t3+" b0000000003/"+itemBase("")+"0000000001 1 1\n.", string(b))

	// A "." with no offer before it ends the reading there.
	require.Empty(t, parseInbox([]byte(". b0000000002/i-0000000041 0 -1\n")))
}
