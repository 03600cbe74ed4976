package znode

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidPath is the root package's ErrInvalidPath.
var ErrInvalidPath = errors.New("invalid path")

// ValidatePath reports whether p is a path a recipe can own: a node path
// (see ValidateNodePath) other than the root, and not under /zookeeper.
// The error wraps ErrInvalidPath and names the problem.
func ValidatePath(p string) error {
	if err := ValidateNodePath(p); err != nil {
		return err
	}
	switch {
	case p == "/":
		return fmt.Errorf("%w %q: the root cannot hold a recipe", ErrInvalidPath, p)
	case p == "/zookeeper" || strings.HasPrefix(p, "/zookeeper/"):
		return fmt.Errorf("%w %q: /zookeeper is reserved for the server", ErrInvalidPath, p)
	}
	return nil
}

// ValidateNodePath reports whether p is a path ZooKeeper takes: absolute,
// no trailing '/' (but for the root), no empty, "." or ".." element, and
// none of the characters ZooKeeper refuses. The error wraps ErrInvalidPath
// and names the problem.
func ValidateNodePath(p string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidPath, p, why)
	}
	switch {
	case p == "":
		return bad("empty")
	case p[0] != '/':
		return bad("must be absolute (start with '/')")
	case p == "/":
		return nil
	case strings.HasSuffix(p, "/"):
		return bad("must not end with '/'")
	}
	for _, el := range strings.Split(p[1:], "/") {
		switch el {
		case "":
			return bad("empty element ('//')")
		case ".", "..":
			return bad("relative element " + el)
		}
	}
	for _, r := range p {
		// The ranges ZooKeeper's PathUtils.validatePath rejects.
		if r == 0 || (r > 0 && r < 0x20) || (r >= 0x7f && r <= 0x9f) ||
			(r >= 0xd800 && r <= 0xf8ff) || (r >= 0xfff0 && r <= 0xffff) {
			return bad(fmt.Sprintf("invalid character %U", r))
		}
	}
	return nil
}
