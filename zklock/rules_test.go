package zklock

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zkrecipes/zkrecipes/internal/line"
)

// The rules are pure, so they are tested here without a server: first as
// tables, then inside a model of the engine's protocol, where random
// arrivals, releases and give-ups check that no contender ever holds what
// a fresh look would not grant it (safety), and that once things settle
// every contender a fresh look would grant holds (liveness).

func node(kind line.Kind, seq int32) line.Node {
	marker := map[line.Kind]string{line.Exclusive: "-lock-", line.Shared: "-read-", line.Permit: "-sem-", line.Candidate: "-elect-"}[kind]
	return line.Node{Name: fmt.Sprintf("_zkr_%02d%s%010d", seq, marker, seq), Seq: seq, Kind: kind}
}

func nodes(kinds string) []line.Node {
	var l []line.Node
	for i, k := range kinds {
		kind := map[rune]line.Kind{'w': line.Exclusive, 'r': line.Shared, 's': line.Permit, 'e': line.Candidate}[k]
		l = append(l, node(kind, int32(i)))
	}
	return l
}

func TestRuleTables(t *testing.T) {
	foreign := line.Node{Name: "_c_x-lock-0000000000", Kind: line.Exclusive}
	for _, c := range []struct {
		name string
		rule line.Rule
		line []line.Node
		me   int
		want line.Decision
	}{
		{"mutex first", exclusive, nodes("w"), 0, line.Decision{Hold: true}},
		{"mutex second", exclusive, nodes("ww"), 1, line.Decision{Watch: []int{0}, GoneHolds: true, ReleaseHolds: true}},
		{"mutex third", exclusive, nodes("www"), 2, line.Decision{Watch: []int{1}, ReleaseHolds: true}},
		{"mutex behind a reader", exclusive, nodes("rrw"), 2, line.Decision{Watch: []int{1}}},
		{"mutex behind a foreign lock", exclusive, []line.Node{foreign, node(line.Exclusive, 1)}, 1,
			line.Decision{Watch: []int{0}, GoneHolds: true, ReleaseHolds: true}}, // the engine checks Ours
		{"reader first", shared, nodes("r"), 0, line.Decision{Hold: true}},
		{"readers share", shared, nodes("rrr"), 2, line.Decision{Hold: true}},
		{"reader behind a writer", shared, nodes("wrr"), 2, line.Decision{Watch: []int{0}, GoneHolds: true, ReleaseHolds: true}},
		{"reader behind two writers", shared, nodes("wrwr"), 3, line.Decision{Watch: []int{2}, ReleaseHolds: true}},
		{"reader ignores writers behind it", shared, nodes("rw"), 0, line.Decision{Hold: true}},
		{"semaphore holder", permitRule(2), nodes("sss"), 1, line.Decision{Hold: true}},
		{"semaphore first waiter", permitRule(2), nodes("sss"), 2, line.Decision{Watch: []int{0, 1}}},
		{"semaphore later waiter", permitRule(2), nodes("ssss"), 3, line.Decision{Watch: []int{2}, Written: true}},
		{"leader", leader, nodes("ee"), 0, line.Decision{Hold: true}},
		{"candidate second", leader, nodes("ee"), 1, line.Decision{Watch: []int{0}, GoneHolds: true}},
		{"candidate third", leader, nodes("eee"), 2, line.Decision{Watch: []int{1}}},
	} {
		assert.Equal(t, c.want, c.rule(c.line, c.me), c.name)
	}
}

// model is the engine's protocol run on a line in memory: getData watches
// that fire once, a release that writes a mark and deletes (or a plain
// delete when no one joined since the holder listed), give-ups that
// delete, and a semaphore's new holder writing its node when someone is
// behind it. A waiter woken by a watch holds without listing again when
// the decision it watched under says so, exactly as Entry.Wait does.
type model struct {
	t        *testing.T
	rule     line.Rule
	line     []line.Node
	holds    map[string]bool
	version  map[string]int32
	watchers map[string][]watcher // per watched node, one shot each
	listed   map[string]int       // how many contenders each one saw when it last listed
	seen     map[string]string    // the written node a waiter last listed again for
	queue    []event
}

type watcher struct {
	who string
	d   line.Decision
}

type event struct {
	watcher
	of      line.Node // the watched node
	deleted bool      // else its data changed
}

func newModel(t *testing.T, rule line.Rule) *model {
	return &model{t: t, rule: rule, holds: map[string]bool{}, version: map[string]int32{},
		watchers: map[string][]watcher{}, listed: map[string]int{}, seen: map[string]string{}}
}

func (m *model) index(name string) int { return line.Index(m.line, name) }

func (m *model) arrive(n line.Node) {
	m.line = append(m.line, n)
	m.look(n.Name)
}

