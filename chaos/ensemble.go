package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// Ensemble is what the servers hold under the run's root, each read alone
// once the run is over.
type Ensemble struct {
	Root    string
	Servers []string
	Zxids   []string // each server's last zxid (srvr), at the last read
	Nodes   []int    // nodes under Root on each server, at the last read
	Rounds  int      // reads of every server it took
	Agree   bool
	Diffs   []string // what differs: path, then each server's version
	Errors  []string // servers that could not be read
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
		r.Zxids = make([]string, len(addrs))
		r.Nodes = make([]int, len(addrs))
		for i, a := range addrs {
			var err error
			if sessions[i] == nil {
				sessions[i], err = connectAlone(a)
			}
			if err == nil {
				trees[i], err = readTree(sessions[i].Conn(), root)
			}
			if err != nil {
				r.Errors = append(r.Errors, fmt.Sprintf("server %d (%s): %v", i, a, err))
			}
			r.Nodes[i] = len(trees[i])
			r.Zxids[i] = zxid(a)
		}
		r.Diffs = diffTrees(trees)
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

// zxid is the server's last zxid, from srvr.
func zxid(addr string) string {
	reply, err := zktest.FourLetter(addr, "srvr")
	if err != nil {
		return "?"
	}
	for line := range strings.Lines(reply) {
		if z, ok := strings.CutPrefix(line, "Zxid:"); ok {
			return strings.TrimSpace(z)
		}
	}
	return "?"
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
// alone, hold different trees. No client can make that happen; whatever
// the recipes' checks report in the same run may follow from it.
func (r Ensemble) Violations() []Violation {
	var vs []Violation
	for _, e := range r.Errors {
		vs = append(vs, Violation{Rule: "ensemble: every server readable alone", Detail: e})
	}
	if len(r.Diffs) > 0 {
		vs = append(vs, Violation{Rule: "ensemble: servers agree", Detail: fmt.Sprintf(
			"read alone after a sync, %d nodes differ under %s (zxids %s; nodes %v); first: %s",
			len(r.Diffs), r.Root, strings.Join(r.Zxids, ", "), r.Nodes, r.Diffs[0])})
	}
	return vs
}

// Summary is one line for the run's summary.
func (r Ensemble) Summary() string {
	if r.Agree {
		return fmt.Sprintf("%d servers read alone after a sync agree on the %d nodes under %s (zxid %s; %d reads)",
			len(r.Servers), r.Nodes[0], r.Root, strings.Join(r.Zxids, ", "), r.Rounds)
	}
	return fmt.Sprintf("%d servers read alone after a sync DISAGREE: %d nodes differ, %d servers unreadable (zxids %s; nodes %v); see ensemble.txt",
		len(r.Servers), len(r.Diffs), len(r.Errors), strings.Join(r.Zxids, ", "), r.Nodes)
}
