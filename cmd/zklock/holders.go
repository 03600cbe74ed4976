package main

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"

	"github.com/zkrecipes/zkrecipes/zklock"
)

// holders is `zklock holders`: list the contenders of a lock's, a
// semaphore's or an election's line, holders first.
func (c *cli) holders(args []string) (int, error) {
	c.listing = true
	path, err := c.onePath("holders", args)
	if err != nil {
		return exitUsage, err
	}

	ctx, s, done, err := connectUntilSignal(c)
	if err != nil {
		return exitFailure, err
	}
	defer done()
	if err := lineUse("holders", kindLock, false).with(kindSemaphore, kindElection).check(s, path); err != nil {
		return failed(err)
	}
	children, err := listChildren(s, path)
	if err != nil {
		return exitFailure, fmt.Errorf("holders %s: %w", path, err)
	}
	l, err := readLine(ctx, s, path, children)
	if err != nil {
		return exitFailure, err
	}
	if c.json {
		out := jsonHolders{Path: path, Kind: l.kind, Permits: l.permits, Contenders: []jsonContender{}}
		role, pos := positions(l.kind, l.contenders)
		for i, cn := range l.contenders {
			out.Contenders = append(out.Contenders, contenderJSON(cn, role[i], pos[i]))
		}
		return c.printJSON(exitOK, out)
	}
	if len(l.contenders) == 0 {
		fmt.Fprintf(c.stdout, "%s: no holder, no waiters\n", path)
		return exitOK, nil
	}
	printContenders(c.stdout, l.kind, l.contenders)
	return exitOK, nil
}

// printContenders prints a line as a table, holders first.
func printContenders(w io.Writer, kind string, cs []zklock.Contender) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tNODE\tSESSION\tTOKEN\tDATA")
	role, pos := positions(kind, cs)
	for i, c := range cs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", roleText(role[i], pos[i], c.Cached), c.Path, sessionID(c.SessionID), c.Token, printable(c.Data))
	}
	tw.Flush()
}

// roleText is a role as the text output shows it: "holder", "waiter 2";
// "holder (cached)" for a CachedMutex's holder, which may be idle between
// critical sections and lets go as soon as anyone joins.
func roleText(role string, position int, cached bool) string {
	switch {
	case position == 0 && cached:
		return role + " (cached)"
	case position == 0:
		return role
	}
	return role + " " + strconv.Itoa(position)
}

// printable shows node data as is when it is printable text, else quoted.
func printable(b []byte) string {
	s := string(b)
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// onePath parses the arguments of a command that takes one lock PATH and
// no flags of its own.
func (c *cli) onePath(name string, args []string) (string, error) {
	fs := c.flagSet(name)
	if err := c.parse(fs, args, name+" PATH"); err != nil {
		return "", err
	}
	if fs.NArg() != 1 {
		return "", usagef("%s: want one PATH, got %d arguments", name, fs.NArg())
	}
	path := fs.Arg(0)
	if err := checkPath(path); err != nil {
		return "", usagef("%s: %v", name, err)
	}
	return path, nil
}
