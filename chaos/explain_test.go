package chaos

import (
	"strings"
	"testing"

	"github.com/zkrecipes/zkrecipes/chaos/record"
)

// A report counts as the ensemble's only if the server that gave it is
// shown to have diverged then: by its own digest check covering the moment,
// or by still holding, at the end, the very node it told of while others
// did not. Anything else stays the recipes'.
func TestExplainBlamesOnlyDivergedServers(t *testing.T) {
	servers := []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}
	ens := Ensemble{
		Servers:  servers,
		Diverged: []Divergence{{Server: 0, From: 100 * ms, Until: 200 * ms, Zxid: 0x700000001, Line: "First digest mismatch on txn: ..."}},
		Strays:   []Stray{{Path: "/e/ghost", Session: 0x10000577ac10000, Servers: []int{1}}},
	}
	v := func(srv string, node string, t int64) Violation {
		var told *Told
		if srv != "" {
			told = &Told{Server: srv, Node: node, T: t * ms}
		}
		return Violation{Rule: "observers never go back", Detail: "client 0.0 was told of term 1 after term 2", At: t * ms, Told: told}
	}
	vs := ens.Explain([]Violation{
		v(servers[0], "/e/a", 150),     // 0: during server 0's diverged tree
		v(servers[0], "/e/a", 50),      // 1: before it
		v(servers[0], "/e/a", 200),     // 2: once it had loaded another tree
		v(servers[1], "/e/a", 150),     // 3: another server, no evidence
		v(servers[1], "/e/ghost", 150), // 4: the node server 1 alone held at the end
		v(servers[2], "/e/ghost", 150), // 5: that node, told by a server that did not hold it
		v("", "/e/a", 150),             // 6: not known which server told it
		v("127.0.0.1:9", "/e/a", 150),  // 7: not one of the ensemble's
	})
	for i, want := range []bool{true, false, false, false, true, false, false, false} {
		got := strings.HasPrefix(vs[i].Rule, "ensemble: ")
		if got != want {
			t.Errorf("violation %d: the ensemble's: %v, want %v: %s", i, got, want, vs[i])
		}
	}
	if !strings.Contains(vs[0].Detail, "told by server 0 (127.0.0.1:1)") || !strings.Contains(vs[0].Detail, "0x700000001") {
		t.Errorf("evidence missing: %s", vs[0].Detail)
	}
	if !strings.Contains(vs[4].Detail, "/e/ghost") || !strings.Contains(vs[4].Detail, "0x10000577ac10000") {
		t.Errorf("evidence missing: %s", vs[4].Detail)
	}
}

// Through Check: an observer that goes back to an old leader is a
// violation; when the server it was connected to had diverged, by its own
// digest check, the violation is the ensemble's, and so is the server's
// divergence itself. The run still fails.
func TestCheckBlamesDivergedServerForObserverGoingBack(t *testing.T) {
	servers := []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}
	obs := func(p int, t, tok int64, id, srv string) record.Event {
		return record.Event{P: p, Sid: 7, W: record.Observe, K: record.Obs, T: t * ms, Tok: tok, ID: id, Srv: srv, Seq: t}
	}
	h := &History{
		Config: Config{Servers: 3, Clients: 1, Permits: 2},
		Events: []record.Event{
			obs(0, 10, 0x70000000d, "/e/n-0000000040", servers[0]),
			obs(0, 20, 0x500000002, "/e/ghost-0000000040", servers[0]),
		},
		End: 1000 * ms,
		Ensemble: Ensemble{Root: "/r", Servers: servers, Zxids: []string{"0x1", "0x1", "0x1"}, Nodes: []int{1, 1, 1}, Counts: []int{5, 5, 5}, Agree: true,
			Diverged: []Divergence{{Server: 0, From: 5 * ms, Zxid: 0x700000001, Line: "First digest mismatch on txn: ..."}}},
	}
	res := Check(h)
	var got []string
	for _, v := range res.Violations {
		got = append(got, v.Rule)
	}
	want := []string{"ensemble: each server's tree is the leader's", "ensemble: observers never go back"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("violations %q, want %q\n%s", got, want, res.Summary)
	}

	// Told by a server with no such evidence: the recipe's.
	h.Ensemble.Diverged = nil
	res = Check(h)
	if len(res.Violations) != 1 || res.Violations[0].Rule != "observers never go back" {
		t.Fatalf("violations %v", res.Violations)
	}
}
