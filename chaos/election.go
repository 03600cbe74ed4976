package chaos

import (
	"fmt"

	"github.com/zkrecipes/zkrecipes/chaos/record"
)

// CheckTerms checks that each term (a leadership's token) was claimed by
// one leader only: one process, one session.
func CheckTerms(leases []*Lease) []Violation {
	owner := map[int64]*Lease{}
	var out []Violation
	for _, l := range leases {
		if o, ok := owner[l.Tok]; ok && (o.P != l.P || o.Inc != l.Inc || o.Sid != l.Sid) {
			out = append(out, Violation{"one leader per term", fmt.Sprintf("term %d led by client %d.%d (session 0x%x) and by client %d.%d (session 0x%x)", l.Tok, o.P, o.Inc, o.Sid, l.P, l.Inc, l.Sid), l.Start})
			continue
		}
		owner[l.Tok] = l
	}
	return out
}

// CheckObservers checks that what each observer session was told never
// goes back to an older term. (Across sessions it may: a new session may
// start on a server that is behind.)
func CheckObservers(events []record.Event) (reports int, vs []Violation) {
	type key struct {
		p, inc int
		sid    int64
	}
	last := map[key]int64{}
	for _, e := range Ordered(events) {
		if e.W != record.Observe || e.K != record.Obs {
			continue
		}
		reports++
		if e.ID == "" {
			continue // no leader
		}
		k := key{e.P, e.Inc, e.Sid}
		if prev, ok := last[k]; ok && e.Tok < prev {
			vs = append(vs, Violation{"observers never go back", fmt.Sprintf("client %d.%d (session 0x%x) was told of term %d after term %d", e.P, e.Inc, e.Sid, e.Tok, prev), e.T})
		}
		last[k] = max(last[k], e.Tok)
	}
	return reports, vs
}

// LastObserved returns, for each live slot's current incarnation, the
// leader node its observer reported last ("" for none), and whether it
// reported anything.
func LastObserved(events []record.Event, live map[int]int) map[int]string {
	out := map[int]string{}
	for _, e := range Ordered(events) {
		if e.W == record.Observe && e.K == record.Obs && live[e.P] == e.Inc {
			out[e.P] = e.ID
		}
	}
	return out
}
