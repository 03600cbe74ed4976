package fairqueue_test

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// A producer whose idea of the newest bucket is an older bucket, still
// open, must not put into it once a newer bucket exists: every item of a
// bucket must be older than every item of the next, or a consumer that takes
// the oldest item sees ids go backwards, and a later put sorts before an
// earlier one.
//
// The newer bucket is made here the way a racing producer makes it: the
// high mark moved up and the bucket created with its first item, in one
// multi, after a look at the queue that listed the buckets before the older
// one was made and read the mark after (the two reads go out together, in
// no fixed order). A 10-minute chaos run (seed 14193800182699627432, the
// old kinds of fault) caught it: a producer put nine items into bucket 199
// after buckets 200 and 201 were made, and three consumers took them after
// items of bucket 201.
func TestPutNeverLandsBelowANewerBucket(t *testing.T) {
	srv := setup(t)
	p := queuePath(t, srv.Addrs())
	s := connect(t, srv.Addrs())
	ctx := bg(t, 30*time.Second)
	a := newQueue(t, s, p) // buckets of the default size: none fills up here
	first, err := a.Put(ctx, []byte("a1"))
	require.NoError(t, err)
	require.Equal(t, "0000000000-0000000000", first, "the first put makes bucket 0")

	// Another producer makes bucket 1 while bucket 0 is open.
	other := connect(t, srv.Addrs()).Conn()
	zktest.CatchUp(t, other, p) // other's member may lag behind a's put
	_, st, err := other.Get(p)
	require.NoError(t, err)
	newer := p + "/items/b0000000001"
	res, err := other.Multi(
		&zk.SetDataRequest{Path: p, Data: []byte("1"), Version: st.Version},
		&zk.CreateRequest{Path: newer, Data: []byte{}, Acl: zk.WorldACL(zk.PermAll)},
		&zk.CreateRequest{Path: newer + "/i-", Data: []byte("b1"), Acl: zk.WorldACL(zk.PermAll), Flags: zk.FlagSequence},
	)
	require.NoError(t, err)
	require.Equal(t, newer+"/i-0000000000", res[2].String)
	const b1 = "0000000001-0000000000"

	id, err := a.Put(ctx, []byte("a2"))
	require.NoError(t, err)
	assert.Greater(t, id, b1, "a put made after bucket 1 existed landed below it, in bucket 0")

	// A consumer gets them in the order they were put.
	var data []string
	ids := make([]string, 0, 3)
	for range 3 {
		j, err := a.TryTake(ctx)
		require.NoError(t, err)
		ids = append(ids, j.ID())
		data = append(data, string(j.Data()))
		require.NoError(t, j.Ack(ctx))
	}
	assert.Equal(t, []string{"a1", "b1", "a2"}, data, "taken in the order put (ids %v)", ids)
}
