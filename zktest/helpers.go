package zktest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"
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

// CatchUp syncs conn on path, so that a read through conn that follows
// sees every write another session made before it: ZooKeeper orders a
// session's own requests, but on an ensemble conn's member may lag behind
// a write another member took. A missing path is no error. It reports a
// failure with t.Errorf and goes on, so that it may be called inside a
// condition of require.Eventually.
func CatchUp(t testing.TB, conn *zk.Conn, path string) {
	t.Helper()
	if _, err := conn.Sync(path); err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Errorf("zktest: sync %s: %v", path, err)
	}
}
