package zktest

import (
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Path returns a ZooKeeper path under root that no other test uses: the
// test's name and a random suffix.
func Path(t testing.TB, root string) string {
	var b [4]byte
	rand.Read(b[:])
	return root + "/" + strings.NewReplacer("/", "-").Replace(t.Name()) + "-" + hex.EncodeToString(b[:])
}

// BuildProgram builds the Go main package in pkg (say "./testdata/holder")
// into a temporary directory and returns the binary's path: a client
// process for a test to kill with SIGKILL.
func BuildProgram(t testing.TB, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("zktest: go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}
