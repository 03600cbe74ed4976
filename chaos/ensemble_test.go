package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/zktest"
)

// CompareEnsemble reads each server alone and names the servers, paths and
// fields that differ. Two standalone servers stand for two members that
// diverged: the same root, a node changed on one only, a node on one only.
// (Both are private: their trees go with them.)
func TestCompareEnsembleNamesDifferences(t *testing.T) {
	zktest.CheckGoroutines(t)
	a, b := zktest.StartPrivate(t), zktest.StartPrivate(t)
	const root = "/chaos-ensemble-test"
	for _, srv := range []*zktest.Server{a, b} {
		conn := zktest.Connect(t, srv.Addrs()).Conn()
		for _, p := range []string{root, root + "/mutex", root + "/mutex/n_0000000001"} {
			if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
				t.Fatal(err)
			}
		}
	}
	agree := CompareEnsemble([]string{a.Addr(), b.Addr()}, root, 0)
	if len(agree.Errors) > 0 {
		t.Fatalf("unreadable: %v", agree.Errors)
	}
	// Two fresh servers that applied the same creates hold the same tree,
	// zxids included.
	if !agree.Agree || agree.Nodes[0] != 3 || agree.Nodes[1] != 3 {
		t.Fatalf("identical trees: %+v", agree)
	}

	connB := zktest.Connect(t, b.Addrs()).Conn()
	if _, err := connB.Set(root+"/mutex/n_0000000001", []byte("x"), -1); err != nil {
		t.Fatal(err)
	}
	if _, err := connB.Create(root+"/election", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	r := CompareEnsemble([]string{a.Addr(), b.Addr()}, root, 1500*time.Millisecond)
	if r.Agree || r.Rounds < 2 {
		t.Fatalf("different trees reported as agreeing, or not read again: %+v", r)
	}
	diffs := strings.Join(r.Diffs, "\n")
	for _, want := range []string{
		root + "/election: server 0: missing; server 1: czxid",
		root + "/mutex/n_0000000001: server 0: czxid",
		"version 0", "version 1",
	} {
		if !strings.Contains(diffs, want) {
			t.Errorf("differences do not say %q:\n%s", want, diffs)
		}
	}
	vs := r.Violations()
	if len(vs) != 1 || vs[0].Rule != "ensemble: servers agree" {
		t.Errorf("violations: %v", vs)
	}
}
