package zkrecipes

import (
	"fmt"
	"strings"
)

// ValidatePath reports whether p can be a recipe's path, as every recipe's
// constructor checks it: absolute, without a trailing '/', an empty, "." or
// ".." element, or a character ZooKeeper refuses, and neither the root nor
// under /zookeeper, which is the server's. The error wraps ErrInvalidPath
// and names the problem. A program may check the paths of its
// configuration with it before it connects.
func ValidatePath(p string) error {
	if err := validateNodePath(p); err != nil {
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

// validateNodePath reports whether p is a path ZooKeeper takes: absolute,
// no trailing '/' (but for the root), no empty, "." or ".." element, and
// none of the characters ZooKeeper refuses. The error wraps ErrInvalidPath
// and names the problem.
func validateNodePath(p string) error {
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
