package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// NodeStat is what the ensemble check compares of one znode on each
// server: fields that the same sequence of transactions sets the same on
// every server.
type NodeStat struct {
	Czxid, Mzxid, Pzxid int64
	Version, Cversion   int32
	EphemeralOwner      int64
	NumChildren         int32
}

func (s NodeStat) String() string {
	return fmt.Sprintf("czxid 0x%x mzxid 0x%x version %d ephemeralOwner 0x%x cversion %d pzxid 0x%x children %d",
		s.Czxid, s.Mzxid, s.Version, s.EphemeralOwner, s.Cversion, s.Pzxid, s.NumChildren)
}

// Ensemble is what the servers hold, each read alone once the run is over:
// the tree under the run's root, and, of the whole tree, the number of
// nodes and the ephemeral nodes, which see what a walk from the root
// cannot: a node left under a parent that the others deleted, say.
type Ensemble struct {
	Root    string
	Servers []string
	Zxids   []string // each server's last zxid (srvr), at the last read
	Nodes   []int    // nodes under Root on each server, at the last read
	Counts  []int    // nodes in the whole tree on each server (srvr), at the last read
	Rounds  int      // reads of every server it took
	Agree   bool
	Diffs   []string // what differs: path, then each server's version
	Errors  []string // servers that could not be read
	// Strays are the ephemeral nodes that some servers held at the last
	// read and others did not, outside the trees compared node by node.
	Strays []Stray `json:",omitempty"`
	// Diverged is the servers' own word, from their logs, that their trees
	// differed from the leader's (see Divergence). Run fills it in.
	Diverged []Divergence `json:",omitempty"`
}

// Stray is an ephemeral node held by some servers only.
type Stray struct {
	Path    string
	Session int64 // its owner on the servers that hold it
	Servers []int // the servers that hold it
}

// maxDiffs bounds the differences kept.
const maxDiffs = 50

// CompareEnsemble reads the tree under root from each server alone (a
// session that connects to that server only, and a sync first, so that a
// follower has applied everything committed before it), and compares the
// servers' children and Stats, node by node. It reads again, a second
// apart, until the servers agree or settle has passed: sessions of killed
// clients are still expiring, and an expiry that lands between the reads
// of two servers is no disagreement. What still differs then is reported,
// server by server.
func CompareEnsemble(addrs []string, root string, settle time.Duration) Ensemble {
	r := Ensemble{Root: root, Servers: addrs}
	sessions := make([]*zkrecipes.Session, len(addrs))
	defer func() {
		for _, s := range sessions {
			if s != nil {
				s.Close()
			}
		}
	}()
	deadline := time.Now().Add(settle)
	for {
		r.Rounds++
		r.Errors, r.Diffs = nil, nil
		trees := make([]map[string]NodeStat, len(addrs))
		ephemerals := make([]map[string]int64, len(addrs))
		r.Zxids = make([]string, len(addrs))
		r.Nodes = make([]int, len(addrs))
		r.Counts = make([]int, len(addrs))
		for i, a := range addrs {
			var err error
			if sessions[i] == nil {
				sessions[i], err = connectAlone(a)
			}
			if err == nil {
				trees[i], err = readTree(sessions[i].Conn(), root)
			}
			if err == nil {
				ephemerals[i], err = readEphemerals(a)
			}
			if err != nil {
				r.Errors = append(r.Errors, fmt.Sprintf("server %d (%s): %v", i, a, err))
				trees[i], ephemerals[i] = nil, nil
			}
			r.Nodes[i] = len(trees[i])
			r.Zxids[i], r.Counts[i] = srvr(a)
		}
		r.Diffs = diffTrees(trees)
		r.Strays = strays(ephemerals, trees)
		for _, s := range r.Strays {
			r.Diffs = append(r.Diffs, s.String(len(addrs)))
		}
		if d := diffCounts(r.Counts, trees); d != "" {
			r.Diffs = append(r.Diffs, d)
		}
		r.Agree = len(r.Errors) == 0 && len(r.Diffs) == 0
		if r.Agree || time.Now().After(deadline) {
			return r
		}
		time.Sleep(time.Second)
	}
}

// connectAlone opens a session with server addr only.
func connectAlone(addr string) (*zkrecipes.Session, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return zkrecipes.Connect(ctx, []string{addr}, zkrecipes.WithSessionTimeout(10*time.Second))
}