// look is a fresh listing by name and what follows it.
func (m *model) look(name string) {
	me := m.index(name)
	if me < 0 || m.holds[name] {
		return
	}
	m.unwatch(name)
	m.listed[name] = len(m.line)
	d := m.rule(m.line, me)
	if d.Hold {
		m.hold(name, me+1 < len(m.line))
		return
	}
	for _, i := range d.Watch {
		w := m.line[i]
		if key := fmt.Sprint(w.Name, "@", m.version[w.Name]); d.Written && m.version[w.Name] > 0 && m.seen[name] != key {
			m.seen[name] = key
			m.queue = append(m.queue, event{watcher: watcher{name, d}, of: w})
			return
		}
	}
	for _, i := range d.Watch {
		w := m.line[i].Name
		m.watchers[w] = append(m.watchers[w], watcher{name, d})
	}
}

func (m *model) hold(name string, behind bool) {
	m.holds[name] = true
	m.check()
	if behind && m.line[m.index(name)].Kind == line.Permit {
		m.version[name]++ // the new holder announces itself
		m.fire(name, false)
	}
}

func (m *model) fire(name string, deleted bool) {
	n := m.line[m.index(name)]
	for _, w := range m.watchers[name] {
		m.queue = append(m.queue, event{watcher: w, of: n, deleted: deleted})
	}
	delete(m.watchers, name)
}

// unwatch drops the watches name set: it has been woken (its other
// watches fire later into a channel no one reads) or it is gone.
func (m *model) unwatch(name string) {
	for w, ws := range m.watchers {
		m.watchers[w] = slices.DeleteFunc(ws, func(x watcher) bool { return x.who == name })
	}
}

// leave removes name: a holder's release (with the mark, unless no one
// joined since it listed) or a waiter giving up (a plain delete).
func (m *model) leave(name string) {
	i := m.index(name)
	quiet := m.listed[name] == len(m.line) && i == len(m.line)-1
	if m.holds[name] && !quiet {
		m.version[name]++
		m.fire(name, false) // a getData watch fires once: on the mark
	}
	m.fire(name, true)
	m.line = slices.Delete(m.line, i, i+1)
	delete(m.holds, name)
	m.unwatch(name)
}

// settle delivers events until there are none, handling each as Entry.Wait
// does: hold at once when the decision the waiter watched under says what
// the event proves, else list again.
func (m *model) settle() {
	for len(m.queue) > 0 {
		ev := m.queue[0]
		m.queue = m.queue[1:]
		if m.index(ev.who) < 0 || m.holds[ev.who] {
			continue
		}
		m.unwatch(ev.who)
		if ev.deleted && ev.d.GoneHolds || !ev.deleted && ev.d.ReleaseHolds && ev.of.Ours() {
			m.hold(ev.who, false)
			continue
		}
		m.look(ev.who)
	}
}

// check is the safety property: whoever holds would be granted the lock by
// a fresh look.
func (m *model) check() {
	for i, n := range m.line {
		if m.holds[n.Name] {
			require.True(m.t, m.rule(m.line, i).Hold, "%s holds at %d in %v", n.Name, i, m.line)
		}
	}
}

// live is the liveness property, once things have settled: whoever a fresh
// look would grant the lock holds it.
func (m *model) live() {
	for i, n := range m.line {
		if m.rule(m.line, i).Hold {
			require.True(m.t, m.holds[n.Name], "%s is granted at %d but waits, in %v", n.Name, i, m.line)
		}
	}
}

// TestRulesInTheProtocol runs every rule through thousands of random
// histories: arrivals, releases by holders in any order (a semaphore's from
// the middle of its holders too), and waiters giving up.
func TestRulesInTheProtocol(t *testing.T) {
	for _, c := range []struct {
		name  string
		rule  line.Rule
		kinds []line.Kind
	}{
		{"mutex", exclusive, []line.Kind{line.Exclusive}},
		{"rwmutex", nil, []line.Kind{line.Exclusive, line.Shared, line.Shared}},
		{"semaphore 1", permitRule(1), []line.Kind{line.Permit}},
		{"semaphore 3", permitRule(3), []line.Kind{line.Permit}},
		{"election", leader, []line.Kind{line.Candidate}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for seed := range uint64(400) {
				r := rand.New(rand.NewPCG(seed, 7))
				rule := c.rule
				if rule == nil { // one line, two rules: each node by its kind
					rule = func(l []line.Node, me int) line.Decision {
						if l[me].Kind == line.Shared {
							return shared(l, me)
						}
						return exclusive(l, me)
					}
				}
				m := newModel(t, rule)
				seq := int32(0)
				for range 60 {
					switch op := r.IntN(10); {
					case op < 4 || len(m.line) == 0:
						m.arrive(node(c.kinds[r.IntN(len(c.kinds))], seq))
						seq++
					case op < 8 && len(m.holds) > 0:
						var held []string
						for _, n := range m.line {
							if m.holds[n.Name] {
								held = append(held, n.Name)
							}
						}
						m.leave(held[r.IntN(len(held))])
					default:
						m.leave(m.line[r.IntN(len(m.line))].Name)
					}
					m.settle()
					m.live()
				}
			}
		})
	}
}
