package queue

import (
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
)

// deleteBatch is how many deletes go into one multi: a round can leave tens
// of thousands of items behind, and one delete each would take seconds.
const deleteBatch = 500

// deleteTree deletes p and everything below it. Children are deleted in
// batches, one multi each; a batch that fails (a child with children of its
// own, or one already gone) is done one child at a time. Nodes of sessions
// just closed may linger for a moment, so a node found not empty is tried
// again.
func deleteTree(c *zk.Conn, p string) error {
	for try := 0; ; try++ {
		children, _, err := c.Children(p)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("delete %s: %w", p, err)
		}
		for len(children) > 0 {
			n := min(len(children), deleteBatch)
			ops := make([]any, n)
			for i, name := range children[:n] {
				ops[i] = &zk.DeleteRequest{Path: p + "/" + name, Version: -1}
			}
			if _, err := c.Multi(ops...); err != nil {
				for _, name := range children[:n] {
					if err := deleteTree(c, p+"/"+name); err != nil {
						return err
					}
				}
			}
			children = children[n:]
		}
		switch err := c.Delete(p, -1); {
		case err == nil, errors.Is(err, zk.ErrNoNode):
			return nil
		case errors.Is(err, zk.ErrNotEmpty) && try < 50:
			time.Sleep(100 * time.Millisecond)
		default:
			return fmt.Errorf("delete %s: %w", p, err)
		}
	}
}