// readTree syncs the server with the leader, then reads every node under
// root (root included) with its Stat.
func readTree(conn *zk.Conn, root string) (map[string]NodeStat, error) {
	if _, err := conn.Sync(root); err != nil {
		return nil, fmt.Errorf("sync: %w", err)
	}
	out := map[string]NodeStat{}
	var walk func(p string) error
	walk = func(p string) error {
		kids, st, err := conn.Children(p)
		if errors.Is(err, zk.ErrNoNode) {
			return nil // deleted since its parent was listed
		}
		if err != nil {
			return fmt.Errorf("children of %s: %w", p, err)
		}
		out[p] = NodeStat{Czxid: st.Czxid, Mzxid: st.Mzxid, Pzxid: st.Pzxid, Version: st.Version, Cversion: st.Cversion,
			EphemeralOwner: st.EphemeralOwner, NumChildren: st.NumChildren}
		slices.Sort(kids)
		for _, k := range kids {
			if err := walk(p + "/" + k); err != nil {
				return err
			}
		}
		return nil
	}
	return out, walk(root)
}

// srvr returns the server's last zxid ("?" if unknown) and the number of
// nodes in its whole tree (-1 if unknown).
func srvr(addr string) (zxid string, count int) {
	zxid, count = "?", -1
	reply, err := zktest.FourLetter(addr, "srvr")
	if err != nil {
		return zxid, count
	}
	for line := range strings.Lines(reply) {
		if z, ok := strings.CutPrefix(line, "Zxid:"); ok {
			zxid = strings.TrimSpace(z)
		}
		if n, ok := strings.CutPrefix(line, "Node count:"); ok {
			if c, err := strconv.Atoi(strings.TrimSpace(n)); err == nil {
				count = c
			}
		}
	}
	return zxid, count
}

// readEphemerals returns every ephemeral node in the server's whole tree,
// with its owner, from dump: a server keeps them by owner, so this lists
// ones that no walk from the root reaches.
func readEphemerals(addr string) (map[string]int64, error) {
	reply, err := zktest.FourLetter(addr, "dump")
	if err != nil {
		return nil, fmt.Errorf("dump: %w", err)
	}
	return parseDump(reply)
}

// parseDump reads dump's "Sessions with Ephemerals" section: a line
// "0x<session>:" for each owner, then one tab-indented line per path.
func parseDump(reply string) (map[string]int64, error) {
	out := map[string]int64{}
	in := false
	var owner int64
	for line := range strings.Lines(reply) {
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "Sessions with Ephemerals"):
			in = true
		case !in:
		case strings.HasPrefix(line, "Connections dump"):
			return out, nil
		case strings.HasPrefix(line, "0x") && strings.HasSuffix(line, ":"):
			id, err := strconv.ParseUint(strings.TrimSuffix(line[2:], ":"), 16, 64)
			if err != nil {
				return nil, fmt.Errorf("dump: session %q: %w", line, err)
			}
			owner = int64(id)
		case strings.HasPrefix(line, "\t"):
			out[strings.TrimPrefix(line, "\t")] = owner
		}
	}
	if !in {
		return nil, fmt.Errorf("dump: no ephemeral nodes section in %q", reply)
	}
	return out, nil
}

// strays lists the ephemeral nodes that some servers hold and others do
// not, leaving out those under the compared root (a server's walk reached
// them: diffTrees reports them). Servers not read (nil) are left out.
func strays(ephemerals []map[string]int64, trees []map[string]NodeStat) []Stray {
	read := 0
	held := map[string][]int{}
	owner := map[string]int64{}
	for i, e := range ephemerals {
		if e == nil {
			continue
		}
		read++
		for p, o := range e {
			held[p] = append(held[p], i)
			owner[p] = o
		}
	}
	var out []Stray
	for p, servers := range held {
		if len(servers) == read || walked(p, trees) {
			continue
		}
		out = append(out, Stray{Path: p, Session: owner[p], Servers: servers})
	}
	slices.SortFunc(out, func(a, b Stray) int { return strings.Compare(a.Path, b.Path) })
	if len(out) > maxDiffs {
		out = out[:maxDiffs]
	}
	return out
}

// walked reports whether some server's walk reached p.
func walked(p string, trees []map[string]NodeStat) bool {
	for _, t := range trees {
		if _, ok := t[p]; ok {
			return true
		}
	}
	return false
}

