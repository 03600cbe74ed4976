package main

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
)

// The kinds of line holders and watch know, told apart by their nodes'
// names.
const (
	kindLock      = string(zklock.KindLock) // a Mutex's or RWMutex's (or Curator's, kazoo's, zk.Lock's)
	kindSemaphore = string(zklock.KindSemaphore)
	kindElection  = string(zklock.KindElection)
)

// recipeLine is one look at the line at a path, as the recipe whose line it
// is reads it: who holds is that recipe's rule's answer (Contender.Holds),
// not a guess made here.
type recipeLine struct {
	kind       string // "" when no contender was found
	permits    int    // a semaphore's, as its directory records it; 0 if unknown
	contenders []zklock.Contender
}

// readLine reads the line at path, whose children are as listed: with the
// Contenders of the recipe it belongs to.
func readLine(ctx context.Context, s *zkrecipes.Session, path string, children []string) (recipeLine, error) {
	l := recipeLine{kind: string(zklock.KindOf(children))}
	var err error
	switch l.kind {
	case kindElection:
		var el *zklock.Election
		if el, err = zklock.NewElection(s, path); err == nil {
			l.contenders, err = el.Contenders(ctx)
		}
	case kindSemaphore:
		l.contenders, l.permits, err = semaphoreLine(ctx, s, path)
	case kindLock:
		// An RWMutex's Contenders judges each node by its kind: readers
		// share, anyone else holds alone.
		var rw *zklock.RWMutex
		if rw, err = zklock.NewRWMutex(s, path); err == nil {
			l.contenders, err = rw.Contenders(ctx)
		}
	}
	return l, err
}

// semaphoreLine reads a semaphore's line, and then its number of permits:
// the number its directory records, which its Contenders judges by.
func semaphoreLine(ctx context.Context, s *zkrecipes.Session, path string) ([]zklock.Contender, int, error) {
	sm, err := zklock.NewSemaphore(s, path, 1) // the number given only counts where none is recorded
	if err != nil {
		return nil, 0, err
	}
	cs, err := sm.Contenders(ctx)
	if err != nil {
		return nil, 0, err
	}
	data, _, err := s.Conn().Get(path)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return cs, 0, nil
	case err != nil:
		return nil, 0, err
	}
	permits, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || permits < 1 {
		permits = 0
	}
	return cs, permits, nil
}

// listChildren lists path's children; no node is no children.
func listChildren(s *zkrecipes.Session, path string) ([]string, error) {
	names, _, err := s.Conn().Children(path)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	return names, err
}

// roles names a holder and a waiter in a kind of line.
func roles(kind string) (holder, waiter string) {
	if kind == kindElection {
		return "leader", "candidate"
	}
	return "holder", "waiter"
}

// positions gives each contender its role and its place among the
// waiters: 0 for a holder, 1... for the waiters in the order they will be
// served.
func positions(kind string, cs []zklock.Contender) (role []string, position []int) {
	holder, waiter := roles(kind)
	n := 0
	for _, c := range cs {
		if c.Holds {
			role, position = append(role, holder), append(position, 0)
			continue
		}
		n++
		role, position = append(role, waiter), append(position, n)
	}
	return role, position
}

// countHolders is how many of cs hold.
func countHolders(cs []zklock.Contender) int {
	n := 0
	for _, c := range cs {
		if c.Holds {
			n++
		}
	}
	return n
}
