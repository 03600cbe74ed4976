package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/zkrecipes/zkrecipes/zklock"
)

// electionDemo is the demo's second part: replicas, each with a session of
// its own, campaign in turn in one zklock.Election. Each leader leads for a
// while and then hands over, by resigning or because its session ends (as
// when its process exits); the next in line takes over with a higher term.
// The observer's session follows the leader with Observe, as a client that
// wants to know who leads would.
type electionDemo struct {
	*demoRun
	start time.Time

	mu      sync.Mutex
	elected []leaderTerm  // in the order the campaigns returned
	seen    []leaderTerm  // what Observe reported, in order; name "" for no leader
	news    chan struct{} // signalled after each addition to seen
	over    chan struct{} // closed when Observe's channel is
}

// leaderTerm is a leader and its term.
type leaderTerm struct {
	name string
	term int64
}

// seenList is what Observe reported.
func (p *electionDemo) seenList() string {
	var seen []string
	for _, lt := range p.seen {
		if lt.name == "" {
			seen = append(seen, "no leader")
		} else {
			seen = append(seen, fmt.Sprintf("%s in term %d", lt.name, lt.term))
		}
	}
	return strings.Join(seen, ", ")
}

// campaign is one replica's Campaign, once done is closed.
type campaign struct {
	done chan struct{}
	l    *zklock.Leadership
	err  error
}

func (d *demoRun) electionPart(ctx context.Context) error {
	p := &electionDemo{demoRun: d, news: make(chan struct{}, 1), over: make(chan struct{})}
	d.printf("\n2. Leader election at %s: %s campaigning.\n", d.electPath, count(d.replicas, "replica"))
	d.printf("Each leader leads for %v, then resigns or its session is closed (as when its process exits);\n", d.hold)
	d.printf("the next in line takes over, with a higher term.\n")
	sessions, err := d.connectAll(ctx, "replica", d.replicas)
	if err != nil {
		return err
	}
	defer closeAll(sessions)
	els := make([]*zklock.Election, d.replicas)
	for i, s := range sessions {
		if els[i], err = zklock.NewElection(s, d.electPath); err != nil {
			return err
		}
	}
	watcher, err := zklock.NewElection(d.observer, d.electPath)
	if err != nil {
		return err
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	work, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	// The replicas campaign one after another, each once the one before it
	// is in line, so that the line is replica-1, replica-2, ...
	p.start = time.Now()
	d.printf("The replicas campaign in turn; the line as ZooKeeper sees it:\n")
	campaigns := make([]*campaign, d.replicas)
	for i, el := range els {
		name := clientName("replica", i)
		c := &campaign{done: make(chan struct{})}
		campaigns[i] = c
		wg.Go(func() {
			defer close(c.done)
			c.l, c.err = el.Campaign(work, clientData(name))
			if c.err == nil {
				p.mu.Lock()
				p.elected = append(p.elected, leaderTerm{name, c.l.Token()})
				p.mu.Unlock()
			}
		})
		waitInLine(work, el.Contenders, name, c.done)
	}
	cs, err := watcher.Contenders(work)
	if err != nil {
		return err
	}
	d.outMu.Lock()
	printContenders(d.stdout, kindElection, cs)
	d.outMu.Unlock()

	d.printf("\nHand-overs (time since start, who, what happened):\n")
	for i, c := range campaigns {
		name := clientName("replica", i)
		select {
		case <-c.done:
		case <-work.Done():
			return context.Cause(work)
		}
		if c.err != nil {
			return fmt.Errorf("%s: campaign: %w", name, c.err)
		}
		d.event(p.start, name, "elected, term %d", c.l.Token())
		if i == 0 {
			wg.Go(func() { p.observe(work, watcher) })
		}
		sleep(work, d.hold)
		if i%2 == 0 {
			d.event(p.start, name, "resigns")
			if err := c.l.Resign(work); err != nil {
				return fmt.Errorf("%s: resign: %w", name, err)
			}
			continue
		}
		d.event(p.start, name, "stops: its session is closed, as when its process exits")
		sessions[i].Close()
		select {
		case <-c.l.Done():
		case <-work.Done():
			return context.Cause(work)
		}
		d.event(p.start, name, "is told: %v", c.l.Err())
	}
	// In the end Observe reports the election without a leader: the
	// latest state, which it never skips.
	if err := p.waitNoLeaderSeen(work); err != nil {
		return err
	}
	cancel(nil)
	wg.Wait()

	closeAll(sessions)
	left, err := children(d.observer, d.electPath)
	if err != nil {
		return err
	}
	p.verify(left)
	return nil
}

// observe prints and records the leaders Observe reports, until ctx ends.
func (p *electionDemo) observe(ctx context.Context, el *zklock.Election) {
	defer close(p.over)
	for l := range el.Observe(ctx) {
		lt := leaderTerm{clientOf(l.Value), l.Token}
		if l.Path == "" {
			lt = leaderTerm{}
		}
		p.mu.Lock()
		p.seen = append(p.seen, lt)
		p.mu.Unlock()
		if lt.name == "" {
			p.event(p.start, "observer", "sees no leader")
		} else {
			p.event(p.start, "observer", "sees %s lead, term %d", lt.name, lt.term)
		}
		select {
		case p.news <- struct{}{}:
		default:
		}
	}
}

// waitNoLeaderSeen waits until the latest leader Observe reported is none.
func (p *electionDemo) waitNoLeaderSeen(ctx context.Context) error {
	noneSeen := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.seen) > 0 && p.seen[len(p.seen)-1].name == ""
	}
	for !noneSeen() {
		select {
		case <-p.news:
		case <-p.over: // nothing more comes
			if noneSeen() {
				return nil
			}
			return errors.New("the observer's Observe ended before it saw the election without a leader")
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// verify prints the part's checks: leaders in the order of the line, terms
// increasing, Observe in agreement, nothing left behind.
func (p *electionDemo) verify(left []string) {
	p.printf("\n")
	inOrder, why := len(p.elected) == p.replicas, fmt.Sprintf("%d of %d replicas elected", len(p.elected), p.replicas)
	for i := 0; inOrder && i < len(p.elected); i++ {
		if got, want := p.elected[i].name, clientName("replica", i); got != want {
			inOrder, why = false, fmt.Sprintf("leader %d was %s, but %s had campaigned before it", i+1, got, want)
		}
	}
	p.check("Leaders elected in the order they campaigned", inOrder, why)

	increasing, why := true, ""
	for i := 1; increasing && i < len(p.elected); i++ {
		if prev, cur := p.elected[i-1], p.elected[i]; cur.term <= prev.term {
			increasing, why = false, fmt.Sprintf("%s's term %d after %s's %d", cur.name, cur.term, prev.name, prev.term)
		}
	}
	p.check("Terms strictly increasing", increasing, why)

	// Observe may skip a leader it was too slow to report, never reorder.
	agree := len(p.seen) > 0 && p.seen[len(p.seen)-1].name == ""
	next := 0
	for _, lt := range p.seen[:max(len(p.seen)-1, 0)] {
		for next < len(p.elected) && p.elected[next] != lt {
			next++
		}
		if next == len(p.elected) {
			agree = false
			break
		}
		next++
	}
	p.check("Observe, in another session, saw the leaders in the order elected, then none", agree, "it saw "+p.seenList())
	p.checkNoneLeft(p.electPath, left)
}
