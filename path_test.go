package zkrecipes_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes"
)

func TestValidatePath(t *testing.T) {
	for _, p := range []string{"/a", "/a/b", "/app/locks/x-1"} {
		require.NoError(t, zkrecipes.ValidatePath(p), p)
	}
	for p, why := range map[string]string{
		"":             "empty",
		"a":            "must be absolute",
		"/a/":          "must not end with '/'",
		"/a//b":        "empty element",
		"/a/../b":      "relative element",
		"/":            "the root",
		"/zookeeper":   "reserved",
		"/zookeeper/x": "reserved",
		"/a\x00":       "invalid character",
	} {
		err := zkrecipes.ValidatePath(p)
		require.ErrorIs(t, err, zkrecipes.ErrInvalidPath, "%q", p)
		require.ErrorContains(t, err, why, "%q", p)
	}
}
