package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
)

// What a path holds, as zklock tells it (recipeAt): the kinds of line
// (line.go), a queue, or else nothing, something else, or no node at all.
const (
	kindQueue   = "queue"
	kindEmpty   = ""        // a node with no children: any recipe may start there
	kindOther   = "other"   // children, none of them a recipe's zklock knows
	kindMissing = "missing" // no node
)

// recipeAt tells what the path whose children are listed holds (children
// nil and found false: no node there). It is the one place that tells the
// recipes apart: the contenders' nodes name a lock's, a semaphore's or an
// election's line (zklock.KindOf), a fairqueue's directories its queue.
func recipeAt(children []string, found bool) string {
	if !found {
		return kindMissing
	}
	if kind := zklock.KindOf(children); kind != zklock.KindNone {
		return string(kind)
	}
	// The directories a fairqueue makes under its path, each when first
	// needed: one of them makes the path a queue's. A queue that consumers
	// wait on before anything was put has only ready/, consumers/ and
	// dispatch/.
	for _, d := range queueDirs {
		if slices.Contains(children, d) {
			return kindQueue
		}
	}
	if len(children) > 0 {
		return kindOther
	}
	return kindEmpty
}

// queueDirs are the directories of a fairqueue's layout (see the package
// documentation): items and their keys, the consumers' tickets and
// inboxes, the dispatcher's election, items given back, delayed or dead.
var queueDirs = []string{"items", "keys", "ready", "consumers", "dispatch", "held", "delayed", "dead"}

// use is what a command works on at its PATH.
type use struct {
	name   string   // the command, for messages: "queue ls"
	kinds  []string // the kinds it works on (an empty node it always takes)
	create bool     // a missing PATH is fine: the command makes it, or waits for it
}

// lineUse is the use of a command on a lock's, a semaphore's or an
// election's line: kinds, and nodes of no recipe zklock knows, which the
// line passes over (a lock may be taken on a node that holds others).
func lineUse(name string, kind string, create bool) use {
	kinds := []string{kind}
	if create {
		kinds = append(kinds, kindOther)
	}
	return use{name: name, kinds: kinds, create: create}
}

// with is u working on more kinds.
func (u use) with(kinds ...string) use {
	u.kinds = append(slices.Clip(u.kinds), kinds...)
	return u
}

// useQueue is a queue subcommand's use; put and take make the queue. A
// queue's directory may hold directories that recipeAt does not name (a
// queue that consumers waited on before anything was put has none it
// names): a path is refused when its nodes are another recipe's.
func useQueue(name string, create bool) use {
	return use{name: name, kinds: []string{kindQueue, kindOther}, create: create}
}

// pathError is a PATH that does not exist, or that holds another recipe
// than the command works on: zklock exits with code, not 1.
type pathError struct {
	code int
	msg  string
}

func (e *pathError) Error() string { return e.msg }

// check lists path and returns a *pathError unless u works on what it
// holds.
func (u use) check(s *zkrecipes.Session, path string) error {
	children, _, err := s.Conn().Children(path)
	found := !errors.Is(err, zk.ErrNoNode)
	if err != nil && found {
		return fmt.Errorf("%s %s: %w", u.name, path, err)
	}
	switch kind := recipeAt(children, found); {
	case kind == kindMissing && !u.create:
		return &pathError{exitNoPath, fmt.Sprintf("%s: %s does not exist", u.name, path)}
	case kind == kindMissing || kind == kindEmpty || slices.Contains(u.kinds, kind):
		return nil
	default:
		var wants []string
		for _, k := range u.kinds {
			if k != kindOther {
				wants = append(wants, article(k))
			}
		}
		return &pathError{exitWrongRecipe, fmt.Sprintf("%s: %s holds %s, not %s", u.name, path, article(kind), strings.Join(wants, " or "))}
	}
}

// article names a kind of path with its article: "a lock", "an election".
func article(kind string) string {
	switch kind {
	case kindElection:
		return "an election"
	case kindOther:
		return "nodes of no recipe zklock knows"
	}
	return "a " + kind
}

// failed is the exit status and error of a command that failed with err:
// a *pathError's code, exitWrongRecipe when the library found another
// recipe's contenders at the path, else exitFailure.
func failed(err error) (int, error) {
	var pe *pathError
	switch {
	case errors.As(err, &pe):
		return pe.code, err
	case errors.Is(err, zklock.ErrPathInUse):
		return exitWrongRecipe, err
	}
	return exitFailure, err
}
