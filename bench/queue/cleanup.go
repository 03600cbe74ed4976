package queue

import (
	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/bench"
)

// deleteBatch is how many deletes go into one multi: a round can leave tens
// of thousands of items behind, and one delete each would take seconds.
const deleteBatch = 500

// deleteTree deletes p and everything below it, deleteBatch children at a
// time.
func deleteTree(c *zk.Conn, p string) error { return bench.DeleteTree(c, p, deleteBatch) }
