package zkrecipes

import "github.com/zkrecipes/zkrecipes/internal/znode"

// ValidatePath reports whether p can be a recipe's path, as every recipe's
// constructor checks it: absolute, without a trailing '/', an empty, "." or
// ".." element, or a character ZooKeeper refuses, and neither the root nor
// under /zookeeper, which is the server's. The error wraps ErrInvalidPath
// and names the problem. A program may check the paths of its
// configuration with it before it connects.
func ValidatePath(p string) error { return znode.ValidatePath(p) }