// String says which servers hold the node, of n.
func (s Stray) String(n int) string {
	var missing []int
	for i := range n {
		if !slices.Contains(s.Servers, i) {
			missing = append(missing, i)
		}
	}
	return fmt.Sprintf("%s (ephemeral, reached by no walk from the root): server %s: ephemeralOwner 0x%x; server %s: missing",
		s.Path, joinInts(s.Servers), s.Session, joinInts(missing))
}

// diffCounts says how the servers' node counts differ, if they do ("" if
// not). Servers not read, or whose count is unknown, are left out.
func diffCounts(counts []int, trees []map[string]NodeStat) string {
	seen := map[int][]int{}
	var order []int
	for i, c := range counts {
		if c < 0 || trees[i] == nil {
			continue
		}
		if _, ok := seen[c]; !ok {
			order = append(order, c)
		}
		seen[c] = append(seen[c], i)
	}
	if len(order) < 2 {
		return ""
	}
	var parts []string
	for _, c := range order {
		parts = append(parts, fmt.Sprintf("server %s: %d", joinInts(seen[c]), c))
	}
	return "node count of the whole tree (srvr): " + strings.Join(parts, "; ")
}

// diffTrees lists the nodes on which the servers' trees differ, with each
// server's version ("missing" where it has none). Servers not read (nil)
// are left out.
func diffTrees(trees []map[string]NodeStat) []string {
	paths := map[string]bool{}
	for _, t := range trees {
		for p := range t {
			paths[p] = true
		}
	}
	sorted := make([]string, 0, len(paths))
	for p := range paths {
		sorted = append(sorted, p)
	}
	slices.Sort(sorted)
	var out []string
	for _, p := range sorted {
		seen := map[string][]int{}
		var order []string
		for i, t := range trees {
			if t == nil {
				continue
			}
			v := "missing"
			if st, ok := t[p]; ok {
				v = st.String()
			}
			if _, ok := seen[v]; !ok {
				order = append(order, v)
			}
			seen[v] = append(seen[v], i)
		}
		if len(order) < 2 {
			continue
		}
		if len(out) == maxDiffs {
			out = append(out, "... and more")
			break
		}
		var parts []string
		for _, v := range order {
			parts = append(parts, fmt.Sprintf("server %s: %s", joinInts(seen[v]), v))
		}
		out = append(out, p+": "+strings.Join(parts, "; "))
	}
	return out
}

func joinInts(is []int) string {
	var s []string
	for _, i := range is {
		s = append(s, itoa(i))
	}
	return strings.Join(s, ",")
}

// Violations reports a disagreement as the ensemble's: the servers, read
// alone, hold different trees, or say in their logs that their trees
// differed from the leader's. No client can make that happen; whatever the
// recipes' checks report in the same run may follow from it (Explain says
// which of their reports a diverged server gave).
func (r Ensemble) Violations() []Violation {
	var vs []Violation
	for _, e := range r.Errors {
		vs = append(vs, Violation{Rule: "ensemble: every server readable alone", Detail: e})
	}
	if len(r.Diffs) > 0 {
		vs = append(vs, Violation{Rule: "ensemble: servers agree", Detail: fmt.Sprintf(
			"read alone after a sync, %d differences (zxids %s; nodes under %s %v, in the whole tree %v); first: %s",
			len(r.Diffs), strings.Join(r.Zxids, ", "), r.Root, r.Nodes, r.Counts, r.Diffs[0])})
	}
	vs = append(vs, divergenceViolations(r.Servers, r.Diverged)...)
	return vs
}

// Summary is one line for the run's summary.
func (r Ensemble) Summary() string {
	var s string
	if r.Agree {
		s = fmt.Sprintf("%d servers read alone after a sync agree on the %d nodes under %s, the whole tree's node count and its ephemeral nodes (zxid %s; %d reads)",
			len(r.Servers), r.Nodes[0], r.Root, strings.Join(r.Zxids, ", "), r.Rounds)
	} else {
		s = fmt.Sprintf("%d servers read alone after a sync DISAGREE: %d differences, %d servers unreadable (zxids %s; nodes under the root %v, in the whole tree %v); see ensemble.txt",
			len(r.Servers), len(r.Diffs), len(r.Errors), strings.Join(r.Zxids, ", "), r.Nodes, r.Counts)
	}
	if len(r.Diverged) > 0 {
		s += "; digest mismatches logged: " + divergenceSummary(r.Diverged)
	}
	return s
}
