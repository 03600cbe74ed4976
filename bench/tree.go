package bench

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
)

// CreateRoot creates the node a run keeps everything under, named prefix
// and a random suffix, so that runs side by side, or one that could not
// clean up, never meet. DeleteTree removes it at the end.
func CreateRoot(c *zk.Conn, prefix string) (string, error) {
	var id [6]byte
	_, _ = rand.Read(id[:])
	root := prefix + hex.EncodeToString(id[:])
	if _, err := c.Create(root, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		return "", fmt.Errorf("create %s: %w", root, err)
	}
	return root, nil
}

// DeleteTree deletes p and everything below it. With batch > 1 the
// children are deleted batch at a time, one multi each, for the tens of
// thousands of items a queue round can leave behind; a batch that fails (a
// child with children of its own, or one already gone) is done one child
// at a time. Otherwise each child is deleted depth first. Nodes of
// sessions just closed may linger for a moment, so a node found not empty
// is tried again.
func DeleteTree(c *zk.Conn, p string, batch int) error {
	for try := 0; ; try++ {
		children, _, err := c.Children(p)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("delete %s: %w", p, err)
		}
		for len(children) > 0 {
			n := len(children)
			if batch > 1 {
				n = min(n, batch)
			}
			if batch <= 1 || !deleteLeaves(c, p, children[:n]) {
				for _, name := range children[:n] {
					if err := DeleteTree(c, p+"/"+name, batch); err != nil {
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

// deleteLeaves deletes the children names of p in one multi, and reports
// whether it went through.
func deleteLeaves(c *zk.Conn, p string, names []string) bool {
	ops := make([]any, len(names))
	for i, name := range names {
		ops[i] = &zk.DeleteRequest{Path: p + "/" + name, Version: -1}
	}
	_, err := c.Multi(ops...)
	return err == nil
}
