package chaos

import (
	"fmt"
	"slices"
	"strings"
)

// Told is, for a violation that is a report a server gave a client, which
// server gave it, of what node, and when: the ensemble's evidence may
// explain it (Ensemble.Explain).
type Told struct {
	Server string // the address the client's session was connected to
	Node   string // the node it was told of ("" for none)
	T      int64  // when, on the shared clock
}

// Explain returns vs with each report that the ensemble's evidence shows a
// diverged server gave moved to the ensemble's class ("ensemble: " before
// its rule), the evidence added to its detail: a violation whose Told
// names the server that told it, when, by that server's own digest check,
// the tree it served differed from the leader's (a Divergence that covers
// the moment), or of a node that, at the end, that server held and some
// others did not (a Stray). Every other violation is left as it is: the
// recipes' until shown otherwise.
func (r Ensemble) Explain(vs []Violation) []Violation {
	out := slices.Clone(vs)
	for i, v := range out {
		if v.Told == nil {
			continue
		}
		srv := slices.Index(r.Servers, v.Told.Server)
		if srv < 0 {
			continue
		}
		var why []string
		for _, d := range r.Diverged {
			if d.Server == srv && d.Covers(v.Told.T) {
				why = append(why, fmt.Sprintf("by its own digest check its tree had differed from the leader's since the transaction 0x%x (logged at %s: %q)",
					d.Zxid, clock(d.From), d.Line))
				break
			}
		}
		for _, s := range r.Strays {
			if s.Path == v.Told.Node && slices.Contains(s.Servers, srv) {
				why = append(why, fmt.Sprintf("at the end it still held that node and some others did not (%s)", s.String(len(r.Servers))))
			}
		}
		if len(why) == 0 {
			continue
		}
		out[i].Rule = "ensemble: " + v.Rule
		out[i].Detail += fmt.Sprintf("; told by server %d (%s): %s", srv, v.Told.Server, strings.Join(why, "; "))
	}
	return out
}

// divergenceViolations reports, for each server that logged one, that its
// digest check found its tree differing from the leader's.
func divergenceViolations(servers []string, ds []Divergence) []Violation {
	var vs []Violation
	for srv, trees := range byServer(ds) {
		first := trees[0]
		until := "to the end"
		if first.Until != 0 {
			until = "until " + clock(first.Until)
		}
		addr := "?"
		if srv < len(servers) {
			addr = servers[srv]
		}
		vs = append(vs, Violation{Rule: "ensemble: each server's tree is the leader's", Detail: fmt.Sprintf(
			"server %d (%s), by its own digest check, served trees that differed from the leader's (%d in all, one per load); the first from the transaction 0x%x on, logged at %s, served %s: %q",
			srv, addr, len(trees), first.Zxid, clock(first.From), until, first.Line), At: first.From})
	}
	return vs
}

// divergenceSummary is "server 0 ×4, server 1 ×1".
func divergenceSummary(ds []Divergence) string {
	var parts []string
	for srv, trees := range byServer(ds) {
		parts = append(parts, fmt.Sprintf("server %d ×%d", srv, len(trees)))
	}
	return strings.Join(parts, ", ")
}

// byServer groups ds by server, in server order, each server's in order.
func byServer(ds []Divergence) func(yield func(int, []Divergence) bool) {
	return func(yield func(int, []Divergence) bool) {
		m := map[int][]Divergence{}
		for _, d := range ds {
			m[d.Server] = append(m[d.Server], d)
		}
		keys := make([]int, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if !yield(k, m[k]) {
				return
			}
		}
	}
}
