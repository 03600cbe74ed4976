package zkrecipes_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The README's programs are the files under examples/, which the build
// compiles and vet checks: a program a user copies from the README builds.
func TestReadmeProgramsAreTheExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	for _, name := range []string{"examples/mutex/main.go", "examples/election/main.go", "examples/queue/main.go"} {
		src, err := os.ReadFile(name)
		require.NoError(t, err)
		block := "<!-- " + name + " -->\n```go\n" + string(src) + "```\n"
		require.True(t, strings.Contains(string(readme), block), "README.md must show %s as it is, after a line <!-- %s -->", name, name)
	}
}
